// A fake GPU: a device backend over CPU tensors, registered in this test
// only, that logs every synchronisation, clock mark, peak reset, cache
// release and collective. Benchmarks run on it end to end through
// a Runner prove that the harness takes a GPU's path: timed by the
// backend's clock (whose intervals it makes up, so the reported times are
// known exactly), the host waiting only where the clock reads its marks,
// memory peaks reset between the warm-up and the measured steps and read
// from the backend (only once the device is initialised, on every
// data-parallel rank), and the data-parallel collectives on the backend's
// communicator around the measured steps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/strings/match.h"
#include "base/torch_compat.h"
#if LTB_HAS_C10D_BACKEND
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include "device/device.h"
#include "device/graph_capture.h"
#include "distributed/distributed.h"
#include "family/registry.h"
#include "free_port.h"
#include "measure/health.h"
#include "measure/runner.h"
#include "measure/timed_loop.h"
#include "run_ranks.h"
#include "serve/text_serve.h"
#include "spec_for.h"
#include "workloads/optimizers.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

constexpr double kStepSeconds = 0.004;  // what the fake clock says each step took
constexpr int64_t kPeakBytes = 12345;   // what the fake device says its peak was

using Log = std::vector<std::string>;

// What the fake clock says each sample (the time between two marks) took;
// kStepSeconds unless a test says otherwise.
double& SampleSeconds() {
  static double seconds = kStepSeconds;
  return seconds;
}

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
    return std::vector<double>(marks_ > 1 ? marks_ - 1 : 0, SampleSeconds());
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

constexpr int64_t kPoolBytes =
    3000;  // what the fake graphs' pool holds beyond live tensors

// Whether the fake's next capture fails while it records (a step that
// cannot be captured).
bool& FailNextCapture() {
  static bool fail = false;
  return fail;
}

// A graph API as strict about the order it is driven in as PyTorch's
// CUDAGraph: a capture begins only on the capture stream, only into the one
// pool made before the first capture, and only when no other is open; the
// device cannot be synchronised while a capture is open (CUDA refuses, and
// the error sticks). It records a step's function at capture without running
// it, as CUDA records kernels without running them, and runs it at each
// replay.
class FakeGraphApi final : public GraphApi {
 public:
  explicit FakeGraphApi(Log* log) : log_(log) {}
  void Synchronize() override {
    if (capturing_) Fault() = "operation not permitted when stream is capturing";
    TORCH_CHECK(Fault().empty(), Fault());
    log_->push_back("sync");
  }
  void UseCaptureStream(bool on) override { on_capture_stream_ = on; }
  void NewPool() override {
    TORCH_CHECK(!capturing_, "graph_pool_handle during a capture");
    ++pools_;
    log_->push_back("new_pool");
  }
  void BeginCapture() override {
    TORCH_CHECK(pools_ == 1,
                "every graph captures into the one pool made before the first");
    TORCH_CHECK(on_capture_stream_, "capture_begin on the current stream");
    TORCH_CHECK(!capturing_, "capture_begin while a capture is open");
    capturing_ = true;
    log_->push_back("capture");
  }
  void Record(const std::function<void()>& step) override {
    TORCH_CHECK(capturing_, "recording with no capture open");
    if (FailNextCapture()) {
      FailNextCapture() = false;
      TORCH_CHECK(false, "the step cannot be captured");
    }
    pending_ = step;
  }
  void EndCapture() override {
    TORCH_CHECK(capturing_, "capture_end without capture_begin");
    capturing_ = false;
    steps_.push_back(std::move(pending_));
  }
  void AbortCapture() override {
    if (capturing_) log_->push_back("abort_capture");
    capturing_ = false;
    pending_ = nullptr;
  }
  void Replay(size_t graph) override {
    TORCH_CHECK(!capturing_, "replay while a capture is open");
    TORCH_CHECK(graph < steps_.size(), "no graph ", graph);
    log_->push_back("replay");
    steps_[graph]();
  }
  int64_t PoolBytes() const override { return kPoolBytes; }

