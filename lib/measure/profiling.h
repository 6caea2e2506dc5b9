// --profile: a benchmark's steps run once more under LibTorch's profiler,
// apart from the timed steps, giving a Chrome trace, a table of the
// operators with the most self time, and on CUDA how busy the GPU was.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"

namespace ltb {

// One CPU operator event: ops on one thread nest inside each other.
struct OpEvent {
  std::string name;
  uint64_t thread = 0;
  uint64_t start_ns = 0, end_ns = 0;
};

struct OpTime {
  std::string name;
  int64_t calls = 0;
  double self_ns = 0;
};

// Self time (own duration less that of the ops nested in it) per operator
// name, most first.
std::vector<OpTime> SelfTimes(std::vector<OpEvent> events);

struct Span {
  uint64_t start_ns = 0, end_ns = 0;
};

// The share of [window.start, window.end) covered by at least one span.
double BusyFraction(std::vector<Span> spans, Span window);

// The table written next to a trace: operator, calls, self time, share.
std::string FormatTopOperators(const std::vector<OpTime>& ops, size_t rows);

struct ProfileResult {
  std::string trace_path;  // "" when LibTorch cannot write one; see no_trace
  std::string no_trace;    // why there is no trace
  std::string table_path;
  std::vector<OpTime> ops;
  double gpu_busy = -1;  // share of the profiled wall time a kernel ran; CUDA only
};

// Runs `steps` steps of `workload` under the profiler and writes
// <dir>/<benchmark name>.trace.json (when LibTorch has Kineto) and
// <dir>/<benchmark name>.ops.txt.
absl::StatusOr<ProfileResult> ProfileSteps(Workload& workload, const BenchSpec& spec,
                                           int steps, const std::string& dir);

// The file name stem of a benchmark: its name with / and : replaced.
std::string FileStem(const std::string& benchmark_name);

}  // namespace ltb
