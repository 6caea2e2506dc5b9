// The CPU's arithmetic ceiling per dtype, measured with register-resident
// multiply-add loops in the widest instructions the CPU has (AVX-512 or
// AVX2 FMA for fp32, AVX512_BF16 dot products or AMX tiles for bf16,
// AVX512_FP16 for fp16), run on every intra-op thread at once. No library
// kernel can beat it, so it bounds mfu from above.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

namespace ltb {

struct LoopPeak {
  double flops = 0;  // FLOP/s over all threads; 0: the CPU has no such arithmetic
  std::string isa;   // "avx512f fma", "amx-bf16", ...
};

// The instruction sets this CPU offers for `dtype`'s arithmetic, widest
// first ("amx-bf16", "avx512_bf16"); empty when it has none (fp16 without
// AVX512_FP16 is converted, not computed).
std::vector<std::string> NativeArithmetic(c10::ScalarType dtype);

// The fastest loop over NativeArithmetic(dtype) on `threads` threads
// (at::get_num_threads() when 0): the best of a few runs of ~0.1 s each, on
// one thread times LoopThreadsAlone(...) and on all of them at once.
LoopPeak MeasureLoopPeak(c10::ScalarType dtype, int threads = 0);

// How many times one thread's loop rate `threads` threads can reach
// together: one a physical core the process may run on (`cores`; threads
// beyond them, or two on one core's SMT siblings, share its arithmetic),
// within its CPU quota (`quota_cpus`, < 0: none); at least one.
double LoopThreadsAlone(int threads, int cores, double quota_cpus);

}  // namespace ltb
