#include "peaks/cpu_peak.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/threads.h"
#include "device/cpu_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ltb {
namespace {

// Each loop runs `iters` rounds of kChains independent multiply-adds on
// registers (enough chains to cover the latency of two FMA ports), each
// chain carried through the addend as in a GEMM's inner loop (carried
// through the multiplicand, the same loop runs at half the rate or less on
// some cores), and returns the FLOPs it did; the result is folded into
// `sink` so that the compiler cannot drop the loop.
constexpr int kChains = 12;
std::atomic<float> sink{0};

#if defined(__x86_64__)

// Every x86-64 CPU has SSE2: a multiply and an add, 4 lanes each, without
// FMA (a CPU with no AVX, or LTB_MAX_CPU_ISA=default): kChains / 2 chains of
// multiplies and as many of adds, side by side, each carried through its
// register. The factor and the addend are read from volatiles, so that the
// compiler can neither hoist a product of constants out of the loop (which
// left the adds alone, each counted as two FLOPs: twice the arithmetic done)
// nor fold a multiply by one. On a two-core AVX2 EPYC, whose separate
// multiply and add pipes keep pace with its FMA ones, the loop reaches
// 7.8e10, beside 7.1e10 to 7.8e10 for its FMA loop.
volatile float sse_factor = 1.0f, sse_addend = 0.0f;

double LoopSseFp32(int64_t iters) {
  constexpr int kPairs = kChains / 2;
  __m128 mul[kPairs], add[kPairs];
  for (int j = 0; j < kPairs; ++j) {
    mul[j] = _mm_set1_ps(1.0f + j);
    add[j] = _mm_set1_ps(2.0f + j);
  }
  const __m128 x = _mm_set1_ps(sse_factor), y = _mm_set1_ps(sse_addend);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kPairs; ++j) {
      mul[j] = _mm_mul_ps(mul[j], x);
      add[j] = _mm_add_ps(add[j], y);
    }
  }
  float out[4];
  for (int j = 1; j < kPairs; ++j) mul[0] = _mm_add_ps(mul[0], mul[j]);
  for (int j = 0; j < kPairs; ++j) mul[0] = _mm_add_ps(mul[0], add[j]);
  _mm_storeu_ps(out, mul[0]);
  sink.store(out[0], std::memory_order_relaxed);
  return static_cast<double>(iters) * kPairs * 2 * 4;
}

__attribute__((target("avx2,fma"))) double LoopAvx2Fp32(int64_t iters) {
  __m256 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(1.0f + j);
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(0.001f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_ps(x, y, acc[j]);
  }
  float out[8];
  for (int j = 1; j < kChains; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  _mm256_storeu_ps(out, acc[0]);
  sink.store(out[0], std::memory_order_relaxed);
  return static_cast<double>(iters) * kChains * 8 * 2;
}

__attribute__((target("avx512f"))) double LoopAvx512Fp32(int64_t iters) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(1.0f + j);
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(x, y, acc[j]);
  }
  for (int j = 1; j < kChains; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  float out[16];
  _mm512_storeu_ps(out, acc[0]);
  sink.store(out[0], std::memory_order_relaxed);
  return static_cast<double>(iters) * kChains * 16 * 2;
}

// VDPBF16PS: each of 16 fp32 lanes adds two bf16 products.
__attribute__((target("avx512f,avx512bf16"))) double LoopAvx512Bf16(int64_t iters) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(1.0f + j);
  const __m512 small = _mm512_set1_ps(1e-3f);
  const __m512bh a = _mm512_cvtne2ps_pbh(small, small);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, a);
  }
  for (int j = 1; j < kChains; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  float out[16];
  _mm512_storeu_ps(out, acc[0]);
  sink.store(out[0], std::memory_order_relaxed);
  return static_cast<double>(iters) * kChains * 16 * 2 * 2;
}

__attribute__((target("avx512f,avx512fp16"))) double LoopAvx512Fp16(int64_t iters) {
  __m512h acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ph(static_cast<_Float16>(1.0f));
  const __m512h x = _mm512_set1_ph(static_cast<_Float16>(0.03f));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ph(x, x, acc[j]);
  }
  for (int j = 1; j < kChains; ++j) acc[0] = _mm512_add_ph(acc[0], acc[j]);
  _Float16 out[32];
  _mm512_storeu_ph(out, acc[0]);
  sink.store(static_cast<float>(out[0]), std::memory_order_relaxed);
  return static_cast<double>(iters) * kChains * 32 * 2;
}

// AMX: TDPBF16PS multiplies a 16x32 bf16 tile by a 32x16 one into a 16x16
// fp32 tile: 16 * 16 * 32 multiply-adds. Four accumulator tiles are
// independent; the inputs stay in tiles 4 and 5.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

