// A fake GPU: a device backend over CPU tensors, registered in this test
// only, that logs every synchronisation, clock mark, peak reset, cache
// release and collective. Benchmarks run on it end to end through
// RunBenchmark prove that the harness takes a GPU's path: timed by the
// backend's clock (whose intervals it makes up, so the reported times are
// known exactly), the host waiting only where the clock reads its marks,
// memory peaks reset between the warm-up and the measured steps and read
// from the backend, and the data-parallel collectives on the backend's
// communicator around the measured steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "base/torch_compat.h"
#if LTB_HAS_C10D_BACKEND
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include "device/device.h"
#include "distributed/distributed.h"
#include "family/registry.h"
#include "free_port.h"
#include "measure/health.h"
#include "measure/runner.h"
#include "spec_for.h"
#include "workloads/optimizers.h"

namespace ltb {
namespace {

constexpr double kStepSeconds = 0.004;  // what the fake clock says each step took
constexpr int64_t kPeakBytes = 12345;   // what the fake device says its peak was

using Log = std::vector<std::string>;

// The fake device's sticky fault: "" while it works.
std::string& Fault() {
  static std::string fault;
  return fault;
}

class FakeClock final : public StepClock {
 public:
  FakeClock(Log* log, bool sync) : log_(log), sync_(sync) {}
  void Clear() override { marks_ = 0; }
  void Mark() override {
    log_->push_back(sync_ ? "mark" : "host_mark");
    ++marks_;
  }
  std::vector<double> Intervals() override {
    // After a fault, waiting on the device fails, as CUDA's sticky errors do.
    TORCH_CHECK(Fault().empty(), Fault());
    if (sync_) log_->push_back("wait");  // an event clock waits for its last mark
    return std::vector<double>(marks_ > 1 ? marks_ - 1 : 0, kStepSeconds);
  }

 private:
  Log* log_;
  bool sync_;
  int marks_ = 0;
};

#if LTB_HAS_C10D_BACKEND
// Forwards to a real (Gloo) backend and logs each collective.
class LoggingCollectives final : public CommBackend {
 public:
  LoggingCollectives(c10::intrusive_ptr<CommBackend> inner, Log* log)
      : CommBackend(inner->getRank(), inner->getSize()),
        inner_(std::move(inner)),
        log_(log) {}
  const std::string getBackendName() const override { return "fake"; }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    log_->push_back("allreduce");
    return inner_->allreduce(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    log_->push_back("broadcast");
    return inner_->broadcast(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    log_->push_back("barrier");
    return inner_->barrier(opts);
  }

 private:
  c10::intrusive_ptr<CommBackend> inner_;
  Log* log_;
};
#endif

// cpu:0 is a CPU device the CPU backend never names (it names cpu), so the
// fake can own it while its tensors stay CPU tensors.
const c10::Device kFake(c10::kCPU, 0);

class FakeGpuBackend final : public DeviceBackend {
 public:
  explicit FakeGpuBackend(Log* log) : log_(log) {}
  bool Owns(const c10::Device& d) const override { return d == kFake; }
  std::optional<absl::StatusOr<c10::Device>> Parse(
      const std::string& text) const override {
    if (text == "fakegpu") return absl::StatusOr<c10::Device>(kFake);
    return std::nullopt;
  }
  std::string Forms() const override { return "fakegpu"; }
  std::string Name(const c10::Device&) const override { return "fakegpu"; }
  std::string DisplayName(const c10::Device&) const override { return "Fake GPU"; }
  bool Available(const c10::Device&, std::string*) const override { return true; }
  std::vector<c10::Device> Enumerate() const override { return {}; }
  std::string Summary() const override { return ""; }
  Capabilities Caps() const override {
    Capabilities c;
    c.profiled_kernels = false;
    c.foreach_optimizers = true;
    return c;  // not the host: GPU shapes, no packed linears
  }
  void Synchronize(const c10::Device&) const override {
    TORCH_CHECK(Fault().empty(), Fault());
    log_->push_back("sync");
  }
  bool Usable(const c10::Device&, std::string* why) const override {
    *why = Fault();
    return Fault().empty();
  }
  std::unique_ptr<StepClock> MakeClock(const c10::Device&, bool sync) const override {
    return std::make_unique<FakeClock>(log_, sync);
  }
  int64_t AvailableBytes(const c10::Device&) const override { return int64_t{1} << 40; }
  void ResetPeakMemory(const c10::Device&) const override {
    log_->push_back("reset_peak");
  }
  int64_t PeakMemory(const c10::Device&) const override { return kPeakBytes; }
  void ReleaseCache(const c10::Device&) const override { log_->push_back("release"); }
  absl::StatusOr<c10::Device> BindRank(int) const override { return kFake; }
  absl::StatusOr<c10::intrusive_ptr<CommBackend>> MakeCollectives(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
      const std::string& host, std::chrono::milliseconds timeout) const override {
    absl::StatusOr<c10::intrusive_ptr<CommBackend>> gloo =
        BackendOf(HostDevice()).MakeCollectives(store, rank, world_size, host, timeout);
#if LTB_HAS_C10D_BACKEND
    if (!gloo.ok()) return gloo.status();
    return c10::intrusive_ptr<CommBackend>(
        c10::make_intrusive<LoggingCollectives>(*gloo, log_));
#else
    return gloo;
#endif
  }
  std::string CollectivesName() const override { return "fake"; }

