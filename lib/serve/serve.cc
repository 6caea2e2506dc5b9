#include "serve/serve.h"

#include <ATen/ops/empty_like.h>
#include <c10/core/InferenceMode.h>
#include <loadgen/loadgen.h>
#include <loadgen/query_sample_library.h>
#include <loadgen/system_under_test.h>
#include <loadgen/test_settings.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/format.h"
#include "base/interrupt.h"
#include "device/device.h"

namespace ltb {

void HandedCall::Hand(std::unique_lock<std::mutex>& lock, std::condition_variable& wake,
                      std::condition_variable& done, const std::function<void()>& f) {
  done.wait(lock, [this] { return f_ == nullptr; });  // one call at a time
  f_ = &f;
  ran_ = false;
  error_ = nullptr;
  wake.notify_all();
  done.wait(lock, [this] { return ran_; });
  f_ = nullptr;
  done.notify_all();
  if (error_) std::rethrow_exception(error_);
}

void HandedCall::Run(std::unique_lock<std::mutex>& lock, std::condition_variable& done) {
  const std::function<void()>* f = f_;
  lock.unlock();
  std::exception_ptr error;
  try {
    (*f)();
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  error_ = error;
  ran_ = true;
  done.notify_all();
}

Batcher::Batcher(int64_t max_batch, int64_t timeout_us, RunBatch run)
    : max_batch_(std::max<int64_t>(1, max_batch)),
      timeout_(timeout_us),
      run_(std::move(run)),
      worker_([this] { Work(); }) {}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

void Batcher::Submit(const std::vector<ServeRequest>& requests) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.insert(queue_.end(), requests.begin(), requests.end());
  }
  wake_.notify_all();
}

void Batcher::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !running_batch_; });
}

int64_t Batcher::batches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return batches_;
}

int64_t Batcher::largest_batch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return largest_;
}

void Batcher::RunOnWorker(const std::function<void()>& f) {
  std::unique_lock<std::mutex> lock(mu_);
  call_.Hand(lock, wake_, idle_, f);
}

void Batcher::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty() || call_.pending(); });
    if (call_.pending()) {
      call_.Run(lock, idle_);
      continue;
    }
    if (queue_.empty()) return;  // stopped with nothing left
    // The oldest request's wait bounds the batch's: a full batch, or the
    // deadline, or the end, whichever comes first.
    const auto deadline = queue_.front().arrived + timeout_;
    wake_.wait_until(lock, deadline, [this] {
      return stop_ || static_cast<int64_t>(queue_.size()) >= max_batch_;
    });
    const size_t take = std::min<size_t>(queue_.size(), static_cast<size_t>(max_batch_));
    std::vector<ServeRequest> batch(queue_.begin(), queue_.begin() + take);
    queue_.erase(queue_.begin(), queue_.begin() + take);
    running_batch_ = true;
    ++batches_;
    largest_ = std::max<int64_t>(largest_, static_cast<int64_t>(take));
    lock.unlock();
    run_(batch);
    lock.lock();
    running_batch_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

namespace {

at::Tensor MakeSample(const at::Tensor& batch_inputs, size_t i) {
  const int64_t rows = batch_inputs.size(0);
  const int64_t row = static_cast<int64_t>(i) % rows;
  const int64_t shift = static_cast<int64_t>(i) / rows;
  at::Tensor sample = batch_inputs.select(0, row);
  if (shift == 0 || sample.dim() == 0) return sample.clone();
  return sample.roll({shift}, {-1}).clone();
}

}  // namespace

std::vector<at::Tensor> MakeSamples(const at::Tensor& batch_inputs, size_t count) {
  std::vector<at::Tensor> samples;
  samples.reserve(count);
  for (size_t i = 0; i < count; ++i) samples.push_back(MakeSample(batch_inputs, i));
  return samples;
}