bool RequestAmx() {
  // Linux hands out AMX state only on request (ARCH_REQ_XCOMP_PERM for
  // XFEATURE_XTILEDATA), once per process.
  static const bool granted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return granted;
}

__attribute__((target("amx-tile,amx-bf16"))) double LoopAmxBf16(int64_t iters) {
  TileConfig config;
  for (int t = 0; t < 6; ++t) {
    config.rows[t] = 16;
    config.colsb[t] = 64;
  }
  _tile_loadconfig(&config);
  alignas(64) static const uint16_t inputs[16 * 32] = {};  // bf16 zeros
  alignas(64) float out[16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, inputs, 64);
  _tile_loadd(5, inputs, 64);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 5);
    _tile_dpbf16ps(2, 4, 5);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  sink.store(out[0], std::memory_order_relaxed);
  return static_cast<double>(iters) * 4 * 16 * 16 * 32 * 2;
}

#endif  // __x86_64__

using Loop = double (*)(int64_t);

struct Kernel {
  const char* isa;
  Loop loop;
};

std::vector<Kernel> Kernels(c10::ScalarType dtype) {
  std::vector<Kernel> out;
#if defined(__x86_64__)
  switch (dtype) {
    case c10::kFloat:
      if (CpuHas("avx512f")) out.push_back({"avx512f fma", LoopAvx512Fp32});
      if (CpuHas("avx2") && CpuHas("fma")) out.push_back({"avx2 fma", LoopAvx2Fp32});
      out.push_back({"sse2 multiply and add", LoopSseFp32});
      break;
    case c10::kBFloat16:
      if (CpuHas("amx_bf16") && CpuHas("amx_tile") && RequestAmx()) {
        out.push_back({"amx-bf16", LoopAmxBf16});
      }
      if (CpuHas("avx512_bf16"))
        out.push_back({"avx512_bf16 dot products", LoopAvx512Bf16});
      break;
    case c10::kHalf:
      if (CpuHas("avx512_fp16")) out.push_back({"avx512_fp16 fma", LoopAvx512Fp16});
      break;
    default:
      break;
  }
#endif
  return out;
}

// FLOP/s of `loop` run on `threads` threads at once for `iters` rounds each.
// Threads of its own: at::parallel_for may run a range this short inline.
double RunOnThreads(Loop loop, int threads, int64_t iters) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> flops(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) {
      }
      flops[t] = loop(iters);
    });
  }
  while (ready.load() < threads) {
  }
  const auto start = std::chrono::steady_clock::now();
  go.store(true);
  for (std::thread& t : pool) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double total = 0;
  for (const double f : flops) total += f;
  return total / seconds;
}

}  // namespace

std::vector<std::string> NativeArithmetic(c10::ScalarType dtype) {
  std::vector<std::string> isas;
  for (const Kernel& k : Kernels(dtype)) isas.push_back(k.isa);
  return isas;
}

double LoopThreadsAlone(int threads, int cores, double quota_cpus) {
  double n = std::min(threads, cores);
  if (quota_cpus > 0) n = std::min(n, quota_cpus);
  return std::max(1.0, n);
}

LoopPeak MeasureLoopPeak(c10::ScalarType dtype, int threads) {
  if (threads <= 0) threads = at::get_num_threads();
  // Threads past the physical cores (OMP_NUM_THREADS=4 on two) add no
  // arithmetic: 4 x one thread's rate read 7.0e11 on a two-core Xeon whose
  // cores reach 3.8e11 together.
  const double alone = LoopThreadsAlone(
      threads, CountPhysicalCores("/sys/devices/system/cpu", AllowedCpus()),
      ReadCpuQuota("").cpus);
  LoopPeak best;
  for (const Kernel& k : Kernels(dtype)) {
    // Size the run from a short one: about 0.1 s, then keep the best of three
    // (clocks ramp up; another process may pass by). One thread's rate times
    // the threads that have a core each bounds what they reach together from
    // above (all-core clocks are no higher than one core's), and holds when a
    // thread of the process's pools still spins on a core while the loop runs.
    int64_t iters = 1000;
    double rate = RunOnThreads(k.loop, 1, iters);
    iters = std::max<int64_t>(iters, static_cast<int64_t>(0.1 * rate / k.loop(1)));
    double fastest = 0;
    for (int i = 0; i < 3; ++i) {
      fastest = std::max({fastest, alone * RunOnThreads(k.loop, 1, iters),
                          RunOnThreads(k.loop, threads, iters)});
    }
    if (fastest > best.flops) best = {fastest, k.isa};
  }
  return best;
}

}  // namespace ltb
