// Test helpers shared by the model tests: parameter counts, and the FLOPs
// LibTorch's profiler counts for the matrix multiplications a function runs
// (workloads/profiled_flops.h) — an independent check of a model's FLOP formula.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <set>
#include <string>

#include "workloads/profiled_flops.h"

namespace ltb {

inline int64_t CountParameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const at::Tensor& p : m.parameters()) n += p.numel();
  return n;
}

// Matrix multiplications only.
inline double ProfiledMatmulFlops(const std::function<void()>& fn) {
  return ProfiledFlops(fn, {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"});
}

}  // namespace ltb
