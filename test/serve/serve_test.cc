// The serve phase's parts that need no LoadGen test: the batcher (every
// request run once, batches within bounds), the batched outputs against the
// unbatched phase's, the counters read from a detail log, the refusals and
// the names.
#include "serve/serve.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <loadgen/test_settings.h>
#include <torch/csrc/jit/api/module.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "device/device.h"
#include "family/registry.h"
#include "spec_for.h"
#include "suite/sweep.h"

namespace ltb {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<ServeRequest> Requests(uintptr_t first, size_t count) {
  std::vector<ServeRequest> out;
  for (size_t i = 0; i < count; ++i) out.push_back({first + i, i, Clock::now()});
  return out;
}

TEST(Batcher, RunsEveryRequestOnceInOrderInBatchesNeverAboveTheLimit) {
  constexpr int64_t kMax = 5;
  std::mutex mu;
  std::vector<uintptr_t> ran;
  std::vector<size_t> sizes;
  Batcher batcher(kMax, /*timeout_us=*/300, [&](const std::vector<ServeRequest>& batch) {
    std::lock_guard<std::mutex> lock(mu);
    sizes.push_back(batch.size());
    for (const ServeRequest& r : batch) ran.push_back(r.id);
  });
  // Two submitters, as LoadGen's issuing threads may be: one a sample at a
  // time, one in bursts larger than a batch.
  std::thread singles([&] {
    for (uintptr_t id = 0; id < 40; ++id) {
      batcher.Submit(Requests(id, 1));
      if (id % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  for (uintptr_t burst = 0; burst < 6; ++burst)
    batcher.Submit(Requests(1000 + 13 * burst, 13));
  singles.join();
  batcher.Drain();

  std::map<uintptr_t, int> times;
  for (const uintptr_t id : ran) ++times[id];
  ASSERT_EQ(times.size(), 40u + 6 * 13);
  for (const auto& [id, n] : times) EXPECT_EQ(n, 1) << id;
  for (const size_t s : sizes) {
    EXPECT_GE(s, 1u);
    EXPECT_LE(s, static_cast<size_t>(kMax));
  }
  EXPECT_EQ(batcher.largest_batch(), kMax) << "a burst of 13 fills a batch";
  EXPECT_EQ(batcher.batches(), static_cast<int64_t>(sizes.size()));
  // Each submitter's requests run in the order it submitted them.
  std::vector<uintptr_t> singles_order;
  for (const uintptr_t id : ran) {
    if (id < 40) singles_order.push_back(id);
  }
  for (size_t i = 0; i < singles_order.size(); ++i) EXPECT_EQ(singles_order[i], i);
}

TEST(Batcher, ALoneRequestRunsWhenItsWaitRunsOut) {
  std::atomic<int> runs{0};
  Batcher batcher(8, /*timeout_us=*/1000,
                  [&](const std::vector<ServeRequest>& batch) { runs += batch.size(); });
  batcher.Submit(Requests(7, 1));
  batcher.Drain();  // returns only once it ran, alone, after its wait
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(batcher.batches(), 1);
  EXPECT_EQ(batcher.largest_batch(), 1);
}

// A warm-up handed to the worker runs on the thread that runs the batches
// (a device's per-thread plans are that thread's), between batches, once;
// what it throws reaches the caller, and the worker serves on.
TEST(Batcher, ACallHandedToTheWorkerRunsOnTheThreadThatRunsBatches) {
  std::mutex mu;
  std::set<std::thread::id> batch_threads;
  Batcher batcher(4, /*timeout_us=*/100, [&](const std::vector<ServeRequest>&) {
    std::lock_guard<std::mutex> lock(mu);
    batch_threads.insert(std::this_thread::get_id());
  });
  std::thread::id called_on;
  int calls = 0;
  batcher.RunOnWorker([&] {
    called_on = std::this_thread::get_id();
    ++calls;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_NE(called_on, std::this_thread::get_id());
  batcher.Submit(Requests(0, 9));
  batcher.Drain();
  EXPECT_EQ(batch_threads, (std::set<std::thread::id>{called_on}));
  EXPECT_EQ(calls, 1) << "a handed call runs once";
  EXPECT_THROW(batcher.RunOnWorker([] { throw std::runtime_error("refused"); }),
               std::runtime_error);
  batcher.Submit(Requests(100, 3));
  batcher.Drain();
  EXPECT_EQ(batcher.batches(), 4) << "9 requests in 3 batches of at most 4, then 3";
}

TEST(MakeSamples, DifferFromEachOtherAndKeepTheInputsKind) {
  const at::Tensor ids = at::arange(24, at::kLong).reshape({2, 12});
  const std::vector<at::Tensor> samples = MakeSamples(ids, 6);
  ASSERT_EQ(samples.size(), 6u);
  for (const at::Tensor& s : samples) {
    EXPECT_EQ(s.sizes(), (std::vector<int64_t>{12}));
    EXPECT_EQ(s.scalar_type(), at::kLong);
    EXPECT_GE(s.min().item<int64_t>(), 0);
    EXPECT_LT(s.max().item<int64_t>(), 24);
  }
  EXPECT_TRUE(samples[0].equal(ids[0]));
  EXPECT_TRUE(samples[1].equal(ids[1]));
  EXPECT_TRUE(samples[2].equal(ids[0].roll({1}, {-1})));
  for (size_t i = 0; i < samples.size(); ++i) {
    for (size_t j = i + 1; j < samples.size(); ++j) {
      EXPECT_FALSE(samples[i].equal(samples[j])) << i << " " << j;
    }
  }
}

// The batcher over a family's served workload: each sample's output, from
// whatever batch it ran in, equals the phase run on that sample alone; and
// a workload built apart to serve (build_served) computes what the family's
// own phase computes, from the same seed. `families`: the run's (default:
// every registered one).
void ExpectBatchedOutputsEqualUnbatched(BenchSpec spec,
                                        std::vector<Family> families = {}) {
  if (families.empty()) families = RegisteredFamilies().value();
  const Family* family = FindFamily(families, spec.family).value();
  ASSERT_TRUE(family->serves) << spec.family;
  EXPECT_EQ(family->serve_phases.front(), spec.phase);
  at::manual_seed(0);
  std::unique_ptr<Workload> workload =
      (family->build_served ? family->build_served : family->build)(spec);
  ASSERT_TRUE(workload->BatchInputs().defined());
  if (family->build_served) {
    at::manual_seed(0);
    const at::Tensor own = family->build(spec)->Evaluate();
    EXPECT_TRUE(workload->Evaluate().equal(own)) << spec.Name();
  }
  const std::vector<at::Tensor> samples = MakeSamples(workload->BatchInputs(), 11);
  BatchRunner runner(*workload, spec.batch, spec.device);
  std::mutex mu;
  std::map<uintptr_t, at::Tensor> outputs;
  {
    Batcher batcher(spec.batch, 200, [&](const std::vector<ServeRequest>& batch) {
      const at::Tensor out = runner.Run(samples, batch);
      std::lock_guard<std::mutex> lock(mu);
      ASSERT_EQ(out.size(0), static_cast<int64_t>(batch.size()));
      for (size_t i = 0; i < batch.size(); ++i) {
        EXPECT_TRUE(outputs.emplace(batch[i].id, out[i].clone()).second) << batch[i].id;
      }
    });
    std::vector<ServeRequest> requests = Requests(0, samples.size());
    batcher.Submit({requests.begin(), requests.begin() + 3});
    batcher.Submit({requests.begin() + 3, requests.end()});
    batcher.Drain();
    EXPECT_LE(batcher.largest_batch(), spec.batch);
  }
  ASSERT_EQ(outputs.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    const at::Tensor alone = workload->RunBatch(samples[i].unsqueeze(0))[0];
    // Batched matmuls may block the sums differently: equal to fp32 rounding.
    EXPECT_LT(RelativeError(outputs.at(i), alone), 1e-5)
        << spec.Name() << " sample " << i;
  }
}

TEST(BatchRunner, BatchedOutputsEqualTheUnbatchedPhasesOnTokens) {
  ExpectBatchedOutputsEqualUnbatched(SpecFor("GPT2", "nano", "forward", 4, 16));
}

TEST(BatchRunner, BatchedOutputsEqualTheUnbatchedPhasesOnImages) {
  ExpectBatchedOutputsEqualUnbatched(SpecFor("CNN", "nano", "forward", 3));
}

// Encoder and EncDec read (T, B, d) and pairs of sequences; Whisper encodes.
TEST(BatchRunner, BatchedOutputsEqualTheUnbatchedPhasesOfTheEncoder) {
  ExpectBatchedOutputsEqualUnbatched(SpecFor("Encoder", "nano", "forward", 3, 8));
}

TEST(BatchRunner, BatchedOutputsEqualTheUnbatchedPhasesOfEncDec) {
  ExpectBatchedOutputsEqualUnbatched(SpecFor("EncDec", "nano", "forward", 3, 8));
}

TEST(BatchRunner, BatchedOutputsEqualTheUnbatchedPhasesOfWhispersEncode) {
  ExpectBatchedOutputsEqualUnbatched(SpecFor("Whisper", "nano", "encode", 2));
}

// The Model family: a TorchScript file made here. A file that takes only its
// own batch (as a fixed-shape AOTInductor package) runs smaller ones padded.
class ServedModelFile : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ltb_serve_" + std::to_string(::getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // forward mixes each row's features, never rows.
  std::vector<Family> Families(const std::string& body,
                               const std::string& inputs = "4x6:fp32") {
    torch::jit::Module m("Served");
    m.register_parameter("w", at::randn({6, 5}), false);
    m.define(body);
    path_ = (dir_ / "served.pt").string();
    m.save(path_);
    FamilyOptions options;
    options.model_files = {path_};
    options.model_inputs = inputs;
    return RegisteredFamilies(options).value();
  }
  BenchSpec Spec() {
    BenchSpec spec = SpecFor("Model", "served", "forward", 4);
    spec.backend = "torchscript";
    return spec;
  }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(ServedModelFile, BatchedOutputsEqualTheUnbatchedPhases) {
  ExpectBatchedOutputsEqualUnbatched(
      Spec(), Families("def forward(self, x):\n  return (x @ self.w).softmax(-1)\n"));
}

TEST_F(ServedModelFile, AFileThatTakesOnlyItsBatchRunsSmallerOnesPadded) {
  const std::vector<Family> families = Families(
      "def forward(self, x):\n  assert x.size(0) == 4\n  return (x @ self.w).tanh()\n");
  ExpectBatchedOutputsEqualUnbatched(Spec(), families);
  std::unique_ptr<Workload> workload =
      FindFamily(families, "Model").value()->build(Spec());
  const at::Tensor rows = workload->BatchInputs().narrow(0, 1, 2);
  const at::Tensor out = workload->RunBatch(rows);
  ASSERT_EQ(out.size(0), 2);
  EXPECT_LT(RelativeError(out, workload->Evaluate().narrow(0, 1, 2)), 1e-6);
}

TEST_F(ServedModelFile, ScenariosRegisterOneServeBenchmarkOfTheFile) {
  Sweep sweep = OfflineServeSweep(8);
  const std::vector<Family> families =
      Families("def forward(self, x):\n  return x @ self.w\n");
  std::vector<std::string> served;
  for (const Registration& r : ExpandSweep(families, sweep)) {
    if (r.family->name == "Model" && r.spec.serving()) served.push_back(r.spec.Name());
  }
  // The file runs on --inputs, which its names say.
  EXPECT_EQ(served, std::vector<std::string>{
                        "Model/served/cpu/serve/scenario:Offline/max_batch:8/fp32/"
                        "torchscript/inputs:4x6:fp32"});
  // A file of two inputs cannot be gathered into batches: no serve of it.
  std::vector<std::string> names;
  for (const Registration& r : ExpandSweep(
           Families("def forward(self, x, y):\n  return x @ self.w + y @ self.w\n",
                    "4x6:fp32;4x6:fp32"),
           sweep)) {
    if (r.family->name == "Model") names.push_back(r.spec.Name());
  }
  EXPECT_EQ(names, std::vector<std::string>{"Model/served/cpu/forward/batch:4/fp32/"
                                            "torchscript/inputs:4x6:fp32;4x6:fp32"});
}

TEST(BatchRunner, RefusesABatchLargerThanItWasBuiltFor) {
  const BenchSpec spec = SpecFor("GPT2", "nano", "forward", 2, 8);
  const std::vector<Family> families = RegisteredFamilies().value();
  std::unique_ptr<Workload> workload = FindFamily(families, "GPT2").value()->build(spec);
  const std::vector<at::Tensor> samples = MakeSamples(workload->BatchInputs(), 3);
  BatchRunner runner(*workload, 2, spec.device);
  EXPECT_THROW(runner.Run(samples, Requests(0, 3)), std::out_of_range);
}

// A Server result as LoadGen 6.0's detail log writes it (abridged).
const char kInvalidServer[] = R"(
:::MLLOG {"key": "effective_scenario", "value": "Server", "time_ms": 0.1, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {"is_error": false, "is_warning": false, "file": "a.cc", "line_no": 1, "pid": 1, "tid": 1}}
:::MLLOG {"key": "effective_target_latency_ns", "value": 5000000, "time_ms": 0.1, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_validity", "value": "INVALID", "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_invalid_reason", "value": "Reduce target QPS to improve latency. ", "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_query_count", "value": 200, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_overlatency_query_count", "value": 50, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_scheduled_samples_per_sec", "value": 100.5, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_completed_samples_per_sec", "value": 80.0, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_mean_latency_ns", "value": 4000000, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_50.00_percentile_latency_ns", "value": 3000000, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_90.00_percentile_latency_ns", "value": 6000000, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_99.00_percentile_latency_ns", "value": 9000000, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_99.90_percentile_latency_ns", "value": 9500000, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
)";

TEST(CountersFromDetail, ReadsAServerResultAndItsReason) {
  ServeSettings serve;
  serve.scenario = "Server";
  const ServeCounters c =
      CountersFromDetail(ParseDetailLog(kInvalidServer), serve, /*tokens_per_sample=*/16);
  std::map<std::string, double> got(c.counters.begin(), c.counters.end());
  EXPECT_DOUBLE_EQ(got.at("samples/s"), 80.0);
  EXPECT_DOUBLE_EQ(got.at("tokens/s"), 80.0 * 16);
  EXPECT_DOUBLE_EQ(got.at("qps_scheduled"), 100.5);
  EXPECT_DOUBLE_EQ(got.at("qps_completed"), 80.0);
  EXPECT_DOUBLE_EQ(got.at("goodput"), 80.0 * 150 / 200);
  EXPECT_DOUBLE_EQ(got.at("bound_ms"), 5.0);
  EXPECT_DOUBLE_EQ(got.at("latency_mean_ms"), 4.0);
  EXPECT_DOUBLE_EQ(got.at("p50_ms"), 3.0);
  EXPECT_DOUBLE_EQ(got.at("p90_ms"), 6.0);
  EXPECT_DOUBLE_EQ(got.at("p99_ms"), 9.0);
  EXPECT_DOUBLE_EQ(got.at("p99.9_ms"), 9.5);
  EXPECT_DOUBLE_EQ(got.at("valid"), 0);
  EXPECT_EQ(c.label, "scenario:Server INVALID: Reduce target QPS to improve latency.");
  EXPECT_DOUBLE_EQ(c.seconds_per_sample, 1 / 80.0);
}

TEST(CountersFromDetail, AValidOfflineResultHasNoServerCounters) {
  ServeSettings serve;
  serve.scenario = "Offline";
  const ServeCounters c = CountersFromDetail(
      {{"result_validity", "VALID"}, {"result_samples_per_second", "250"}}, serve, 0);
  std::map<std::string, double> got(c.counters.begin(), c.counters.end());
  EXPECT_DOUBLE_EQ(got.at("samples/s"), 250);
  EXPECT_DOUBLE_EQ(got.at("valid"), 1);
  EXPECT_EQ(got.count("goodput"), 0u);
  EXPECT_EQ(got.count("tokens/s"), 0u);
  EXPECT_EQ(c.label, "scenario:Offline VALID");
}

// A MultiStream result's latencies as LoadGen 6.0.17's detail log wrote
// them for a run of GPT2/nano, 8 samples a query in batches of 4: a query's
// p99 (its last sample's completion) is above the samples' p99.
const char kMultiStream[] = R"(
:::MLLOG {"key": "effective_samples_per_query", "value": 8, "time_ms": 0.1, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_validity", "value": "VALID", "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_query_count", "value": 76, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_mean_query_latency_ns", "value": 2850226, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_50.00_percentile_per_query_latency_ns", "value": 1608555, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_90.00_percentile_per_query_latency_ns", "value": 6635601, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_99.00_percentile_per_query_latency_ns", "value": 11530992, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_99.90_percentile_per_query_latency_ns", "value": 11530992, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_mean_latency_ns", "value": 2140098, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_50.00_percentile_latency_ns", "value": 1440256, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_90.00_percentile_latency_ns", "value": 5115768, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_99.00_percentile_latency_ns", "value": 11081805, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_99.90_percentile_latency_ns", "value": 11530992, "time_ms": 9.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
)";

TEST(CountersFromDetail, MultiStreamReportsItsQueriesLatenciesBesideItsSamples) {
  ServeSettings serve;
  serve.scenario = "MultiStream";
  const ServeCounters c = CountersFromDetail(ParseDetailLog(kMultiStream), serve, 0);
  std::map<std::string, double> got(c.counters.begin(), c.counters.end());
  // A query of 8 samples a mean query latency apart.
  EXPECT_DOUBLE_EQ(got.at("samples/s"), 8 / 2850226e-9);
  EXPECT_DOUBLE_EQ(got.at("p99_ms"), 11.081805);
  EXPECT_DOUBLE_EQ(got.at("query_latency_mean_ms"), 2.850226);
  EXPECT_DOUBLE_EQ(got.at("query_p50_ms"), 1.608555);
  EXPECT_DOUBLE_EQ(got.at("query_p90_ms"), 6.635601);
  EXPECT_DOUBLE_EQ(got.at("query_p99_ms"), 11.530992);
  EXPECT_DOUBLE_EQ(got.at("query_p99.9_ms"), 11.530992);
  // Only MultiStream's queries hold several samples.
  serve.scenario = "SingleStream";
  const ServeCounters single = CountersFromDetail(ParseDetailLog(kMultiStream), serve, 0);
  for (const auto& [name, value] : single.counters) {
    EXPECT_EQ(name.rfind("query_", 0), std::string::npos) << name;
  }
}

TEST(CountersFromDetail, EarlyStoppingUnmetSaysLoadGensCountsAndTheFlag) {
  // early_stopping_result as LoadGen 6.0.17 logs it (newlines as spaces).
  ServeSettings serve;
  serve.scenario = "MultiStream";
  const ServeCounters multi = CountersFromDetail(
      {{"result_validity", "INVALID"},
       {"early_stopping_met", "false"},
       {"early_stopping_result",
        " * Only processed 544 queries.  * Need to process at least 662 queries for "
        "early stopping."}},
      serve, 0);
  EXPECT_EQ(
      multi.label,
      "scenario:MultiStream INVALID (early stopping not met: 544 queries of the 662 "
      "its percentile's bound needs; --serve_min_queries=662 runs them)");
  serve.scenario = "Server";
  const ServeCounters server = CountersFromDetail(
      {{"result_validity", "INVALID"},
       {"result_invalid_reason", "Reduce target QPS to improve latency. "},
       {"early_stopping_met", "false"},
       {"early_stopping_result",
        " * Run unsuccessful.  * Processed 120 queries.  * Would need to run at least 57 "
        "more queries,  with the run being successful if every additional  query were "
        "under latency."}},
      serve, 0);
  EXPECT_EQ(
      server.label,
      "scenario:Server INVALID: Reduce target QPS to improve latency. (early stopping "
      "not met: 120 queries: 57 more, all within the bound, would be needed)");
  // Server's count of queries over the bound, which LoadGen logs beside it:
  // with none over, the run was only too short, and the label says so
  // (93 queries of the 459 a p99 needs with none over the bound).
  const std::string unmet =
      " * Run unsuccessful.  * Processed 93 queries.  * Would need to run at least 366 "
      "more queries,  with the run being successful if every additional  query were "
      "under latency.";
  const ServeCounters short_run =
      CountersFromDetail({{"result_validity", "INVALID"},
                          {"early_stopping_met", "false"},
                          {"early_stopping_result", unmet},
                          {"result_overlatency_query_count", "0"}},
                         serve, 0);
  EXPECT_EQ(short_run.label,
            "scenario:Server INVALID (early stopping not met: 93 queries, none over the "
            "bound, too few for its percentile: 366 more would be needed; "
            "--serve_min_queries=459 runs them)");
  EXPECT_EQ(EarlyStoppingWhy(unmet, 3),
            "93 queries, 3 of them over the bound: 366 more, all within it, would be "
            "needed");
  // Served generation's token latencies: a result each for TTFT and TPOT,
  // the one not met named (LoadGen's over-latency count is of whole
  // requests there, not of either).
  const ServeCounters tokens =
      CountersFromDetail({{"result_validity", "INVALID"},
                          {"early_stopping_met", "false"},
                          {"early_stopping_ttft_result", " * Run successful."},
                          {"early_stopping_tpot_result", unmet},
                          {"result_overlatency_query_count", "0"}},
                         serve, 0);
  EXPECT_EQ(
      tokens.label,
      "scenario:Server INVALID (early stopping not met: TPOT: 93 queries: 366 more, "
      "all within the bound, would be needed)");
  serve.scenario = "MultiStream";
  const ServeCounters both = CountersFromDetail(
      {{"result_validity", "INVALID"},
       {"early_stopping_met", "false"},
       {"early_stopping_ttft_result",
        " * Only processed 144 queries.  * Need to process at least 1001 queries for "
        "early stopping."},
       {"early_stopping_tpot_result",
        " * Only processed 144 queries.  * Need to process at least 662 queries for "
        "early stopping."}},
      serve, 0);
  EXPECT_EQ(
      both.label,
      "scenario:MultiStream INVALID (early stopping not met: TTFT: 144 queries of the "
      "1001 its percentile's bound needs; --serve_min_queries=1001 runs them; TPOT: "
      "144 queries of the 662 its percentile's bound needs; --serve_min_queries=662 "
      "runs them)");
  // A result in words LoadGen no longer writes: the general reason.
  EXPECT_EQ(EarlyStoppingWhy(""), "too few queries for the percentile's bound");
  EXPECT_EQ(EarlyStoppingWhy(" * Only processed many queries."),
            "too few queries for the percentile's bound");
}

// A peak search as LoadGen 6.0's detail log tells it (abridged), and one
// whose starting rate missed the bound.
const char kPeakFound[] = R"log(
:::MLLOG {"key": "generic_message", "value": "FindPeakPerformance: Check validity of the base settings field: 50.000000", "time_ms": 0.1, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "generic_message", "value": "FindBoundaries: Checking fields [50.000000, 100.000000)", "time_ms": 303.5, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "generic_message", "value": "FindPeakPerformance: Found peak performance field: 575.500000", "time_ms": 4170.2, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_validity", "value": "VALID", "time_ms": 4170.3, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_completed_samples_per_sec", "value": 452.5, "time_ms": 4170.3, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
)log";
const char kPeakMissed[] = R"log(
:::MLLOG {"key": "error_runtime", "value": "FindPeakPerformance: Initial lower bound does not satisfy performance constraints, msg: Reduce target QPS to improve latency.", "time_ms": 297.9, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {"is_error": true}}
:::MLLOG {"key": "result_validity", "value": "INVALID", "time_ms": 298.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
:::MLLOG {"key": "result_completed_samples_per_sec", "value": 51.25, "time_ms": 298.0, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}
)log";

TEST(CountersFromLog, APeakFoundIsTheCounterAndTheTime) {
  ServeSettings serve;
  serve.scenario = "Server";
  serve.target_qps = 50;
  serve.find_peak = true;
  const ServeCounters c = CountersFromLog(kPeakFound, serve, 0);
  std::map<std::string, double> got(c.counters.begin(), c.counters.end());
  EXPECT_DOUBLE_EQ(got.at("peak_qps"), 575.5);
  EXPECT_DOUBLE_EQ(got.at("samples/s"), 452.5);
  EXPECT_EQ(c.label,
            "scenario:Server peak 575.5 QPS within the bound; at the peak VALID");
  EXPECT_DOUBLE_EQ(c.seconds_per_sample, 1 / 575.5);
  serve.find_peak = false;
  EXPECT_EQ(CountersFromLog(kPeakFound, serve, 0).label, "scenario:Server VALID");
}

TEST(CountersFromLog, AStartThatMissesTheBoundIsNoPeakWithLoadGensReason) {
  ServeSettings serve;
  serve.scenario = "Server";
  serve.target_qps = 50;
  serve.find_peak = true;
  const PeakSearch peak = PeakFromDetailLog(kPeakMissed);
  EXPECT_FALSE(peak.found);
  EXPECT_EQ(peak.why_not, "Reduce target QPS to improve latency.");
  const ServeCounters c = CountersFromLog(kPeakMissed, serve, 0);
  std::map<std::string, double> got(c.counters.begin(), c.counters.end());
  EXPECT_DOUBLE_EQ(got.at("peak_qps"), 0);
  EXPECT_EQ(c.label,
            "scenario:Server no peak: the starting rate 50 QPS misses the bound: Reduce "
            "target QPS to improve latency.");
  // The benchmark's error: its time, the starting test's 1 / 51.25 s, would
  // read as a rate faster than a search that found 40 QPS.
  EXPECT_EQ(c.error,
            "no peak: the starting rate 50 QPS misses the bound: Reduce target QPS to "
            "improve latency. (that test: samples/s 51.25); search from a lower "
            "--target_qps");
  EXPECT_EQ(CountersFromLog(kPeakFound, serve, 0).error, "");
}

TEST(PeakSearchDecimals, ResolveOnePercentOfTheStart) {
  EXPECT_EQ(PeakSearchDecimals(1), 2);
  EXPECT_EQ(PeakSearchDecimals(10), 1);
  EXPECT_EQ(PeakSearchDecimals(50), 1);
  EXPECT_EQ(PeakSearchDecimals(100), 0);
  EXPECT_EQ(PeakSearchDecimals(400), 0);
  EXPECT_EQ(PeakSearchDecimals(0.05), 4);
}

TEST(SetExpectedLatency, SetsTheStreamsIntervalFromAQuerysTime) {
  const mlperf::TestSettings defaults{};
  ServeSettings serve;
  serve.min_s = 1;
  for (const char* scenario : {"SingleStream", "MultiStream", "Server", "Offline"}) {
    serve.scenario = scenario;
    mlperf::TestSettings settings;
    SetExpectedLatency(0.00025, serve, settings);
    const bool single = serve.scenario == "SingleStream";
    const bool multi = serve.scenario == "MultiStream";
    EXPECT_DOUBLE_EQ(settings.single_stream_expected_latency_ns,
                     single ? 250'000 : defaults.single_stream_expected_latency_ns)
        << scenario;
    EXPECT_DOUBLE_EQ(settings.multi_stream_expected_latency_ns,
                     multi ? 250'000 : defaults.multi_stream_expected_latency_ns)
        << scenario;
    EXPECT_DOUBLE_EQ(settings.server_target_qps, defaults.server_target_qps);
  }
  // No time (a stop during the warm-up): LoadGen's default stays.
  serve.scenario = "SingleStream";
  mlperf::TestSettings untimed;
  SetExpectedLatency(0, serve, untimed);
  EXPECT_DOUBLE_EQ(untimed.single_stream_expected_latency_ns,
                   defaults.single_stream_expected_latency_ns);
  // Faster than a millionth of twice the duration: that interval, so that
  // LoadGen generates a million queries, not more.
  serve.min_s = 30;
  mlperf::TestSettings fast;
  SetExpectedLatency(1e-6, serve, fast);
  EXPECT_DOUBLE_EQ(fast.single_stream_expected_latency_ns, 60'000);
  EXPECT_DOUBLE_EQ(2 * serve.min_s * 1e9 / fast.single_stream_expected_latency_ns,
                   kMaxGeneratedQueries);
}

TEST(BoundNanoseconds, LoadGensWholeNanosecondsRoundedAndNoneBelowOne) {
  EXPECT_EQ(BoundNanoseconds(37.5), 37'500'000u);
  EXPECT_EQ(BoundNanoseconds(0.1), 100'000u);
  EXPECT_EQ(BoundNanoseconds(1e-6), 1u);
  EXPECT_EQ(BoundNanoseconds(2.7e-6), 3u);
  EXPECT_TRUE(BoundInNanoseconds(1e-6));
  for (const double ms : {5e-7, 0.0, -1.0, std::numeric_limits<double>::infinity(),
                          std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_FALSE(BoundInNanoseconds(ms)) << ms;
  }
  ServeSettings serve;
  serve.scenario = "Server";
  serve.latency_bound_ms = 5e-7;  // 0 ns: no bound at all
  const absl::Status s = ValidateServe(serve);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("at least 1e-06 (a nanosecond"), std::string::npos)
      << s.message();
}

TEST(ValidateServe, RefusesWhatCannotRunNamingTheValidChoices) {
  ServeSettings serve;
  serve.scenario = "Server";
  EXPECT_TRUE(ValidateServe(serve).ok());
  serve.scenario = "Burst";
  absl::Status s = ValidateServe(serve);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("SingleStream, MultiStream, Server, Offline"),
            std::string::npos)
      << s.message();
  serve.scenario = "Offline";
  serve.phase = "train_step";
  s = ValidateServe(serve);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("valid: forward"), std::string::npos) << s.message();
  serve.phase = "forward";
  serve.target_qps = 0;
  EXPECT_FALSE(ValidateServe(serve).ok());
  serve.target_qps = 1;
  serve.max_batch = 0;
  EXPECT_FALSE(ValidateServe(serve).ok());
  serve.max_batch = 1;
  serve.find_peak = true;
  s = ValidateServe(serve);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(
      s.message().find("Server scenario only, not Offline; valid: --scenario=Server"),
      std::string::npos)
      << s.message();
  serve.scenario = "Server";
  EXPECT_TRUE(ValidateServe(serve).ok());
  serve.phase = "encode";
  EXPECT_TRUE(ValidateServe(serve).ok());
  // A duration LoadGen cannot hold (NaN, infinity or 1e300 s cast to its
  // whole milliseconds), an unbounded bound, and a negative query size.
  for (const double min_s :
       {std::nan(""), std::numeric_limits<double>::infinity(), -1.0, 1e300, 1.000001e6}) {
    ServeSettings bad = serve;
    bad.min_s = min_s;
    s = ValidateServe(bad);
    ASSERT_FALSE(s.ok()) << min_s;
    EXPECT_NE(s.message().find("LoadGen's minimum duration must be a number of seconds "
                               "from 0 to 1e+06 (11.6 days)"),
              std::string::npos)
        << s.message();
  }
  ServeSettings longest = serve;
  longest.min_s = kMaxServeSeconds;
  EXPECT_TRUE(ValidateServe(longest).ok());
  // Offline's one query: 1.1 x 1e6 QPS x 1000 s = 1.1e9 samples, over the
  // most; 1e5 QPS holds 1.1e8.
  ServeSettings offline = serve;
  offline.scenario = "Offline";
  offline.find_peak = false;
  offline.min_s = 1000;
  offline.target_qps = 1e6;
  s = ValidateServe(offline);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("its one query would hold 1.1e+09 samples"),
            std::string::npos)
      << s.message();
  offline.target_qps = 1e5;
  EXPECT_TRUE(ValidateServe(offline).ok());
  ServeSettings unbounded = serve;
  unbounded.latency_bound_ms = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(ValidateServe(unbounded).ok());
  ServeSettings negative = serve;
  negative.scenario = "MultiStream";
  negative.find_peak = false;
  negative.samples_per_query = -3;
  s = ValidateServe(negative);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(
      s.message(),
      "--samples_per_query=-3: MultiStream's samples a query must be a whole number "
      ">= 1, or left out for LoadGen's 8");
}

TEST(ServeName, CarriesTheScenarioServersRateAndTheBatchersLimit) {
  BenchSpec spec = SpecFor("ResNet", "resnet18", "forward", 8);
  spec.phase = kServe;
  spec.serve.scenario = "Server";
  spec.serve.target_qps = 40;
  spec.serve.max_batch = 8;
  EXPECT_EQ(spec.Name(),
            "ResNet/resnet18/cpu/serve/scenario:Server/qps:40/max_batch:8/fp32");
  spec.serve.find_peak = true;
  EXPECT_EQ(
      spec.Name(),
      "ResNet/resnet18/cpu/serve/scenario:Server/find_peak_from:40/max_batch:8/fp32");
  spec.serve.find_peak = false;
  spec.serve.scenario = "Offline";  // its query: 1.1 x 40 QPS x 1 s, not 32
  EXPECT_EQ(spec.Name(),
            "ResNet/resnet18/cpu/serve/scenario:Offline/samples:44/max_batch:8/fp32");
  BenchSpec gpt = SpecFor("GPT2", "small", "forward", 4, 128);
  gpt.phase = kServe;
  gpt.serve.scenario = "SingleStream";
  gpt.serve.max_batch = 4;
  EXPECT_EQ(gpt.Name(),
            "GPT2/small/cpu/serve/scenario:SingleStream/max_batch:4/seq:128/fp32");
  EXPECT_EQ(
      ServeLogFolder("/tmp/logs", gpt),
      "/tmp/logs/GPT2_small_cpu_serve_scenario-SingleStream_max_batch-4_seq-128_fp32");
  // A second repetition's logs beside the first's, not over them.
  EXPECT_EQ(
      ServeLogFolder("/tmp/logs", gpt, 2),
      "/tmp/logs/"
      "GPT2_small_cpu_serve_scenario-SingleStream_max_batch-4_seq-128_fp32_repetition2");
}

}  // namespace
}  // namespace ltb
