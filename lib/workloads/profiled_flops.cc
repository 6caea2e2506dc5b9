#include "workloads/profiled_flops.h"

#include <torch/csrc/autograd/profiler_kineto.h>

namespace ltb {

double ProfiledFlops(const std::function<void()>& fn, const std::set<std::string>& ops) {
  namespace prof = torch::profiler::impl;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO,
                                    /*report_input_shapes=*/true,
                                    /*profile_memory=*/false, /*with_stack=*/false,
                                    /*with_flops=*/true);
  const std::set<prof::ActivityType> activities = {prof::ActivityType::CPU};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  fn();
  const auto result = torch::autograd::profiler::disableProfiler();
  double flops = 0;
  for (const auto& event : result->events()) {
    if (ops.empty() || ops.count(event.name()))
      flops += static_cast<double>(event.flops());
  }
  return flops;
}

}  // namespace ltb
