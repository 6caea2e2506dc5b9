// Test helper: the FLOPs LibTorch's profiler counts for the matrix
// multiplications a function runs — an independent check of a model's
// analytic FLOP formula.
#pragma once

#include <torch/csrc/autograd/profiler_kineto.h>

#include <functional>
#include <set>
#include <string>

namespace ltb {

inline double ProfiledMatmulFlops(const std::function<void()>& fn) {
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
    const std::string name = event.name();
    if (name == "aten::mm" || name == "aten::addmm" || name == "aten::bmm" ||
        name == "aten::baddbmm") {
      flops += static_cast<double>(event.flops());
    }
  }
  return flops;
}

}  // namespace ltb