BatchRunner::BatchRunner(Workload& workload, int64_t max_batch, const c10::Device& device)
    : workload_(workload), device_(device) {
  const at::Tensor inputs = workload.BatchInputs();
  if (!inputs.defined()) {
    throw std::invalid_argument("this workload cannot run batches it is given");
  }
  std::vector<int64_t> shape = inputs.sizes().vec();
  shape[0] = max_batch;
  // empty_like keeps the inputs' memory format (channels_last images).
  staging_ = at::empty_like(inputs.select(0, 0).unsqueeze(0).expand(shape).contiguous(
      inputs.suggest_memory_format()));
}

at::Tensor BatchRunner::Run(const std::vector<at::Tensor>& samples,
                            const std::vector<ServeRequest>& batch) {
  c10::InferenceMode guard;
  const int64_t b = static_cast<int64_t>(batch.size());
  if (b > staging_.size(0)) {
    throw std::out_of_range(absl::StrCat("a batch of ", b, " is larger than the ",
                                         staging_.size(0), " it was built for"));
  }
  for (int64_t i = 0; i < b; ++i) staging_[i].copy_(samples.at(batch[i].index));
  at::Tensor out = workload_.RunBatch(staging_.narrow(0, 0, b));
  Synchronize(device_);
  return out;
}

// Why --find_peak's runs have no `batches`: the search's tests ran them all.
constexpr char kFindPeakBatches[] =
    "batches left out: --find_peak's search runs several LoadGen tests, and the "
    "counters are the peak's alone";

absl::Status ValidateServe(const ServeSettings& serve) {
  const auto& names = kServeScenarios;
  if (std::find(std::begin(names), std::end(names), serve.scenario) == std::end(names)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--scenario: unknown scenario '", serve.scenario,
                     "'; valid: ", absl::StrJoin(names, ", ")));
  }
  if (!serve.phase.empty() && serve.phase != "forward" && serve.phase != "encode" &&
      serve.phase != "generate") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--serve_phase=", serve.phase,
        ": serve runs one inference phase, not a list nor a training phase; valid: "
        "forward, encode (Whisper's), generate"));
  }
  if (!(serve.target_qps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--target_qps must be a number > 0 (queries a second), not ", serve.target_qps));
  }
  if (!(serve.latency_bound_ms >= 0) ||
      (serve.latency_bound_ms > 0 && !BoundInNanoseconds(serve.latency_bound_ms))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--latency_bound_ms=", serve.latency_bound_ms, kBoundMustBe));
  }
  if (serve.max_batch < 1) {
    return absl::InvalidArgumentError("--max_batch must be a whole number >= 1");
  }
  if (serve.batch_timeout_us < 0) {
    return absl::InvalidArgumentError("--batch_timeout_us must be a whole number >= 0");
  }
  if (serve.find_peak && serve.scenario != "Server") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--find_peak=true: LoadGen searches a peak QPS in the Server scenario only, not ",
        serve.scenario, "; valid: --scenario=Server"));
  }
  if (!(serve.min_s >= 0 && serve.min_s <= kMaxServeSeconds)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--serve_min_s=", serve.min_s, ": LoadGen's minimum duration must be ",
        "a number of seconds from 0 to ", kMaxServeSeconds, " (11.6 days)"));
  }
  if (serve.min_queries < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--serve_min_queries=", serve.min_queries,
                     ": LoadGen's minimum query count must be a whole number >= 1"));
  }
  if (serve.scenario == "Offline" &&
      1.1 * serve.min_s * serve.target_qps > kMaxOfflineSamples) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Offline at --target_qps=%g for --serve_min_s=%g: its one query would hold "
        "%.3g samples (1.1 x the rate x the duration), over the %g one query may hold; "
        "lower --target_qps or --serve_min_s",
        serve.target_qps, serve.min_s, 1.1 * serve.min_s * serve.target_qps,
        kMaxOfflineSamples));
  }
  if (serve.samples_per_query < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--samples_per_query=", serve.samples_per_query,
        ": MultiStream's samples a query must be a whole number >= 1, or left out for "
        "LoadGen's ",
        kLoadGenSamplesPerQuery));
  }
  return absl::OkStatus();
}

