// The serve phase: an inference workload under MLPerf LoadGen's load, in one
// of its scenarios. LoadGen issues queries; a dynamic batcher gathers their
// samples into batches (up to a size, or until a wait runs out), runs the
// workload on samples built before the clock starts, and completes each
// sample; LoadGen's own results become the benchmark's counters, and its
// logs are kept.
#pragma once

#include <ATen/core/Tensor.h>
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "family/family.h"

namespace mlperf {
enum class TestScenario;  // loadgen/test_settings.h
struct TestSettings;
}  // namespace mlperf

namespace ltb {

// One sample of a query: LoadGen's response id, the sample's index in the
// library, and when the batcher was given it.
struct ServeRequest {
  uintptr_t id = 0;
  size_t index = 0;
  std::chrono::steady_clock::time_point arrived;
};

// A function one thread hands a worker thread and waits for: the worker
// runs it between its own steps. A device's per-thread state (cuDNN's
// attention keeps its plans per thread) is then the worker's, so that a
// warm-up handed this way warms what serving runs. Guarded by the worker's
// mutex.
class HandedCall {
 public:
  // The handing thread, holding `lock` (the worker's): hands `f` over,
  // waking the worker by `wake`, and waits by `done` until it has run;
  // rethrows what it threw.
  void Hand(std::unique_lock<std::mutex>& lock, std::condition_variable& wake,
            std::condition_variable& done, const std::function<void()>& f);
  bool pending() const { return f_ != nullptr && !ran_; }
  // The worker, holding `lock`: runs the call with the lock released, then
  // wakes the handing thread by `done`.
  void Run(std::unique_lock<std::mutex>& lock, std::condition_variable& done);

 private:
  const std::function<void()>* f_ = nullptr;
  bool ran_ = false;
  std::exception_ptr error_;
};

// Gathers requests into batches on one worker thread: a batch starts with
// the oldest request waiting and runs once it holds `max_batch` requests or
// the oldest has waited `timeout_us`, whichever comes first. `run` gets each
// batch, in arrival order, on the worker thread.
class Batcher {
 public:
  using RunBatch = std::function<void(const std::vector<ServeRequest>&)>;
  Batcher(int64_t max_batch, int64_t timeout_us, RunBatch run);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues requests; they keep their order.
  void Submit(const std::vector<ServeRequest>& requests);
  // Returns once every request submitted so far has been run.
  void Drain();
  // Runs `f` on the worker thread, between batches, and returns once it has.
  void RunOnWorker(const std::function<void()>& f);

  int64_t batches() const;
  int64_t largest_batch() const;

 private:
  void Work();

  const int64_t max_batch_;
  const std::chrono::microseconds timeout_;
  RunBatch run_;
  mutable std::mutex mu_;
  std::condition_variable wake_;  // the worker: requests, or the end
  std::condition_variable idle_;  // Drain: nothing queued or running
  std::deque<ServeRequest> queue_;
  bool running_batch_ = false;
  bool stop_ = false;
  int64_t batches_ = 0;
  int64_t largest_ = 0;
  HandedCall call_;
  std::thread worker_;
};

// `count` samples made like a batch of a workload's inputs (B, ...): sample i
// is row i % B, rolled along its last dimension by i / B, so that samples
// differ and keep the inputs' kind (token ids stay valid ids).
std::vector<at::Tensor> MakeSamples(const at::Tensor& batch_inputs, size_t count);

// Runs batches of samples through a workload: copies them into a batch
// allocated once (as a server's input buffer is), runs the workload on it
// and waits for the device, so that a sample completes when its output
// exists.
class BatchRunner {
 public:
  BatchRunner(Workload& workload, int64_t max_batch, const c10::Device& device);
  // The outputs of `samples[r.index]` for each request, batch first.
  at::Tensor Run(const std::vector<at::Tensor>& samples,
                 const std::vector<ServeRequest>& batch);

