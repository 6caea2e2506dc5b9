#include "peaks/cpu_bandwidth.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mv.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/sum.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "device/cpu_memory.h"

namespace ltb {
namespace {

constexpr int64_t kOneGiB = int64_t{1} << 30;
std::atomic<float> read_sink{0};

// Sums [begin, end) with 8 independent 4-lane accumulators (GCC's vector
// extension: SSE2 on every x86-64, NEON on Arm), enough loads in flight to
// stream at the memory's rate; the sum goes to `read_sink`.
void ReadSlice(const float* begin, const float* end) {
  using v4 = float __attribute__((vector_size(16)));
  v4 acc[8] = {};
  const float* p = begin;
  for (; p + 32 <= end; p += 32) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      v4 x;
      __builtin_memcpy(&x, p + 4 * j, sizeof(x));
      acc[j] += x;
    }
  }
  float total = 0;
  for (; p < end; ++p) total += *p;
  for (int j = 0; j < 8; ++j) {
    for (int k = 0; k < 4; ++k) total += acc[j][k];
  }
  read_sink.store(total, std::memory_order_relaxed);
}

// Seconds for `threads` threads to read their slices of `data` at once.
double StreamingRead(const float* data, int64_t n, int threads) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  const int64_t per = n / threads;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) {
      }
      ReadSlice(data + t * per, t == threads - 1 ? data + n : data + (t + 1) * per);
    });
  }
  while (ready.load() < threads) {
  }
  const auto start = std::chrono::steady_clock::now();
  go.store(true);
  for (std::thread& t : pool) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double SecondsOf(const std::function<void()>& op) {
  const auto start = std::chrono::steady_clock::now();
  op();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int64_t BandwidthBufferBytes(int64_t llc_bytes, int threads, int64_t available_bytes) {
  int64_t want = std::max(kOneGiB, 16 * llc_bytes);
  if (available_bytes > 0) want = std::max(kOneGiB, std::min(want, available_bytes / 4));
  const int64_t unit =
      int64_t{4096} * std::max(1, threads) * 8192;  // whole pages, mv rows
  return (want + unit - 1) / unit * unit;
}

BandwidthPeak MeasureCpuBandwidth(int threads, int64_t buffer_bytes) {
  if (threads <= 0) threads = at::get_num_threads();
  const int64_t llc = LastLevelCacheBytes();
  if (buffer_bytes <= 0) {
    buffer_bytes = BandwidthBufferBytes(llc, threads, ReadHostMemory().available);
  }
  // On 2 MiB pages where the kernel grants them (transparent huge pages in
  // "madvise" mode, Linux's default, need asking): on 4 KiB pages the TLB's
  // misses hold a stream down (here 19 GB/s against 23 on huge pages, and
  // torch.sum over a large tensor, which gets them, would beat the peak).
  // Written once before any timing, so that every page is mapped.
  constexpr size_t kHugePage = size_t{2} << 20;
  // Where the address space is limited (ulimit -v), a smaller buffer: half
  // as large each time down to 256 MiB, the size the context then names.
  void* raw = nullptr;
  while (posix_memalign(&raw, kHugePage, static_cast<size_t>(buffer_bytes)) != 0) {
    if (buffer_bytes / 2 < (int64_t{256} << 20)) throw std::bad_alloc();
    buffer_bytes = buffer_bytes / 2 / (8192 * 4) * (8192 * 4);
  }
  std::unique_ptr<void, decltype(&free)> owned(raw, &free);
  const int64_t n = buffer_bytes / 4;
#ifdef MADV_HUGEPAGE
  madvise(raw, static_cast<size_t>(buffer_bytes), MADV_HUGEPAGE);
#endif
  const at::Tensor buffer = at::from_blob(raw, {n}, at::kFloat);
  buffer.fill_(1);
  const at::Tensor half_a = buffer.narrow(0, 0, n / 2),
                   half_b = buffer.narrow(0, n / 2, n / 2);
  const at::Tensor matrix = buffer.view({-1, 8192});
  const at::Tensor vector = at::ones({8192}, at::kFloat);
  at::Tensor product = at::empty({matrix.size(0)}, at::kFloat);
  const float* data = buffer.data_ptr<float>();
  const double bytes = static_cast<double>(n) * 4;
  // Each method: (name, seconds of one pass); every pass moves `bytes`
  // (the copy reads one half and writes the other).
  const std::vector<std::pair<std::string, std::function<double()>>> methods = {
      {"streaming read", [&] { return StreamingRead(data, n, threads); }},
      {"sum",
       [&] {
         return SecondsOf([&] { read_sink.store(at::sum(buffer).item<float>()); });
       }},
      {"copy", [&] { return SecondsOf([&] { half_b.copy_(half_a); }); }},
      {"matrix-vector",
       [&] { return SecondsOf([&] { at::mv_out(product, matrix, vector); }); }},
  };
  BandwidthPeak peak;
  peak.buffer_bytes = buffer_bytes;
  peak.llc_bytes = llc;
  peak.threads = threads;
  std::vector<double> best(methods.size(), 0);
  int steady = 0;
  for (int round = 0; round < 12 && steady < 2; ++round) {
    const double before = *std::max_element(best.begin(), best.end());
    for (size_t m = 0; m < methods.size(); ++m) {
      for (int pass = 0; pass < 3; ++pass)
        best[m] = std::max(best[m], bytes / methods[m].second());
    }
    const double after = *std::max_element(best.begin(), best.end());
    steady = round >= 2 && after <= before * 1.01 ? steady + 1 : 0;
    peak.rounds = round + 1;
  }
  for (size_t m = 0; m < methods.size(); ++m) {
    peak.methods.push_back({methods[m].first, best[m]});
    if (best[m] > peak.bytes_per_s) {
      peak.bytes_per_s = best[m];
      peak.method = methods[m].first;
    }
  }
  return peak;
}

bool BandwidthBufferIsFull(const BandwidthPeak& p) {
  return p.buffer_bytes >= kOneGiB && p.buffer_bytes >= kCachesFromMemory * p.llc_bytes;
}

std::string DescribeBandwidthPeak(const BandwidthPeak& p) {
  std::vector<std::string> each;
  for (const BandwidthMethod& m : p.methods) {
    each.push_back(absl::StrFormat("%s %.4g", m.name, m.bytes_per_s));
  }
  return absl::StrFormat(
      "measured: %s, the fastest of %d ways to stream %.3g GiB (the last-level cache: "
      "%.3g MiB) on %d threads, best of %d rounds: %s",
      p.method, static_cast<int>(p.methods.size()),
      static_cast<double>(p.buffer_bytes) / kOneGiB,
      static_cast<double>(p.llc_bytes) / (1 << 20), p.threads, p.rounds,
      absl::StrJoin(each, ", "));
}

}  // namespace ltb
