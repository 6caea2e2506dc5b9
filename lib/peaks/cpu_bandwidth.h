// The CPU's memory bandwidth ceiling: the fastest of four ways to stream a
// buffer far larger than the last-level cache, on every intra-op thread: a
// plain read loop (as STREAM and llama.cpp's decode reach it), LibTorch's
// sum, a copy (bytes read + written) and a matrix-vector product; rounds
// repeat until the best stops rising. No benchmark that reads its bytes
// from memory can beat it, so it bounds mbu from above.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ltb {

struct BandwidthMethod {
  std::string name;  // "streaming read", "sum", "copy", "matrix-vector"
  double bytes_per_s = 0;
};

struct BandwidthPeak {
  double bytes_per_s = 0;  // the fastest method's
  std::string method;      // which one set it
  int64_t buffer_bytes = 0;
  int64_t llc_bytes = 0;  // the last-level cache's, as read (0: unknown)
  int threads = 0;
  int rounds = 0;
  std::vector<BandwidthMethod> methods;  // each one's best
};

// The buffer the measurement streams: 16 times the last-level cache, at
// least 1 GiB, and no more than a quarter of `available_bytes` (the host's
// free memory; ignored when not positive) unless that is under 1 GiB; a
// whole number of pages per thread: Llama/1B's 4.9 GB of fp32 weights are
// 16 times a large server L3 (300 MiB, a Xeon's), and a buffer of 4 times
// it could keep a share of its lines cached from pass to pass.
int64_t BandwidthBufferBytes(int64_t llc_bytes, int threads, int64_t available_bytes = 0);

// Measures on `threads` threads (at::get_num_threads() when 0), over a
// buffer of `buffer_bytes` (BandwidthBufferBytes when 0): rounds of every
// method, each the fastest of three passes, until the best has not risen by
// 1% for two rounds (at least 3 rounds, at most 12).
BandwidthPeak MeasureCpuBandwidth(int threads = 0, int64_t buffer_bytes = 0);

// A working set of at least this many times a device's cache comes from its
// memory: the bar a bandwidth measurement is kept by, and the one a
// benchmark's step must pass to raise a measured bandwidth peak (below it,
// part of what a step reads can come from the cache).
inline constexpr int64_t kCachesFromMemory = 8;

// Whether the measurement streamed a buffer no cache serves: at least 1 GiB
// and kCachesFromMemory times the last-level cache (a limited address space
// can cut the buffer down, and then the rate may be in part the cache's).
bool BandwidthBufferIsFull(const BandwidthPeak& p);

// "2.98e+10 bytes/s (measured: the fastest of 4 ways over 1 GiB on 2
// threads, 5 rounds: streaming read 2.98e+10, sum 2.9e+10, ...)".
std::string DescribeBandwidthPeak(const BandwidthPeak& p);

}  // namespace ltb