 private:
  Workload& workload_;
  c10::Device device_;
  at::Tensor staging_;
};

// An error naming the valid choices where a serve setting cannot run: an
// unknown scenario, a bound, rate or count out of range.
absl::Status ValidateServe(const ServeSettings& serve);
// The longest minimum duration (--serve_min_s), in seconds, and the most
// samples Offline's one query may hold (1.1 x rate x duration, as LoadGen
// sizes it): beyond them LoadGen's whole milliseconds and counts overflow,
// or its query would not fit in memory.
inline constexpr double kMaxServeSeconds = 1e6;
inline constexpr double kMaxOfflineSamples = 1e9;

// Why LoadGen's early stopping was not met, from its early_stopping_result
// (results.cc EarlyStopping), in its own counts: SingleStream's and
// MultiStream's queries run and needed, with the flag that runs them;
// Server's queries and how many more within the bound it would need, and
// `over` of them over the bound (-1: not known): none over, the count
// alone was too small, and the flag that runs enough says so.
std::string EarlyStoppingWhy(const std::string& result, int64_t over = -1);
// The label's clause of an unmet early stopping, from the detail log: the
// sample latencies' result (Server's over-latency count with it), or served
// generation's TTFT and TPOT results, each that was not met named.
std::string EarlyStoppingClause(const std::map<std::string, std::string>& detail);

// LoadGen's detail log (mlperf_log_detail.txt) as key -> value text, the
// last value of each key.
std::map<std::string, std::string> ParseDetailLog(const std::string& text);

// The counters and label of one LoadGen test, from its detail log's values:
// samples/s (and tokens/s when `tokens_per_sample` > 0), Server's scheduled
// and completed QPS and goodput, the latencies in ms, and valid (1 or 0)
// with LoadGen's reason in the label; MultiStream adds the same of its
// queries (query_p99_ms: the figure MLPerf judges it by).
struct ServeCounters {
  std::vector<std::pair<std::string, double>> counters;
  std::string label;
  double seconds_per_sample = 0;  // 1 / samples/s: the benchmark's time
  // A peak search that found no peak: the benchmark's error, for its time
  // would read as a rate; it names the starting test's samples/s and p99
  // (Google Benchmark reports no counter of an error; the label stays).
  std::string error;
};
ServeCounters CountersFromDetail(const std::map<std::string, std::string>& detail,
                                 const ServeSettings& serve, double tokens_per_sample);

// Server's peak search (LoadGen's FindPeakPerformance), as its detail log
// tells it: the peak QPS found, or why the search could not start (the
// starting rate missed the bound).
struct PeakSearch {
  bool found = false;
  double qps = 0;
  std::string why_not;  // LoadGen's message when not found
};
PeakSearch PeakFromDetailLog(const std::string& text);

// `out` with serve.find_peak's result from the detail log's text: the peak
// QPS found (`peak_qps`, the benchmark's time 1 / peak), or 0 and LoadGen's
// reason in the label; `out` itself without a peak search.
ServeCounters WithPeak(ServeCounters out, const std::string& detail_text,
                       const ServeSettings& serve);

// The counters and label of a LoadGen test from its detail log's text:
// CountersFromDetail's, WithPeak.
ServeCounters CountersFromLog(const std::string& detail_text, const ServeSettings& serve,
                              double tokens_per_sample);

// LoadGen's settings for a test of `serve` over a library of `samples`:
// scenario, mode (PerformanceOnly, or FindPeakPerformance with
// serve.find_peak), duration, queries, rate and samples a query; the
// latency bounds are the caller's (a sample's, or tokens').
void SetLoadGenSettings(const ServeSettings& serve, size_t samples,
                        mlperf::TestSettings& settings);

// A latency bound of `ms` milliseconds as LoadGen takes it: whole
// nanoseconds, rounded. BoundInNanoseconds: whether a bound is one, finite
// and at least a nanosecond (a smaller one would be 0, no bound at all);
// kBoundMustBe says so to the flag that gave another.
inline uint64_t BoundNanoseconds(double ms) {
  return static_cast<uint64_t>(std::llround(ms * 1e6));
}
inline bool BoundInNanoseconds(double ms) { return std::isfinite(ms) && ms * 1e6 >= 1; }
inline constexpr char kBoundMustBe[] =
    ": the bound must be a number of milliseconds > 0, at least 1e-06 (a nanosecond, "
    "LoadGen's unit), or left out for LoadGen's 100 ms";

// SingleStream's and MultiStream's expected latency, from `query_s`, the
// best measured time of one query (a sample, or samples_per_query in
// batches of max_batch): LoadGen generates queries at that interval for
// twice the minimum duration before the test, and ends early, invalid, when
// they run out before it; its defaults (1 ms, 8 ms) run out on a faster
// model. No shorter than keeps the queries generated to
// kMaxGeneratedQueries; other scenarios, or no time, are left unchanged.
void SetExpectedLatency(double query_s, const ServeSettings& serve,
                        mlperf::TestSettings& settings);
inline constexpr double kMaxGeneratedQueries = 1e6;

// The decimals LoadGen's peak search resolves Server's rate to: the fewest
// that make a step at most 1% of the starting rate.
int PeakSearchDecimals(double target_qps);

// The folder of one serve benchmark's LoadGen logs under `log_dir`; of its
// repetition `repetition` (from 0), the folder's name then _repetitionN
// from the second on, so that no repetition's logs replace another's.
std::string ServeLogFolder(const std::string& log_dir, const BenchSpec& spec,
                           int repetition = 0);
// That folder under spec.serve.log_dir, made, for this repetition of `spec`
// (the calls with its name in a row); an error naming it where it cannot be.
absl::StatusOr<std::string> MakeServeLogFolder(const BenchSpec& spec);

// LoadGen's scenario of a --scenario name (SingleStream, MultiStream,
// Server, Offline).
mlperf::TestScenario ScenarioOf(const std::string& name);

// One serve benchmark: one LoadGen test over `workload` (built at the
// spec's max_batch), its counters set on `state`. Returns an error to report
// instead (the workload cannot run batches it is given, an interrupt). An
// interrupt returns as soon as the batch running has finished: LoadGen
// cannot end a test early, so it goes on in the background, completing its
// samples unrun, until the process exits; its logs hold what it wrote.
absl::Status RunServe(benchmark::State& state, Workload& workload, const BenchSpec& spec,
                      double tokens_per_sample);

}  // namespace ltb
