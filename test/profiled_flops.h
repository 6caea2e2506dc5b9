// Test helpers shared by the model tests: parameter counts, and the FLOPs
// LibTorch's profiler counts for the operations a function runs — an
// independent check of a model's analytic FLOP formula.
#pragma once

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/nn/module.h>

#include <functional>
#include <set>
#include <string>

namespace ltb {

inline int64_t CountParameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const at::Tensor& p : m.parameters()) n += p.numel();
  return n;
}

// Sum of the profiler's FLOP counts over the events named in `ops`.
inline double ProfiledFlops(const std::function<void()>& fn,
                            const std::set<std::string>& ops) {
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
    if (ops.count(event.name())) flops += static_cast<double>(event.flops());
  }
  return flops;
}

// Matrix multiplications only.
inline double ProfiledMatmulFlops(const std::function<void()>& fn) {
  return ProfiledFlops(fn, {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"});
}

}  // namespace ltb