namespace {

// Calls `visit` with each entry of LoadGen's detail log (":::MLLOG " and a
// JSON object a line) that has a value, in order.
void ForEachDetailEntry(const std::string& text,
                        const std::function<void(const nlohmann::json&)>& visit) {
  std::istringstream lines(text);
  std::string line;
  const std::string mark = ":::MLLOG ";
  while (std::getline(lines, line)) {
    const size_t at = line.find(mark);
    if (at == std::string::npos) continue;
    const nlohmann::json entry =
        nlohmann::json::parse(line.substr(at + mark.size()), nullptr, false);
    if (!entry.is_discarded() && entry.contains("value")) visit(entry);
  }
}

}  // namespace

std::map<std::string, std::string> ParseDetailLog(const std::string& text) {
  std::map<std::string, std::string> values;
  ForEachDetailEntry(text, [&](const nlohmann::json& entry) {
    if (!entry.contains("key")) return;
    const nlohmann::json& value = entry["value"];
    values[entry["key"].get<std::string>()] =
        value.is_string() ? value.get<std::string>() : value.dump();
  });
  return values;
}

namespace {

// A number of the detail log; -1 where absent or not a number.
double Number(const std::map<std::string, std::string>& detail, const std::string& key) {
  const auto it = detail.find(key);
  if (it == detail.end()) return -1;
  try {
    return std::stod(it->second);
  } catch (const std::exception&) {
    return -1;
  }
}

// The whole number that follows `after` in `text`; -1 where none does.
int64_t CountAfter(const std::string& text, const std::string& after) {
  const size_t at = text.find(after);
  if (at == std::string::npos) return -1;
  size_t end = at + after.size();
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  int64_t n = -1;
  return absl::SimpleAtoi(text.substr(at + after.size(), end - at - after.size()), &n)
             ? n
             : -1;
}

}  // namespace

std::string EarlyStoppingWhy(const std::string& result, int64_t over) {
  const int64_t done = CountAfter(result, "Only processed ");
  const int64_t needed = CountAfter(result, "Need to process at least ");
  if (done >= 0 && needed > 0) {
    return absl::StrCat(done, " queries of the ", needed,
                        " its percentile's bound needs; --serve_min_queries=", needed,
                        " runs them");
  }
  const int64_t processed = CountAfter(result, "Processed ");
  const int64_t more = CountAfter(result, "Would need to run at least ");
  if (processed >= 0 && more > 0) {
    // LoadGen's count assumes every further query within the bound.
    if (over == 0) {
      return absl::StrCat(processed,
                          " queries, none over the bound, too few for its "
                          "percentile: ",
                          more,
                          " more would be needed; --serve_min_queries=", processed + more,
                          " runs them");
    }
    if (over > 0) {
      return absl::StrCat(processed, " queries, ", over,
                          " of them over the bound: ", more,
                          " more, all within it, would be needed");
    }
    return absl::StrCat(processed, " queries: ", more,
                        " more, all within the bound, would be needed");
  }
  return "too few queries for the percentile's bound";
}

std::string EarlyStoppingClause(const std::map<std::string, std::string>& detail) {
  const auto text = [&](const std::string& key) -> std::optional<std::string> {
    const auto it = detail.find(key);
    if (it == detail.end()) return std::nullopt;
    return it->second;
  };
  if (const std::optional<std::string> result = text("early_stopping_result")) {
    const auto over = detail.find("result_overlatency_query_count");
    int64_t n = -1;
    if (over == detail.end() || !absl::SimpleAtoi(over->second, &n)) n = -1;
    return EarlyStoppingWhy(*result, n);
  }
  // Token latencies: a result for each, one of which (or both) was not met.
  std::vector<std::string> unmet;
  for (const auto& [name, key] :
       {std::pair<std::string, std::string>{"TTFT", "early_stopping_ttft_result"},
        {"TPOT", "early_stopping_tpot_result"}}) {
    const std::optional<std::string> result = text(key);
    if (result && (absl::StrContains(*result, "unsuccessful") ||
                   absl::StrContains(*result, "Only processed"))) {
      unmet.push_back(absl::StrCat(name, ": ", EarlyStoppingWhy(*result)));
    }
  }
  if (unmet.empty()) return EarlyStoppingWhy("");
  return absl::StrJoin(unmet, "; ");
}