 private:
  Log* log_;
};

class CaptureReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) this->runs.push_back(r);
  }
  std::vector<Run> runs;
};

size_t Count(const Log& log, const std::string& what, size_t from = 0,
             size_t to = std::string::npos) {
  to = std::min(to, log.size());
  return static_cast<size_t>(std::count(log.begin() + from, log.begin() + to, what));
}

size_t First(const Log& log, const std::string& what, size_t from = 0) {
  return static_cast<size_t>(std::find(log.begin() + from, log.end(), what) -
                             log.begin());
}

class FakeGpuTest : public ::testing::Test {
 protected:
  FakeGpuTest() : registration_(std::make_unique<FakeGpuBackend>(&log_)) {}
  ~FakeGpuTest() override {
    ReleaseCachedWorkload();
    Fault().clear();
    ClearUnusableDevices();
  }

  // Runs `spec` for `iterations` measured steps through RunBenchmark, as a
  // registered benchmark of the suite would.
  benchmark::BenchmarkReporter::Run Run(const BenchSpec& spec, int iterations) {
    static const std::vector<Family>* families =
        new std::vector<Family>(RegisteredFamilies(/*include_test_only=*/true).value());
    const Family* family = FindFamily(*families, spec.family).value();
    RunOptions options;
    options.warmup_seconds = 0;
    options.warmup_steps = 2;
    const std::string name = "FakeGpu_" + std::to_string(++runs_) + "/" + spec.Name();
    benchmark::RegisterBenchmark(name.c_str(),
                                 [family, spec, options](benchmark::State& state) {
                                   RunBenchmark(state, *family, spec, options);
                                 })
        ->UseManualTime()
        ->Iterations(iterations);
    CaptureReporter reporter;
    // Google Benchmark appends /iterations:N/manual_time to the name.
    benchmark::RunSpecifiedBenchmarks(&reporter,
                                      "^FakeGpu_" + std::to_string(runs_) + "/");
    EXPECT_EQ(reporter.runs.size(), 1u);
    return reporter.runs.empty() ? benchmark::BenchmarkReporter::Run() : reporter.runs[0];
  }

  static BenchSpec TransformerOn(const std::string& phase) {
    BenchSpec s = SpecFor("Transformer", "nano", phase, 2, 16);
    s.device = kFake;
    return s;
  }

  Log log_;
  BackendRegistration registration_;
  static inline int runs_ = 0;
};

