#include "harness/timer.h"

#include "harness/device.h"

namespace ltb {

StepTimer::StepTimer(const c10::Device& device, bool sync)
    : device_(device), sync_(sync) {
  if (sync_ && device_.is_cuda()) {
    events_ = cuda::MakeEventTimer(device_.has_index() ? device_.index() : 0);
  }
}

StepTimer::~StepTimer() = default;

void StepTimer::Start() {
  if (sync_) Synchronize(device_);
  if (events_) {
    events_->Start();
  } else {
    start_ = std::chrono::steady_clock::now();
  }
}

double StepTimer::Stop() {
  if (events_) return events_->StopSeconds();
  if (sync_) Synchronize(device_);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace ltb
