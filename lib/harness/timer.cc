#include "harness/timer.h"

#include "harness/device.h"

namespace ltb {

Timeline::Timeline(const c10::Device& device, bool sync) : device_(device), sync_(sync) {
  if (sync_ && device_.is_cuda()) {
    events_ = cuda::MakeEventTimeline(device_.has_index() ? device_.index() : 0);
  }
}

Timeline::~Timeline() = default;

void Timeline::Clear() {
  if (events_) events_->Clear();
  marks_.clear();
}

void Timeline::Mark() {
  if (events_) return events_->Mark();
  if (sync_) Synchronize(device_);
  marks_.push_back(std::chrono::steady_clock::now());
}

std::vector<double> Timeline::Intervals() {
  if (events_) return events_->Intervals();
  std::vector<double> out;
  for (size_t i = 1; i < marks_.size(); ++i) {
    out.push_back(std::chrono::duration<double>(marks_[i] - marks_[i - 1]).count());
  }
  return out;
}

}  // namespace ltb