TEST_F(FakeGpuTest, NamesAndParsesThroughTheRegisteredBackend) {
  EXPECT_EQ(ParseDevice("fakegpu").value(), kFake);
  EXPECT_EQ(DeviceName(kFake), "fakegpu");
  EXPECT_EQ(TransformerOn("forward").Name(),
            "Transformer/nano/fakegpu/forward/batch:2/seq:16/fp32");
  EXPECT_EQ(DeviceName(HostDevice()), "cpu");  // the CPU stays the CPU's
  EXPECT_NE(ParseDevice("tpu").status().message().find("or fakegpu"), std::string::npos);
}

TEST_F(FakeGpuTest, TimedByTheBackendsClockWaitingOnlyToReadIt) {
  const auto run = Run(TransformerOn("forward"), 3);
  ASSERT_FALSE(run.error_occurred) << run.error_message;
  // Every measured step lasted what the device's clock said, not what the
  // host's clock saw.
  EXPECT_EQ(run.iterations, 3);
  EXPECT_NEAR(run.real_accumulated_time, 3 * kStepSeconds, 1e-12);
  EXPECT_NEAR(run.counters.at("step_p50_ms").value, kStepSeconds * 1e3, 1e-9);
  EXPECT_EQ(run.counters.at("step_p99_ms").value, run.counters.at("step_p50_ms").value);

  // Two warm-up steps and three measured ones, each a pair of marks and one
  // wait for the second; the peak reset lies between them; no other
  // synchronisation while measuring.
  const size_t reset = First(log_, "reset_peak");
  ASSERT_LT(reset, log_.size());
  EXPECT_EQ(Count(log_, "reset_peak"), 1u);
  EXPECT_EQ(Count(log_, "mark", 0, reset), 4u);
  EXPECT_EQ(Count(log_, "wait", 0, reset), 2u);
  EXPECT_EQ(Count(log_, "mark", reset), 6u);
  EXPECT_EQ(Count(log_, "wait", reset), 3u);
  EXPECT_EQ(Count(log_, "sync", reset), 0u);
  // The peak memory is the device's, read from its backend.
  EXPECT_EQ(run.counters.at("peak_mem").value, kPeakBytes);

  // The kept workload is given back on the device: synchronised, then its
  // cache released.
  const size_t before = log_.size();
  ReleaseCachedWorkload();
  EXPECT_EQ(Log(log_.begin() + before, log_.end()), (Log{"sync", "release"}));
}

TEST_F(FakeGpuTest, WithoutSyncTheHostClockIsReadAndTheDeviceWaitedForOnceAtTheEnd) {
  BenchSpec spec = TransformerOn("forward");
  spec.sync = false;
  const auto run = Run(spec, 4);
  ASSERT_FALSE(run.error_occurred) << run.error_message;
  const size_t reset = First(log_, "reset_peak");
  ASSERT_LT(reset, log_.size());
  // The warm-up still synchronises (its clock does); the measured steps do
  // not, and one synchronisation follows them so nothing leaks into the
  // next benchmark.
  EXPECT_EQ(Count(log_, "wait", reset), 0u);
  EXPECT_EQ(Count(log_, "host_mark", reset), 8u);
  EXPECT_EQ(Count(log_, "sync", reset), 1u);
  EXPECT_EQ(log_.back(), "sync");
}

TEST_F(FakeGpuTest, TrainingRunsAndTimesLikeInference) {
  const auto run = Run(TransformerOn("train_step"), 2);
  ASSERT_FALSE(run.error_occurred) << run.error_message;
  EXPECT_NEAR(run.real_accumulated_time, 2 * kStepSeconds, 1e-12);
  EXPECT_GT(run.counters.at("tokens/s").value, 0);
}