ServeCounters CountersFromDetail(const std::map<std::string, std::string>& detail,
                                 const ServeSettings& serve, double tokens_per_sample) {
  ServeCounters out;
  auto add = [&](const std::string& name, double value) {
    if (value >= 0) out.counters.emplace_back(name, value);
  };
  const std::string& scenario = serve.scenario;
  double samples_per_s = -1;
  if (scenario == "SingleStream") {
    samples_per_s = Number(detail, "result_qps_with_loadgen_overhead");
  } else if (scenario == "MultiStream") {
    // Each query's samples complete before the next is issued.
    const double query_ns = Number(detail, "result_mean_query_latency_ns");
    const double per_query = Number(detail, "effective_samples_per_query");
    if (query_ns > 0 && per_query > 0) samples_per_s = per_query / (query_ns * 1e-9);
  } else if (scenario == "Server") {
    samples_per_s = Number(detail, "result_completed_samples_per_sec");
  } else {
    samples_per_s = Number(detail, "result_samples_per_second");
  }
  add("samples/s", samples_per_s);
  if (tokens_per_sample > 0 && samples_per_s >= 0) {
    add("tokens/s", samples_per_s * tokens_per_sample);
  }
  if (scenario == "Server") {
    add("qps_scheduled", Number(detail, "result_scheduled_samples_per_sec"));
    add("qps_completed", samples_per_s);
    const double queries = Number(detail, "result_query_count");
    const double over = Number(detail, "result_overlatency_query_count");
    // One sample a query: the share of samples within the bound.
    if (queries > 0 && over >= 0 && samples_per_s >= 0) {
      add("goodput", samples_per_s * (1 - over / queries));
    }
    add("bound_ms", Number(detail, "effective_target_latency_ns") * 1e-6);
  }
  const double ns = 1e-6;  // to milliseconds
  auto latency = [&](const std::string& name, const std::string& key) {
    const double v = Number(detail, key);
    if (v >= 0) out.counters.emplace_back(name, v * ns);
  };
  latency("latency_mean_ms", "result_mean_latency_ns");
  latency("p50_ms", "result_50.00_percentile_latency_ns");
  latency("p90_ms", "result_90.00_percentile_latency_ns");
  latency("p99_ms", "result_99.00_percentile_latency_ns");
  latency("p99.9_ms", "result_99.90_percentile_latency_ns");
  if (scenario == "MultiStream") {
    // MLPerf judges MultiStream by a query's latency, until its last sample
    // completes, which the samples' own percentiles understate.
    latency("query_latency_mean_ms", "result_mean_query_latency_ns");
    latency("query_p50_ms", "result_50.00_percentile_per_query_latency_ns");
    latency("query_p90_ms", "result_90.00_percentile_per_query_latency_ns");
    latency("query_p99_ms", "result_99.00_percentile_per_query_latency_ns");
    latency("query_p99.9_ms", "result_99.90_percentile_per_query_latency_ns");
  }
  add("queries", Number(detail, "result_query_count"));
  const auto validity = detail.find("result_validity");
  const bool valid = validity != detail.end() && validity->second == "VALID";
  out.counters.emplace_back("valid", valid ? 1 : 0);
  out.label = absl::StrCat("scenario:", scenario, " ",
                           validity == detail.end() ? "no result" : validity->second);
  if (!valid) {
    const auto reason = detail.find("result_invalid_reason");
    if (reason != detail.end() && !reason->second.empty()) {
      std::string why = reason->second;
      while (!why.empty() && why.back() == ' ') why.pop_back();
      absl::StrAppend(&out.label, ": ", why);
    }
    const auto early = detail.find("early_stopping_met");
    if (early != detail.end() && early->second == "false") {
      absl::StrAppend(&out.label,
                      " (early stopping not met: ", EarlyStoppingClause(detail), ")");
    }
  }
  out.seconds_per_sample = samples_per_s > 0 ? 1 / samples_per_s : 0;
  return out;
}

