#include "measure/profiling.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "device/device.h"

namespace ltb {
namespace {

// KinetoEvent reports nanoseconds in newer LibTorch and microseconds in older;
// the int/long argument prefers the first overload that compiles.
template <typename Event>
auto StartNs(const Event& e, int) -> decltype(uint64_t{e.startNs()}) {
  return e.startNs();
}
template <typename Event>
uint64_t StartNs(const Event& e, long) {
  return e.startUs() * 1000;
}
template <typename Event>
auto EndNs(const Event& e, int) -> decltype(uint64_t{e.endNs()}) {
  return e.endNs();
}
template <typename Event>
uint64_t EndNs(const Event& e, long) {
  return (e.startUs() + e.durationUs()) * 1000;
}

// The profiler on from construction until Stop(), or until the scope ends:
// a step that throws must not leave it recording every later benchmark.
class ProfilerSession {
 public:
  ProfilerSession(const torch::profiler::impl::ProfilerConfig& config,
                  const std::set<torch::profiler::impl::ActivityType>& activities) {
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
    on_ = true;
  }
  ProfilerSession(const ProfilerSession&) = delete;
  ProfilerSession& operator=(const ProfilerSession&) = delete;
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> Stop() {
    on_ = false;
    return torch::autograd::profiler::disableProfiler();
  }
  ~ProfilerSession() {
    if (!on_) return;
    try {
      torch::autograd::profiler::disableProfiler();
    } catch (...) {
      // Unwinding already: the step's error is the one to report.
    }
  }

 private:
  bool on_ = false;
};

}  // namespace

std::vector<OpTime> SelfTimes(std::vector<OpEvent> events) {
  // Parents start no later and end no earlier than their children: sort by
  // thread, start, then longest first, and walk with a stack per thread.
  std::sort(events.begin(), events.end(), [](const OpEvent& a, const OpEvent& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  std::vector<double> self(events.size());
  std::vector<size_t> stack;
  for (size_t i = 0; i < events.size(); ++i) {
    const OpEvent& e = events[i];
    self[i] = static_cast<double>(e.end_ns - e.start_ns);
    while (!stack.empty() && (events[stack.back()].thread != e.thread ||
                              events[stack.back()].end_ns <= e.start_ns)) {
      stack.pop_back();
    }
    if (!stack.empty()) self[stack.back()] -= static_cast<double>(e.end_ns - e.start_ns);
    stack.push_back(i);
  }
  std::map<std::string, OpTime> by_name;
  for (size_t i = 0; i < events.size(); ++i) {
    OpTime& t = by_name[events[i].name];
    t.name = events[i].name;
    ++t.calls;
    t.self_ns += self[i];
  }
  std::vector<OpTime> out;
  for (auto& [name, t] : by_name) out.push_back(t);
  std::sort(out.begin(), out.end(),
            [](const OpTime& a, const OpTime& b) { return a.self_ns > b.self_ns; });
  return out;
}

double BusyFraction(std::vector<Span> spans, Span window) {
  if (window.end_ns <= window.start_ns) return 0;
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  uint64_t busy = 0, covered_to = window.start_ns;
  for (const Span& s : spans) {
    const uint64_t start = std::max(s.start_ns, covered_to);
    const uint64_t end = std::min(s.end_ns, window.end_ns);
    if (end > start) {
      busy += end - start;
      covered_to = end;
    }
  }
  return static_cast<double>(busy) / static_cast<double>(window.end_ns - window.start_ns);
}

std::string FormatTopOperators(const std::vector<OpTime>& ops, size_t rows) {
  double total = 0;
  for (const OpTime& t : ops) total += t.self_ns;
  std::string out = absl::StrFormat("%-48s %8s %14s %7s\n", "operator", "calls",
                                    "self time ms", "share");
  for (size_t i = 0; i < ops.size() && i < rows; ++i) {
    absl::StrAppend(
        &out, absl::StrFormat("%-48s %8d %14.3f %6.1f%%\n", ops[i].name, ops[i].calls,
                              ops[i].self_ns / 1e6,
                              total > 0 ? 100 * ops[i].self_ns / total : 0.0));
  }
  // The rows left out, in one, so that the rows add up to the total.
  if (ops.size() > rows) {
    double rest = 0;
    int64_t calls = 0;
    for (size_t i = rows; i < ops.size(); ++i)
      rest += ops[i].self_ns, calls += ops[i].calls;
    absl::StrAppend(
        &out, absl::StrFormat("%-48s %8d %14.3f %6.1f%%\n",
                              absl::StrCat("(", ops.size() - rows, " others)"), calls,
                              rest / 1e6, total > 0 ? 100 * rest / total : 0.0));
  }
  absl::StrAppend(&out, absl::StrFormat("%-48s %8s %14.3f %6.1f%%\n",
                                        "total (CPU operators)", "", total / 1e6, 100.0));
  return out;
}

std::string FileStem(const std::string& benchmark_name) {
  return absl::StrReplaceAll(benchmark_name, {{"/", "_"}, {":", "-"}});
}

absl::StatusOr<ProfileResult> ProfileSteps(Workload& workload, const BenchSpec& spec,
                                           int steps, const std::string& dir) {
  namespace prof = torch::profiler::impl;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--profile: cannot create ", dir, ": ", ec.message()));
  }
  std::set<prof::ActivityType> activities = {prof::ActivityType::CPU};
  const DeviceBackend& backend = BackendOf(spec.device);
  if (backend.Caps().profiled_kernels) activities.insert(prof::ActivityType::CUDA);
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO,
                                    /*report_input_shapes=*/true);
  ProfilerSession session(config, activities);
  for (int i = 0; i < steps; ++i) workload.Step();
  Synchronize(spec.device);
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result = session.Stop();

  ProfileResult out;
  std::string stem = absl::StrCat(dir, "/", FileStem(spec.Name()));
  if (const char* rank = std::getenv("RANK");
      rank != nullptr && std::string(rank) != "0") {
    absl::StrAppend(&stem, ".rank", rank);  // every rank profiles its own steps
  }
  out.trace_path = stem + ".trace.json";
  out.table_path = stem + ".ops.txt";
  try {
    result->save(out.trace_path);
  } catch (const c10::Error& e) {
    // A LibTorch built without Kineto (Debian's) records operators but
    // cannot write a trace; the operator table is still made.
    out.trace_path.clear();
    out.no_trace = e.what_without_backtrace();
  }

  constexpr uint8_t kCpuOp = 0;  // libkineto::ActivityType::CPU_OP
  std::vector<OpEvent> cpu_ops;
  std::vector<Span> busy;  // the device's kernels, copies and fills
  Span window{~uint64_t{0}, 0};
  for (const auto& e : result->events()) {
    const uint64_t start = StartNs(e, 0), end = EndNs(e, 0);
    window.start_ns = std::min(window.start_ns, start);
    window.end_ns = std::max(window.end_ns, end);
    if (e.activityType() == kCpuOp && !e.isAsync()) {
      cpu_ops.push_back({e.name(), e.startThreadId(), start, end});
    } else if (backend.BusyActivity(e.activityType())) {
      busy.push_back({start, end});
    }
  }
  out.ops = SelfTimes(std::move(cpu_ops));
  if (backend.Caps().profiled_kernels)
    out.gpu_busy = BusyFraction(std::move(busy), window);

  std::ofstream table(out.table_path);
  table << spec.Name() << ": " << steps << " profiled steps\n\n"
        << FormatTopOperators(out.ops, 25);
  if (!table) return absl::InternalError(absl::StrCat("cannot write ", out.table_path));
  return out;
}

}  // namespace ltb