#if LTB_HAS_C10D_BACKEND
TEST_F(FakeGpuTest, DataParallelCollectivesGoThroughTheBackendAroundTheMeasuredSteps) {
  DistEnv env;
  env.master_port = FreePort();
  absl::StatusOr<std::unique_ptr<DataParallel>> group = JoinProcessGroup(env, kFake);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)->device(), kFake);
  SetCurrentProcessGroup(*std::move(group));
  const BenchSpec spec = TransformerOn("train_step");
  ASSERT_TRUE(spec.data_parallel);
  const auto run = Run(spec, 3);
  SetCurrentProcessGroup(nullptr);
  ASSERT_FALSE(run.error_occurred) << run.error_message;

  // Before anything runs: the memory guard's vote, then rank 0's weights
  // broadcast. Each of the 2 warm-up and 3 measured steps: one all-reduce
  // of the gradients (the nano model's fit one bucket), inside its marks.
  // After the last measured step: the peak memory's maximum over the ranks.
  const size_t first_mark = First(log_, "mark");
  ASSERT_LT(first_mark, log_.size());
  size_t last_wait = 0;
  for (size_t i = 0; i < log_.size(); ++i) {
    if (log_[i] == "wait") last_wait = i;
  }
  const size_t vote = First(log_, "allreduce");
  EXPECT_LT(vote, First(log_, "broadcast"));
  EXPECT_LT(First(log_, "broadcast"), first_mark);
  EXPECT_EQ(Count(log_, "allreduce", 0, first_mark), 1u);
  EXPECT_EQ(Count(log_, "allreduce", first_mark, last_wait), 5u);
  for (size_t i = first_mark; i < last_wait; ++i) {
    if (log_[i] == "allreduce") EXPECT_EQ(log_[i - 1], "mark") << i;
  }
  EXPECT_EQ(Count(log_, "allreduce", last_wait), 1u);
  EXPECT_EQ(Count(log_, "barrier"), 0u);
  EXPECT_EQ(run.counters.at("peak_mem").value, kPeakBytes);
}
#endif

TEST_F(FakeGpuTest, OptimizersStepWithForeachKernelsWhereTheBackendSaysPythonDoes) {
  at::Tensor w = at::ones({3}, at::TensorOptions().device(kFake).requires_grad(true));
  EXPECT_TRUE(DefaultsToForeach(kFake));
  auto adamw = MakeAdamW(kFake, {w}, torch::optim::AdamWOptions(1e-3));
  EXPECT_NE(dynamic_cast<ForeachAdamW*>(adamw.get()), nullptr);
  auto sgd = MakeSGD(kFake, {w}, torch::optim::SGDOptions(0.1));
  EXPECT_NE(dynamic_cast<ForeachSGD*>(sgd.get()), nullptr);
}

TEST_F(FakeGpuTest, AFaultLeavesTheDeviceUnusableWhileTheCpuGoesOn) {
  const benchmark::BenchmarkReporter::Run before = Run(TransformerOn("forward"), 2);
  EXPECT_FALSE(before.error_occurred) << before.error_message;
  ReleaseCachedWorkload();
  // A device-side fault during the next benchmark's steps.
  Fault() = "CUDA error: an illegal memory access was encountered";
  const BenchSpec faulting = TransformerOn("forward_backward");
  const benchmark::BenchmarkReporter::Run failed = Run(faulting, 2);
  EXPECT_TRUE(failed.error_occurred);
  EXPECT_NE(failed.error_message.find("illegal memory access"), std::string::npos)
      << failed.error_message;
  EXPECT_NE(failed.error_message.find("fakegpu is unusable after this fault"),
            std::string::npos)
      << failed.error_message;
  // Later benchmarks on the device fail at once, naming the fault; releasing
  // the faulted workload (which synchronises) did not end the process.
  const std::string log_before = std::to_string(log_.size());
  const benchmark::BenchmarkReporter::Run later = Run(TransformerOn("train_step"), 2);
  EXPECT_TRUE(later.error_occurred);
  EXPECT_NE(later.error_message.find("not run: fakegpu is unusable: a fault in " +
                                     faulting.Name()),
            std::string::npos)
      << later.error_message;
  EXPECT_EQ(std::to_string(log_.size()), log_before) << "nothing ran on the device";
  // The CPU goes on.
  BenchSpec cpu = TransformerOn("forward");
  cpu.device = c10::Device(c10::kCPU);
  const benchmark::BenchmarkReporter::Run on_cpu = Run(cpu, 2);
  EXPECT_FALSE(on_cpu.error_occurred) << on_cpu.error_message;
  EXPECT_GT(on_cpu.counters.at("tokens/s").value, 0);
}

}  // namespace
}  // namespace ltb
