// Counting a step's FLOPs as it runs, for models whose FLOPs have no formula
// here (model files), and with LibTorch's profiler as a check of the formulas.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

namespace ltb {

// The FLOPs LibTorch's profiler counts for the operators `fn` runs (the
// matrix multiplications, convolutions and element-wise ops it has formulas
// for), or for those named in `ops` only; 0 when it counts none.
double ProfiledFlops(const std::function<void()>& fn,
                     const std::set<std::string>& ops = {});

// What StepFlops counted, and the operators it ran whose FLOPs it could not
// count (a quantised convolution's packed weights say nothing of its shape).
struct CountedFlops {
  double flops = 0;
  std::vector<std::string> uncounted;
};

// The FLOPs of the operators `fn` runs through LibTorch's dispatcher, on
// any thread (a forked task's too), as the suite counts a model's: 2 per
// multiply-add of every matrix multiplication (mm, addmm, bmm, baddbmm, mv,
// addmv, linear, and linear layers of packed weights, quantised ones too,
// by their input's last dimension and their output), convolution (whichever
// of conv1d/2d/3d, convolution or _convolution a traced or scripted model
// calls, transposed too) and attention (scaled_dot_product_attention over
// the full query-key rectangle, as the families count it); element-wise ops
// are not counted. An operator inside a counted one (convolution's
// mkldnn_convolution, attention's bmm) is not counted again. An operator
// that may convolve or multiply matrices (its name says conv1d/2d/3d,
// convolution, conv_transpose, linear, matmul, gemm, _mm or attention) with
// no counted one inside is listed as
// uncounted. 0 FLOPs when `fn` runs none of them (an AOTInductor package's
// own kernels).
CountedFlops StepFlops(const std::function<void()>& fn);

}  // namespace ltb
