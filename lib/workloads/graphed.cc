#include "workloads/graphed.h"

#include <string>
#include <utility>
#include <vector>

#include "device/device.h"

namespace ltb {
namespace {

class GraphedWorkload final : public Workload {
 public:
  GraphedWorkload(std::unique_ptr<Workload> inner, const c10::Device& device)
      : inner_(std::move(inner)), graphs_(BackendOf(device).MakeGraphs(device)) {
    graph_ = graphs_->Capture([this] { inner_->Step(); });
  }

  void Step() override { graphs_->Replay(graph_); }
  void ResetStats() override { inner_->ResetStats(); }
  std::vector<std::pair<std::string, double>> Counters() const override {
    return inner_->Counters();
  }
  void BeginMeasurement() override { inner_->BeginMeasurement(); }
  void EndMeasurement() override { inner_->EndMeasurement(); }
  at::Tensor Evaluate() override { return inner_->Evaluate(); }
  std::vector<std::pair<std::string, at::Tensor>> Tensors() const override {
    return inner_->Tensors();
  }
  double FlopsPerStep() const override { return inner_->FlopsPerStep(); }
  int64_t UntrackedBytes() const override { return inner_->UntrackedBytes(); }

 private:
  std::unique_ptr<Workload> inner_;
  std::unique_ptr<StepGraphs> graphs_;
  size_t graph_ = 0;
};

}  // namespace

std::unique_ptr<Workload> GraphedSteps(std::unique_ptr<Workload> inner,
                                       const c10::Device& device) {
  if (inner->GraphsItself()) return inner;
  return std::make_unique<GraphedWorkload>(std::move(inner), device);
}

}  // namespace ltb
