// The serve phase's parts that need no LoadGen test: the batcher (every
// request run once, batches within bounds), the batched outputs against the
// unbatched phase's, the counters read from a detail log, the refusals and
// the names.
#include "serve/serve.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "family/registry.h"
#include "spec_for.h"

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

// The batcher over a family's forward workload: each sample's output, from
// whatever batch it ran in, equals the phase run on that sample alone.
void ExpectBatchedOutputsEqualUnbatched(BenchSpec spec) {
  const std::vector<Family> families = RegisteredFamilies().value();
  const Family* family = FindFamily(families, spec.family).value();
  std::unique_ptr<Workload> workload = family->build(spec);
  ASSERT_TRUE(workload->BatchInputs().defined());
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
}

TEST(ServeName, CarriesTheScenarioServersRateAndTheBatchersLimit) {
  BenchSpec spec = SpecFor("ResNet", "resnet18", "forward", 8);
  spec.phase = kServe;
  spec.serve.scenario = "Server";
  spec.serve.target_qps = 40;
  spec.serve.max_batch = 8;
  EXPECT_EQ(spec.Name(),
            "ResNet/resnet18/cpu/serve/scenario:Server/qps:40/max_batch:8/fp32");
  spec.serve.scenario = "Offline";
  EXPECT_EQ(spec.Name(), "ResNet/resnet18/cpu/serve/scenario:Offline/max_batch:8/fp32");
  BenchSpec gpt = SpecFor("GPT2", "small", "forward", 4, 128);
  gpt.phase = kServe;
  gpt.serve.scenario = "SingleStream";
  gpt.serve.max_batch = 4;
  EXPECT_EQ(gpt.Name(),
            "GPT2/small/cpu/serve/scenario:SingleStream/max_batch:4/seq:128/fp32");
  EXPECT_EQ(
      ServeLogFolder("/tmp/logs", gpt),
      "/tmp/logs/GPT2_small_cpu_serve_scenario-SingleStream_max_batch-4_seq-128_fp32");
}

}  // namespace
}  // namespace ltb
