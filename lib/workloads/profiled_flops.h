// Counting a step's FLOPs with LibTorch's profiler, for models whose FLOPs
// have no formula here (model files) and as a check of the formulas.
#pragma once

#include <functional>
#include <set>
#include <string>

namespace ltb {

// The FLOPs LibTorch's profiler counts for the operators `fn` runs (the
// matrix multiplications, convolutions and element-wise ops it has formulas
// for), or for those named in `ops` only; 0 when it counts none.
double ProfiledFlops(const std::function<void()>& fn,
                     const std::set<std::string>& ops = {});

}  // namespace ltb