PeakSearch PeakFromDetailLog(const std::string& text) {
  // LoadGen logs the search's steps as messages (loadgen.cc
  // FindPeakPerformanceMode): the last one says where it ended.
  const std::string found = "FindPeakPerformance: Found peak performance field: ";
  const std::string failed = "FindPeakPerformance: Initial lower bound does not satisfy ";
  PeakSearch out;
  ForEachDetailEntry(text, [&](const nlohmann::json& entry) {
    if (!entry["value"].is_string()) return;
    const std::string value = entry["value"].get<std::string>();
    if (value.rfind(found, 0) == 0) {
      try {
        out.qps = std::stod(value.substr(found.size()));
        out.found = true;
        out.why_not.clear();
      } catch (const std::exception&) {
      }
    } else if (value.rfind(failed, 0) == 0) {
      out = PeakSearch{};
      const size_t msg = value.find("msg: ");
      out.why_not = msg == std::string::npos ? value : value.substr(msg + 5);
    }
  });
  return out;
}

ServeCounters WithPeak(ServeCounters out, const std::string& detail_text,
                       const ServeSettings& serve) {
  if (!serve.find_peak) return out;
  const PeakSearch peak = PeakFromDetailLog(detail_text);
  out.counters.emplace_back("peak_qps", peak.found ? peak.qps : 0);
  const std::string verdict = out.label.substr(out.label.find(' ') + 1);
  if (peak.found) {
    // The peak's own test is the one LoadGen's results describe.
    out.label = absl::StrCat("scenario:Server peak ", peak.qps,
                             " QPS within the bound; at the peak ", verdict);
    out.seconds_per_sample = 1 / peak.qps;
  } else {
    std::string why = peak.why_not.empty() ? "no peak in LoadGen's log" : peak.why_not;
    while (!why.empty() && why.back() == ' ') why.pop_back();
    out.label = absl::StrCat("scenario:Server no peak: the starting rate ",
                             serve.target_qps, " QPS misses the bound: ", why);
    // Google Benchmark reports no counter of an error: the starting test's
    // figures go in its message.
    std::vector<std::string> figures;
    for (const auto& [name, value] : out.counters) {
      if (name == "samples/s" || name == "p99_ms" || name == "ttft_p99_ms" ||
          name == "tpot_p99_ms") {
        figures.push_back(absl::StrFormat("%s %.4g", name, value));
      }
    }
    out.error = absl::StrCat("no peak: the starting rate ", serve.target_qps,
                             " QPS misses the bound: ", why,
                             " (that test: ", absl::StrJoin(figures, ", "),
                             "); search from a lower --target_qps");
  }
  return out;
}

ServeCounters CountersFromLog(const std::string& detail_text, const ServeSettings& serve,
                              double tokens_per_sample) {
  return WithPeak(
      CountersFromDetail(ParseDetailLog(detail_text), serve, tokens_per_sample),
      detail_text, serve);
}

void SetLoadGenSettings(const ServeSettings& serve, size_t samples,
                        mlperf::TestSettings& settings) {
  settings.scenario = ScenarioOf(serve.scenario);
  settings.mode = serve.find_peak ? mlperf::TestMode::FindPeakPerformance
                                  : mlperf::TestMode::PerformanceOnly;
  settings.min_duration_ms = static_cast<uint64_t>(serve.min_s * 1000);
  settings.min_query_count = static_cast<uint64_t>(serve.min_queries);
  settings.server_target_qps = serve.target_qps;
  settings.offline_expected_qps = serve.target_qps;
  // The search doubles the rate until the bound is missed (LoadGen's step
  // size 1), then bisects to the decimals that resolve 1% of the start.
  settings.server_find_peak_qps_boundary_step_size = 1;
  settings.server_find_peak_qps_decimals_of_precision =
      PeakSearchDecimals(serve.target_qps);
  if (serve.samples_per_query > 0) {
    settings.multi_stream_samples_per_query =
        static_cast<uint64_t>(serve.samples_per_query);
  }
  settings.performance_sample_count_override = samples;
}