 private:
  Log* log_;
  bool on_capture_stream_ = false;
  bool capturing_ = false;
  int pools_ = 0;
  std::function<void()> pending_;
  std::vector<std::function<void()>> steps_;
};

// An energy counter that counts 2 J between any two readings.
class FakeEnergy final : public EnergyMeter {
 public:
  double Joules() override { return 2.0 * readings_++; }
  double MinSeconds() const override { return 0; }
  double MaxSeconds() const override { return 1e9; }
  std::string Covers() const override { return "fake"; }
  std::string Source() const override { return "fake"; }

 private:
  int readings_ = 0;
};

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
    c.tf32 = true;
    c.graphs = true;
    return c;  // not the host: GPU shapes, no packed linears
  }
  void Synchronize(const c10::Device&) const override {
    TORCH_CHECK(Fault().empty(), Fault());
    log_->push_back("sync");
  }
  absl::StatusOr<std::unique_ptr<EnergyMeter>> MakeEnergyMeter(
      const c10::Device&) const override {
    return std::unique_ptr<EnergyMeter>(std::make_unique<FakeEnergy>());
  }
  std::unique_ptr<StepGraphs> MakeGraphs(const c10::Device&) const override {
    return std::make_unique<CapturedSteps>(std::make_unique<FakeGraphApi>(log_));
  }
  // Logs each change of the device's TF32 state, as a GPU's global flag.
  void SetTf32(bool on) const override {
    if (on != tf32_) log_->push_back(on ? "tf32_on" : "tf32_off");
    tf32_ = on;
  }
  bool Usable(const c10::Device&, std::string* why) const override {
    *why = Fault();
    return Fault().empty();
  }
  std::unique_ptr<StepClock> MakeClock(const c10::Device&, bool sync) const override {
    return std::make_unique<FakeClock>(log_, sync);
  }
  // Its memory can be read only once it is initialised, as CUDA's caching
  // allocator's.
  void Initialize(const c10::Device&) const override {
    if (!initialized_) log_->push_back("init");
    initialized_ = true;
  }
  int64_t AvailableBytes(const c10::Device&) const override {
    CheckInitialized();
    log_->push_back("available");
    return int64_t{1} << 40;
  }
  void ResetPeakMemory(const c10::Device&) const override {
    CheckInitialized();
    log_->push_back("reset_peak");
  }
  int64_t PeakMemory(const c10::Device&) const override {
    CheckInitialized();
    return kPeakBytes;
  }
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
  void CheckInitialized() const {
    TORCH_CHECK(initialized_, "the fake GPU's memory was read before it was initialised");
  }

  Log* log_;
  mutable bool tf32_ = false;
  mutable bool initialized_ = false;
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
    runner_.Release();
    Fault().clear();
    FailNextCapture() = false;
    SampleSeconds() = kStepSeconds;
    ClearUnusableDevices();
  }

  // Runs `spec` for `iterations` measured steps through the test's Runner, as
  // a registered benchmark of the suite would.
  benchmark::BenchmarkReporter::Run Run(const BenchSpec& spec, int iterations) {
    static const std::vector<Family>* families =
        new std::vector<Family>(RegisteredFamilies(/*include_test_only=*/true).value());
    const Family* family = FindFamily(*families, spec.family).value();
    const std::string name = "FakeGpu_" + std::to_string(++runs_) + "/" + spec.Name();
    // Registered for this run only: its unique prefix selects it once.
    Runner* runner = &runner_;
    benchmark::RegisterBenchmark(name.c_str(),
                                 [family, spec, runner](benchmark::State& state) {
                                   runner->Run(state, *family, spec);
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

  static RunOptions TestRunOptions() {
    RunOptions options;
    options.warmup_seconds = 0;
    options.warmup_steps = 2;
    return options;
  }

  Log log_;
  BackendRegistration registration_;
  Runner runner_{TestRunOptions()};
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
  runner_.Release();
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

  // Before anything runs: the ranks on this machine counted and the memory
  // guard's vote (two all-reduces), then rank 0's weights
  // and buffers broadcast (one 250 MB bucket: all fp32). Each of the 2
  // warm-up and 3 measured steps, inside its marks: rank 0's buffers (the
  // rotary tables, one bucket) broadcast before the forward, then one
  // all-reduce of the gradients (the nano model's fit one bucket); through
  // c10d::Reducer, the second step first rebuilds the buckets in rank 0's
  // order of the first backward (more broadcasts, before the buffers'). After
  // the measured steps, comm_exposed_ms: 5 pairs of steps with and without
  // averaging (5 all-reduces, 5 broadcasts of the buffers), then rank 0's
  // weights and buffers broadcast again. Last, the peak memory's maximum and
  // the energy's sum.
  const auto nth_mark = [&](size_t n) {  // the index of the n-th mark
    size_t i = 0;
    for (size_t marks = 0; i < log_.size(); ++i) {
      if (log_[i] == "mark" && ++marks == n) break;
    }
    return i;
  };
  const size_t first_mark = nth_mark(1);
  const size_t measured_end = nth_mark(10);  // 5 steps of 2 marks
  ASSERT_LT(measured_end, log_.size());
  size_t last_wait = 0;
  for (size_t i = 0; i < log_.size(); ++i) {
    if (log_[i] == "wait") last_wait = i;
  }
  const size_t vote = First(log_, "allreduce");
  EXPECT_LT(vote, First(log_, "broadcast"));
  EXPECT_EQ(Count(log_, "broadcast", 0, first_mark), 1u);
  EXPECT_EQ(Count(log_, "allreduce", 0, first_mark), 2u);
  for (size_t step = 1; step <= 5; ++step) {
    const size_t begin = nth_mark(2 * step - 1), end = nth_mark(2 * step);
    EXPECT_EQ(Count(log_, "allreduce", begin, end), 1u) << "step " << step;
    const size_t broadcasts = Count(log_, "broadcast", begin, end);
    // The gradients' all-reduce comes after the buffers' broadcast.
    const size_t allreduce = First(log_, "allreduce", begin);
    EXPECT_EQ(log_[allreduce - 1], "broadcast") << "step " << step;
#if LTB_HAS_REDUCER
    if (step == 2) {
      EXPECT_GT(broadcasts, 1u);
      continue;
    }
#endif
    EXPECT_EQ(broadcasts, 1u) << "step " << step;
  }
  EXPECT_EQ(Count(log_, "mark", measured_end + 1), 20u);
  EXPECT_EQ(Count(log_, "allreduce", measured_end + 1, last_wait), 5u);
  EXPECT_EQ(Count(log_, "broadcast", measured_end + 1, last_wait), 5u);
  EXPECT_EQ(Count(log_, "broadcast", last_wait), 1u);
  const size_t resync = First(log_, "broadcast", last_wait);
  EXPECT_LT(resync, First(log_, "allreduce", last_wait));
  EXPECT_EQ(Count(log_, "allreduce", last_wait), 2u);
  EXPECT_EQ(run.counters.at("grad_buckets").value, 1);
  // The fake clock gives every step the same time: nothing is exposed.
  EXPECT_EQ(run.counters.at("comm_exposed_ms").value, 0);
  EXPECT_EQ(Count(log_, "barrier"), 0u);
  EXPECT_EQ(run.counters.at("peak_mem").value, kPeakBytes);
}
#endif

// The ranks' side of the test below: a data-parallel benchmark on a fake
// GPU that nothing has run on yet (no rank measured peaks on it), then the
// benchmark's outcome and the device's log, written where the test reads it.
TEST_F(FakeGpuTest, RankRunsADataParallelBenchmarkOnAFreshDevice) {
  const char* out = std::getenv("LTB_FAKE_RANK_OUT");
  if (out == nullptr) {
    GTEST_SKIP()
        << "run by FakeGpuRanks.EveryRankInitialisesItsDeviceBeforeReadingItsMemory";
  }
  const DistEnv env = ReadDistEnv().value();
  absl::StatusOr<std::unique_ptr<DataParallel>> group = JoinProcessGroup(env, kFake);
  ASSERT_TRUE(group.ok()) << group.status();
  SetCurrentProcessGroup(*std::move(group));
  const auto run = Run(TransformerOn("train_step"), 2);
  SetCurrentProcessGroup(nullptr);
  std::ofstream result(out);
  result << (run.error_occurred ? "error: " + run.error_message : "ok") << "\n";
  for (const std::string& entry : log_) result << entry << "\n";
}

// A rank other than 0 runs no peak measurement, so its first benchmark's
// memory guard is the first thing to touch its device: the device must be
// initialised before its memory is read (CUDA's caching allocator refuses),
// or that rank fails and rank 0 waits in the guard's vote.
TEST(FakeGpuRanks, EveryRankInitialisesItsDeviceBeforeReadingItsMemory) {
  const std::string out =
      testing::TempDir() + "/ltb_fake_ranks_" + std::to_string(::getpid()) + ".";
  EXPECT_TRUE(RunRanks("FakeGpuTest.RankRunsADataParallelBenchmarkOnAFreshDevice",
                       {"LTB_FAKE_RANK_OUT=" + out + "%r"}))
      << "a rank failed";
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = out + std::to_string(rank);
    std::ifstream in(path);
    std::string outcome;
    ASSERT_TRUE(std::getline(in, outcome)) << "rank " << rank << " wrote nothing";
    EXPECT_EQ(outcome, "ok") << "rank " << rank;
    Log log;
    for (std::string entry; std::getline(in, entry);) log.push_back(entry);
    const size_t available = First(log, "available");
    ASSERT_LT(available, log.size()) << "rank " << rank << ": the guard read no memory";
    EXPECT_LT(First(log, "init"), available) << "rank " << rank;
    EXPECT_EQ(Count(log, "init"), 1u) << "rank " << rank;
    std::filesystem::remove(path);
  }
}

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
  runner_.Release();
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

TEST_F(FakeGpuTest, SubMillisecondStepsAreTimedSeveralToASample) {
  // Warm-up steps of 100 us: ten steps a sample make a millisecond.
  SampleSeconds() = 100e-6;
  const auto run = Run(TransformerOn("forward"), 30);
  ASSERT_FALSE(run.error_occurred) << run.error_message;
  EXPECT_EQ(run.counters.at("launches_per_sample").value, 10);
  EXPECT_EQ(run.iterations, 30);  // Google Benchmark counts steps
  // Three samples of ten steps, each timed once: the fake clock says each
  // sample took 100 us, so a step took 10 us.
  const size_t reset = First(log_, "reset_peak");
  EXPECT_EQ(Count(log_, "mark", reset), 6u);
  EXPECT_EQ(Count(log_, "wait", reset), 3u);
  EXPECT_NEAR(run.real_accumulated_time, 3 * 100e-6, 1e-12);
  EXPECT_NEAR(run.counters.at("step_p50_ms").value, 10e-3, 1e-9);
  // tokens/s counts every step: 2 x 16 tokens in 10 us.
  EXPECT_NEAR(run.counters.at("tokens/s").value, 32 / 10e-6, 1);

  // Millisecond steps keep one step a sample.
  SampleSeconds() = kStepSeconds;
  const auto slow = Run(TransformerOn("forward_backward"), 3);
  EXPECT_EQ(slow.counters.at("launches_per_sample").value, 1);
  EXPECT_EQ(slow.iterations, 3);
}

TEST(LaunchesPerSample, EnoughForAMillisecondOnAsynchronousDevicesOnly) {
  EXPECT_EQ(LaunchesPerSample(100e-6, true), 10);
  EXPECT_EQ(LaunchesPerSample(300e-6, true), 4);  // ceil(3.33)
  EXPECT_EQ(LaunchesPerSample(1e-3, true), 1);
  EXPECT_EQ(LaunchesPerSample(50e-3, true), 1);
  EXPECT_EQ(LaunchesPerSample(1e-9, true), kMaxLaunchesPerSample);
  EXPECT_EQ(LaunchesPerSample(0, true), 1);  // no measurement: no batching
  EXPECT_EQ(LaunchesPerSample(100e-6, false), 1);
  // Evened out over Google Benchmark's iterations: 25 steps in 3 samples of
  // 9, not 3 of 10; never more than the iterations.
  EXPECT_EQ(EvenLaunches(10, 30), 10);
  EXPECT_EQ(EvenLaunches(10, 25), 9);
  EXPECT_EQ(EvenLaunches(10, 4), 4);
  EXPECT_EQ(EvenLaunches(10, 1), 1);
  EXPECT_EQ(EvenLaunches(1, 1000), 1);
}

TEST_F(FakeGpuTest, EnergyIsTheCountersDifferenceOverTheMeasuredSteps) {
  const auto run = Run(TransformerOn("forward"), 4);
  ASSERT_FALSE(run.error_occurred) << run.error_message;
  // 2 J over 4 steps of 2 x 16 tokens; a language model counts no samples.
  EXPECT_DOUBLE_EQ(run.counters.at("energy_J").value, 0.5);
  EXPECT_DOUBLE_EQ(run.counters.at("J/token").value, 0.5 / 32);
  EXPECT_EQ(run.counters.count("J/sample"), 0u);
}

TEST_F(FakeGpuTest, AGraphBenchmarkCapturesItsStepOnceAndReplaysIt) {
  BenchSpec spec = TransformerOn("forward");
  spec.graph = true;
  const auto run = Run(spec, 3);
  ASSERT_FALSE(run.error_occurred) << run.error_message;
  EXPECT_TRUE(
      absl::EndsWith(run.benchmark_name(), "/fp32/graph/iterations:3/manual_time"))
      << run.benchmark_name();
  EXPECT_EQ(Count(log_, "capture"), 1u);
  const size_t reset = First(log_, "reset_peak");
  EXPECT_LT(First(log_, "capture"), reset);
  EXPECT_EQ(Count(log_, "replay", 0, reset), 2u);  // the warm-up replays too
  EXPECT_EQ(Count(log_, "replay", reset), 3u);
  EXPECT_GT(run.counters.at("tokens/s").value, 0);
  // The activations the replays write live in the graph's pool, which no
  // allocation after the capture accounts for: peak memory counts it.
  EXPECT_EQ(run.counters.at("peak_mem").value, kPeakBytes + kPoolBytes);
}

TEST_F(FakeGpuTest, ACaptureThatFailsCostsOneBenchmarkNotTheDevice) {
  BenchSpec spec = TransformerOn("forward");
  spec.graph = true;
  FailNextCapture() = true;
  const auto failed = Run(spec, 3);
  ASSERT_TRUE(failed.error_occurred);
  EXPECT_NE(failed.error_message.find("the step cannot be captured"), std::string::npos)
      << failed.error_message;
  // The open capture was ended before the error went on: the device was
  // never synchronised mid-capture, and what follows runs.
  EXPECT_EQ(Count(log_, "abort_capture"), 1u);
  EXPECT_TRUE(Fault().empty()) << Fault();
  const auto eager = Run(TransformerOn("forward"), 2);
  EXPECT_FALSE(eager.error_occurred) << eager.error_message;
  const auto graphed = Run(spec, 2);
  EXPECT_FALSE(graphed.error_occurred) << graphed.error_message;
}

TEST_F(FakeGpuTest, AGraphsAccuracyIsCheckedOnWhatAReplayComputed) {
  BenchSpec spec = TransformerOn("forward");
  const std::vector<Family> families = RegisteredFamilies(true).value();
  const Family* transformer = FindFamily(families, "Transformer").value();
  at::manual_seed(7);
  const at::Tensor eager = transformer->build(spec)->Evaluate();
  spec.graph = true;
  at::manual_seed(7);
  std::unique_ptr<Workload> graphed = GraphedSteps(transformer->build(spec), kFake);
  const size_t replays = Count(log_, "replay");
  const at::Tensor replayed = graphed->Evaluate();
  EXPECT_EQ(Count(log_, "replay"), replays + 1);
  ASSERT_TRUE(replayed.defined());
  EXPECT_TRUE(at::equal(replayed, eager));
  // A copy: the next replay rewrites the graph's output, not this.
  graphed->Step();
  EXPECT_TRUE(at::equal(replayed, eager));
}

TEST_F(FakeGpuTest, GraphedDecodingCapturesEachPositionAndGeneratesTheSameTokens) {
  BenchSpec spec = SpecFor("GPT2", "nano", "generate", 2, 0);
  spec.device = kFake;
  spec.prompt = 8;
  spec.new_tokens = 6;
  const std::vector<Family> families = RegisteredFamilies(true).value();
  const Family* gpt2 = FindFamily(families, "GPT2").value();
  at::manual_seed(7);
  const at::Tensor eager = gpt2->build(spec)->Evaluate();
  spec.graph = true;
  at::manual_seed(7);
  std::unique_ptr<Workload> graphed = GraphedSteps(gpt2->build(spec), kFake);
  EXPECT_EQ(Count(log_, "capture"), 0u) << "captured on first use, after a prefill";
  const at::Tensor tokens = graphed->Evaluate();
  // One graph per decode position, then each decode step a replay; all in
  // one pool, made before the first capture.
  EXPECT_EQ(Count(log_, "capture"), 5u);
  EXPECT_EQ(Count(log_, "new_pool"), 1u);
  EXPECT_LT(First(log_, "new_pool"), First(log_, "capture"));
  EXPECT_EQ(graphed->UntrackedBytes(), kPoolBytes);
  EXPECT_EQ(Count(log_, "replay"), 5u);
  ASSERT_EQ(tokens.sizes(), eager.sizes());
  EXPECT_TRUE(at::equal(tokens, eager));
  graphed->ResetStats();
  graphed->Step();
  EXPECT_EQ(Count(log_, "capture"), 5u);
  EXPECT_EQ(Count(log_, "replay"), 10u);
  bool tpot = false;
  for (const auto& [name, value] : graphed->Counters())
    tpot |= name == "tpot_ms" && value > 0;
  EXPECT_TRUE(tpot);
}

TEST_F(FakeGpuTest, GraphedBf16DecodingIsCheckedAgainstAnEagerFp32Reference) {
  // What tools/gpu-check --quick runs for CUDA graphs: a graphed bf16
  // generation whose token_match_% comes from an fp32 reference that is not
  // graphed (its decode steps capture nothing).
  BenchSpec spec = SpecFor("GPT2", "nano", "generate", 2, 0);
  spec.device = kFake;
  spec.prompt = 8;
  spec.new_tokens = 6;
  spec.dtype = c10::kBFloat16;
  spec.graph = true;
  const auto run = Run(spec, 2);
  ASSERT_FALSE(run.error_occurred) << run.error_message;
  EXPECT_TRUE(
      absl::EndsWith(run.benchmark_name(), "/bf16/graph/iterations:2/manual_time"))
      << run.benchmark_name();
  ASSERT_EQ(run.counters.count("token_match_%"), 1u);
  EXPECT_GE(run.counters.at("token_match_%").value, 0);
  EXPECT_LE(run.counters.at("token_match_%").value, 100);
  EXPECT_EQ(run.report_label.find("no accuracy check"), std::string::npos)
      << run.report_label;
  // One graph per decode position, for the benchmark's own model alone.
  EXPECT_EQ(Count(log_, "capture"), 5u);
}

TEST_F(FakeGpuTest, GraphedServingCapturesEachSlotCountAndBucketOnceBeforeItsTest) {
  BenchSpec spec = TextServeSpec("GPT2", "Offline");
  spec.device = kFake;
  spec.serve.log_dir =
      (std::filesystem::temp_directory_path() / "ltb_fake_gpu_serve").string();
  spec.graph = true;
  const auto run = Run(spec, 1);
  ASSERT_FALSE(run.error_occurred) << run.error_message;
  EXPECT_TRUE(
      absl::EndsWith(run.benchmark_name(),
                     "/prompt:3:12/output:2:8/fp32/graph/iterations:1/manual_time"))
      << run.benchmark_name();
  // Steps attend to 4 keys or more (a prompt of 3, its first decode step)
  // in a context of 20: buckets of 16 and 20 keys, for 1 to 4 active
  // slots; the generate phase it serves was built and warmed up eagerly
  // (it captured nothing of its own).
  EXPECT_EQ(Count(log_, "capture"), 4u * 2u);
  EXPECT_EQ(Count(log_, "new_pool"), 1u);
  const size_t decode_steps = static_cast<size_t>(run.counters.at("decode_steps").value);
  EXPECT_GT(decode_steps, 0u);
  // One replay a decode step: the test's, and the warm-up's, which serves
  // the library's first max_batch requests together (its decode steps
  // until the longest has all its tokens).
  int64_t longest = 0;
  for (int64_t i = 0; i < spec.serve.max_batch; ++i) {
    longest = std::max(longest, DrawLength(kTextServeSeed, static_cast<uint64_t>(i), 1,
                                           spec.serve.output_min, spec.new_tokens));
  }
  EXPECT_EQ(Count(log_, "replay"), decode_steps + static_cast<size_t>(longest - 1))
      << "one replay a decode step";
  EXPECT_GT(run.counters.at("tokens/s").value, 0);
  log_.clear();
  spec.graph = false;
  const auto eager = Run(spec, 1);
  ASSERT_FALSE(eager.error_occurred) << eager.error_message;
  EXPECT_EQ(Count(log_, "capture"), 0u);
  EXPECT_EQ(Count(log_, "replay"), 0u);
  EXPECT_EQ(eager.counters.at("decode_steps").value, decode_steps)
      << "the same requests, the same steps";
}

TEST_F(FakeGpuTest, ATf32BenchmarkRunsWithTf32OnAndLeavesItOff) {
  BenchSpec spec = TransformerOn("forward");
  spec.tf32 = true;
  const benchmark::BenchmarkReporter::Run run = Run(spec, 3);
  EXPECT_FALSE(run.error_occurred) << run.error_message;
  EXPECT_NE(run.benchmark_name().find("/fp32/tf32"), std::string::npos);
  const size_t on = First(log_, "tf32_on");
  ASSERT_LT(on, log_.size());
  EXPECT_LT(on, First(log_, "mark")) << "on before the first step";
  EXPECT_EQ(log_.back(), "tf32_off") << "off after the benchmark";
  // Its accuracy check's plain fp32 reference computes with TF32 off, and
  // TF32 is back on for the benchmark after each of the reference's calls.
  EXPECT_EQ(run.counters.count("rel_err"), 1u);
  EXPECT_GT(Count(log_, "tf32_off"), 1u) << "off for the reference";
  EXPECT_EQ(Count(log_, "tf32_on"), Count(log_, "tf32_off"));
  // A plain fp32 benchmark after it runs with TF32 off throughout.
  log_.clear();
  const auto plain = Run(TransformerOn("forward_backward"), 2);
  EXPECT_FALSE(plain.error_occurred) << plain.error_message;
  EXPECT_EQ(Count(log_, "tf32_on"), 0u);
  EXPECT_EQ(Count(log_, "tf32_off"), 0u);
}

}  // namespace
}  // namespace ltb