void SetExpectedLatency(double query_s, const ServeSettings& serve,
                        mlperf::TestSettings& settings) {
  if (!(query_s > 0)) return;
  const double ns = std::max(query_s * 1e9, 2 * serve.min_s * 1e9 / kMaxGeneratedQueries);
  if (serve.scenario == "SingleStream") settings.single_stream_expected_latency_ns = ns;
  if (serve.scenario == "MultiStream") settings.multi_stream_expected_latency_ns = ns;
}

int PeakSearchDecimals(double target_qps) {
  int decimals = 0;
  while (decimals < 6 && std::pow(10.0, -decimals) > 0.01 * target_qps + 1e-12) {
    ++decimals;
  }
  return decimals;
}

absl::StatusOr<std::string> MakeServeLogFolder(const BenchSpec& spec) {
  // Google Benchmark calls a serve benchmark once a repetition (its one
  // iteration), its repetitions one after another.
  static auto* const last = new std::pair<std::string, int>("", 0);
  if (last->first == spec.Name()) {
    ++last->second;
  } else {
    *last = {spec.Name(), 0};
  }
  const std::string folder = ServeLogFolder(spec.serve.log_dir, spec, last->second);
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("--serve_log_dir: cannot make ", folder, ": ", ec.message()));
  }
  return folder;
}

std::string ServeLogFolder(const std::string& log_dir, const BenchSpec& spec,
                           int repetition) {
  std::string name = spec.Name();
  for (char& c : name) {
    if (c == '/' || c == ':') c = c == '/' ? '_' : '-';
  }
  if (repetition > 0) absl::StrAppend(&name, "_repetition", repetition);
  return (std::filesystem::path(log_dir) / name).string();
}

mlperf::TestScenario ScenarioOf(const std::string& name) {
  if (name == "SingleStream") return mlperf::TestScenario::SingleStream;
  if (name == "MultiStream") return mlperf::TestScenario::MultiStream;
  if (name == "Server") return mlperf::TestScenario::Server;
  return mlperf::TestScenario::Offline;
}

namespace {

// Holds the samples LoadGen asks for, built from the workload's inputs when
// loaded (outside the timed test), dropped when unloaded.
class SampleLibrary : public mlperf::QuerySampleLibrary {
 public:
  SampleLibrary(at::Tensor inputs, size_t count)
      : inputs_(std::move(inputs)), samples_(count) {}
  const std::string& Name() override { return name_; }
  size_t TotalSampleCount() override { return samples_.size(); }
  size_t PerformanceSampleCount() override { return samples_.size(); }
  void LoadSamplesToRam(const std::vector<mlperf::QuerySampleIndex>& indices) override {
    c10::InferenceMode guard;
    for (const auto i : indices) samples_.at(i) = MakeSample(inputs_, i);
  }
  void UnloadSamplesFromRam(
      const std::vector<mlperf::QuerySampleIndex>& indices) override {
    for (const auto i : indices) samples_.at(i) = at::Tensor();
  }
  const std::vector<at::Tensor>& samples() const { return samples_; }

 private:
  std::string name_ = "ltb-samples";
  at::Tensor inputs_;
  std::vector<at::Tensor> samples_;
};

// Puts LoadGen's queries on the batcher's queue.
class QueueSut : public mlperf::SystemUnderTest {
 public:
  explicit QueueSut(Batcher* batcher) : batcher_(batcher) {}
  const std::string& Name() override { return name_; }
  void IssueQuery(const std::vector<mlperf::QuerySample>& samples) override {
    const auto now = std::chrono::steady_clock::now();
    std::vector<ServeRequest> requests;
    requests.reserve(samples.size());
    for (const mlperf::QuerySample& s : samples) requests.push_back({s.id, s.index, now});
    batcher_->Submit(requests);
  }
  void FlushQueries() override {}

 private:
  std::string name_ = "ltb-batcher";
  Batcher* batcher_;
};

// Samples the library holds: enough distinct inputs that a batch rarely
// repeats one, few enough to keep in memory beside the model.
constexpr size_t kServeSamples = 64;

// One LoadGen test's parts, shared by the benchmark and the thread that runs
// LoadGen, so that an interrupted benchmark can return while LoadGen, which
// cannot end a test early, finishes its schedule with samples completed
// unrun; the thread keeps the parts alive until then (or the process ends).
class LoadGenTest {
 public:
  LoadGenTest(Workload& workload, const ServeSettings& serve, const c10::Device& device)
      : library_(workload.BatchInputs(), kServeSamples),
        runner_(workload, serve.max_batch, device),
        // SingleStream has one sample in flight at a time: waiting for a
        // second would only add the wait to every latency.
        batcher_(serve.max_batch,
                 serve.scenario == "SingleStream" ? 0 : serve.batch_timeout_us,
                 [this](const std::vector<ServeRequest>& batch) { Run(batch); }),
        sut_(&batcher_) {}

  // Runs LoadGen's test on its own thread; Wait for it.
  void Start(std::shared_ptr<LoadGenTest> self, const mlperf::TestSettings& settings,
             const mlperf::LogSettings& log) {
    thread_ = std::thread([self, settings, log] {
      mlperf::StartTest(&self->sut_, &self->library_, settings, log);
      self->batcher_.Drain();
      std::lock_guard<std::mutex> lock(self->mu_);
      self->done_ = true;
      self->done_cv_.notify_all();
    });
  }

  // True once the test has ended; false as soon as a stop is requested
  // before, once the batch running has finished: from then on the workload
  // is not touched again, and LoadGen's thread is left to finish alone.
  bool Wait() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (!done_ && !StopRequested()) {
        done_cv_.wait_for(lock, std::chrono::milliseconds(20));
      }
      if (done_) {
        lock.unlock();
        thread_.join();
        return true;
      }
    }
    std::lock_guard<std::mutex> running(run_mu_);
    abandoned_ = true;
    thread_.detach();
    return false;
  }

  // Each batch size the test can form, run once on the batcher's thread
  // before the test, so that what a device keeps per thread (cuDNN's
  // attention plans, for each shape) is the serving thread's; then, for
  // SingleStream and MultiStream, the best of three timings of a query (its
  // samples in batches of max_batch), for SetExpectedLatency (0: not timed).
  // The samples are made like the library's from `inputs`.
  double WarmBatches(const at::Tensor& inputs, const ServeSettings& serve,
                     const mlperf::TestSettings& settings) {
    double best = 0;
    batcher_.RunOnWorker([&] {
      const int64_t per_query =
          serve.scenario == "SingleStream"
              ? 1
              : static_cast<int64_t>(settings.multi_stream_samples_per_query);
      const std::vector<at::Tensor> samples =
          MakeSamples(inputs, static_cast<size_t>(std::max(serve.max_batch, per_query)));
      std::vector<ServeRequest> batch;
      for (int64_t b = 1; b <= serve.max_batch && !StopRequested(); ++b) {
        batch.push_back({0, static_cast<size_t>(b - 1), {}});
        runner_.Run(samples, batch);
      }
      if (serve.scenario != "SingleStream" && serve.scenario != "MultiStream") return;
      for (int trial = 0; trial < 3 && !StopRequested(); ++trial) {
        const auto start = std::chrono::steady_clock::now();
        for (int64_t first = 0; first < per_query; first += serve.max_batch) {
          batch.clear();
          for (int64_t i = first; i < std::min(per_query, first + serve.max_batch); ++i) {
            batch.push_back({0, static_cast<size_t>(i), {}});
          }
          runner_.Run(samples, batch);
        }
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                .count();
        best = trial == 0 ? s : std::min(best, s);
      }
    });
    return best;
  }

  int64_t batches() const { return batcher_.batches(); }
  std::string error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  bool interrupted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return interrupted_;
  }

 private:
  // After an interrupt, or a failure, samples complete unrun so that
  // LoadGen ends its test and writes its logs.
  void Run(const std::vector<ServeRequest>& batch) {
    {
      std::lock_guard<std::mutex> running(run_mu_);
      bool run = !abandoned_ && !StopRequested();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!run) interrupted_ = true;
        run = run && error_.empty();
      }
      if (run) {
        try {
          runner_.Run(library_.samples(), batch);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu_);
          if (error_.empty()) error_ = e.what();
        }
      }
    }
    std::vector<mlperf::QuerySampleResponse> responses;
    responses.reserve(batch.size());
    for (const ServeRequest& r : batch) responses.emplace_back(r.id, 0, 0);
    mlperf::QuerySamplesComplete(responses.data(), responses.size());
  }

  SampleLibrary library_;
  BatchRunner runner_;
  std::mutex run_mu_;  // held while a batch may run the workload
  bool abandoned_ = false;
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string error_;
  bool interrupted_ = false;
  Batcher batcher_;
  QueueSut sut_;
  std::thread thread_;
};

absl::Status RunLoadGenTest(benchmark::State& state, Workload& workload,
                            const BenchSpec& spec, double tokens_per_sample);

}  // namespace

absl::Status RunServe(benchmark::State& state, Workload& workload, const BenchSpec& spec,
                      double tokens_per_sample) {
  absl::Status status = RunLoadGenTest(state, workload, spec, tokens_per_sample);
  if (!status.ok()) state.SkipWithError(ValidUtf8(std::string(status.message())).c_str());
  return status;
}

namespace {

absl::Status RunLoadGenTest(benchmark::State& state, Workload& workload,
                            const BenchSpec& spec, double tokens_per_sample) {
  const ServeSettings& serve = spec.serve;
  if (absl::Status valid = ValidateServe(serve); !valid.ok()) return valid;
  if (!workload.BatchInputs().defined()) {
    return absl::UnimplementedError(
        absl::StrCat(spec.family, "'s ", serve.phase,
                     " workload cannot run batches it is given, so it cannot serve"));
  }
  absl::StatusOr<std::string> made = MakeServeLogFolder(spec);
  if (!made.ok()) return made.status();
  const std::string& folder = *made;

  mlperf::TestSettings settings;
  SetLoadGenSettings(serve, kServeSamples, settings);
  if (serve.latency_bound_ms > 0) {
    settings.server_target_latency_ns = BoundNanoseconds(serve.latency_bound_ms);
  }
  mlperf::LogSettings log;
  log.log_output.outdir = folder;
  log.enable_trace = false;

  for (auto _ : state) {
    auto test = std::make_shared<LoadGenTest>(workload, serve, spec.device);
    try {
      SetExpectedLatency(test->WarmBatches(workload.BatchInputs(), serve, settings),
                         serve, settings);
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("serve: warming up: ", e.what_without_backtrace()));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("serve: warming up: ", e.what()));
    }
    test->Start(test, settings, log);
    if (!test->Wait()) {
      return absl::CancelledError(
          absl::StrCat(StopReason(),
                       " during LoadGen's test (left to end unrun); its logs: ", folder));
    }
    std::ifstream in(std::filesystem::path(folder) / "mlperf_log_detail.txt");
    std::stringstream text;
    text << in.rdbuf();
    const ServeCounters counters = CountersFromLog(text.str(), serve, tokens_per_sample);
    state.SetIterationTime(counters.seconds_per_sample);
    if (const std::string error = test->error(); !error.empty()) {
      return absl::InternalError(
          absl::StrCat("serve: ", error, " (LoadGen's logs: ", folder, ")"));
    }
    if (test->interrupted()) {
      return absl::CancelledError(
          absl::StrCat(StopReason(), " during LoadGen's test; its logs: ", folder));
    }
    for (const auto& [name, value] : counters.counters) state.counters[name] = value;
    state.counters["max_batch"] = static_cast<double>(serve.max_batch);
    std::string label = counters.label;
    if (serve.find_peak) {  // the batcher served every test of the search
      absl::StrAppend(&label, label.empty() ? "" : "; ", kFindPeakBatches);
    } else {
      state.counters["batches"] = static_cast<double>(test->batches());
    }
    state.SetLabel(ValidUtf8(label));
    if (!counters.error.empty()) return absl::NotFoundError(counters.error);
  }
  return absl::OkStatus();
}

}  // namespace

}  // namespace ltb
