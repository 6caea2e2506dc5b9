// Two data-parallel ranks on this machine (Gloo over loopback, started by
// the test): two steps (the Reducer rebuilds its buckets after the first) leave
// identical parameters on both ranks, equal to a
// single process's step on the concatenated batch.
#include "distributed/distributed.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "models/decoder_family.h"
#include "run_ranks.h"
#include "scoped_env.h"
#include "workloads/epoch.h"
#include "workloads/phases.h"
#include "workloads/trainer.h"

namespace ltb {
// Named, so that the fixture DataParallel does not hide ltb::DataParallel
// from the headers of the files compiled after this one in a unity build.
namespace distributed_test {
namespace {

constexpr int64_t kBatch = 4, kSeq = 16;

// How a case trains: through the shared phase workload the vision, encoder
// and Whisper families use rather than the token-batch families' Trainer
// (both go through the Trainer's gradient synchronisation); with SGD rather
// than AdamW; under bf16 autocast rather than in fp32.
struct Training {
  bool shared = false, sgd = false, bf16 = false;
};

// Two train steps of Transformer/nano on `rows` of a fixed batch (the
// second one after the Reducer rebuilt its buckets); returns the parameters
// afterwards, flattened.
at::Tensor StepOn(int64_t first_row, int64_t rows, Training how = {}) {
  const bool shared = how.shared;
  at::manual_seed(0);
  DecoderOptions o = DecoderSizeOptions("Transformer", "nano").value();
  o.max_positions(kSeq);
  DecoderLM model = MakeDecoder("Transformer", o);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1);
  const at::Tensor batch = at::randint(1000, {kBatch, kSeq + 1}, gen, at::kLong);
  TrainFns fns;
  fns.module = model.ptr();
  fns.loss = [model](const at::Tensor& b) mutable {
    const at::Tensor logits = model(b.narrow(1, 0, kSeq));
    return torch::nn::functional::cross_entropy(logits.reshape({-1, 1000}),
                                                b.narrow(1, 1, kSeq).reshape({-1}));
  };
  fns.make_optimizer = [model, how]() -> std::unique_ptr<torch::optim::Optimizer> {
    if (how.sgd) {
      return std::make_unique<torch::optim::SGD>(
          model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    }
    return std::make_unique<torch::optim::AdamW>(model->parameters(),
                                                 torch::optim::AdamWOptions(1e-3));
  };
  BenchSpec spec;
  spec.family = "Transformer";
  if (how.bf16) spec.dtype = c10::kBFloat16;
  SetPhase(TrainStepPhase(), &spec);
  const at::Tensor mine = batch.narrow(0, first_row, rows);
  if (shared) {
    ModelFns phase;
    phase.module = fns.module;
    phase.forward = [mine] { return mine; };
    phase.loss = fns.loss;
    phase.make_optimizer = fns.make_optimizer;
    std::unique_ptr<Workload> w = MakePhaseWorkload(spec, phase);
    w->Step();
    w->Step();
  } else {
    std::unique_ptr<Workload> w = MakeTrainStepWorkload(spec, fns, mine);
    w->Step();
    w->Step();
  }
  std::vector<at::Tensor> flat;
  for (const at::Tensor& p : model->parameters())
    flat.push_back(p.detach().reshape({-1}));
  return at::cat(flat);
}

void Save(const at::Tensor& t, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(t.data_ptr()), t.numel() * 4);
}

at::Tensor Load(const std::string& path, int64_t n) {
  at::Tensor t = at::empty({n}, at::kFloat);
  std::ifstream in(path, std::ios::binary);
  in.read(static_cast<char*>(t.data_ptr()), n * 4);
  EXPECT_TRUE(in) << path;
  return t;
}

// The rank's side, run in a child process the test below starts.
TEST(DataParallelRank, StepAndSave) {
  const char* out = std::getenv("LTB_DDP_OUT");
  if (out == nullptr)
    GTEST_SKIP()
        << "run by Workloads/DataParallel.StepsMatchASingleProcessOnTheWholeBatch";
  const DistEnv env = ReadDistEnv().value();
  auto group = JoinProcessGroup(env, c10::Device(c10::kCPU));
  ASSERT_TRUE(group.ok()) << group.status();
  SetCurrentProcessGroup(std::move(*group));
  const int64_t rows = kBatch / env.world_size;
  Training how;
  how.shared = std::getenv("LTB_DDP_SHARED") != nullptr;
  how.sgd = std::getenv("LTB_DDP_SGD") != nullptr;
  how.bf16 = std::getenv("LTB_DDP_BF16") != nullptr;
  Save(StepOn(env.rank * rows, rows, how), out);
  CurrentProcessGroup()->Barrier();
  SetCurrentProcessGroup(nullptr);
}

class DataParallel : public testing::TestWithParam<std::string> {};

TEST_P(DataParallel, StepsMatchASingleProcessOnTheWholeBatch) {
  Training how;
  how.shared = GetParam() == "SharedPhase";
  how.sgd = absl::StrContains(GetParam(), "SGD");
  how.bf16 = absl::StrContains(GetParam(), "Bf16");
  const std::string dir = testing::TempDir() + "/ltb_ddp_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::vector<std::string> extra = {"LTB_DDP_OUT=" + dir + "/rank%r"};
  if (how.shared) extra.emplace_back("LTB_DDP_SHARED=1");
  if (how.sgd) extra.emplace_back("LTB_DDP_SGD=1");
  if (how.bf16) extra.emplace_back("LTB_DDP_BF16=1");
  EXPECT_TRUE(RunRanks("DataParallelRank.StepAndSave", extra)) << "a rank failed";
  const at::Tensor single = StepOn(0, kBatch, how);
  const at::Tensor r0 = Load(dir + "/rank0", single.numel());
  const at::Tensor r1 = Load(dir + "/rank1", single.numel());
  EXPECT_TRUE(torch::equal(r0, r1)) << "ranks disagree after the step";
  // The step changed the weights ...
  at::manual_seed(0);
  DecoderLM fresh =
      MakeDecoder("Transformer", *DecoderSizeOptions("Transformer", "nano"));
  std::vector<at::Tensor> flat;
  for (const at::Tensor& p : fresh->parameters())
    flat.push_back(p.detach().reshape({-1}));
  const at::Tensor update = single - at::cat(flat);
  const double largest = update.abs().max().item<double>();
  EXPECT_GT(largest, 0);
  // ... by the same update on both: AdamW's first step is about lr times the
  // gradient's sign, so gradients near zero that two summation orders round
  // differently move a weight by a visible share of lr. Agreement is judged
  // in units of the update, not of the weights. In bf16 each rank's half of
  // a gradient is rounded to bf16 on its own, so near-zero gradients differ
  // in their leading bits, and AdamW, which divides a gradient by its own
  // magnitude, moves those weights (1.5% of them here) by a different share
  // of lr: it is held to 3%. SGD, whose update is the gradient itself, shows
  // the bf16 gradients agree, and that they are means, not sums (which
  // AdamW, blind to a gradient's scale, could not show).
  const at::Tensor off = (r0 - single).abs() > 0.01 * largest;
  const double share = off.to(at::kDouble).mean().item<double>();
  std::cerr << GetParam() << ": " << off.sum().item<int64_t>() << " of " << off.numel()
            << " weights differ by over 1% of the largest update\n";
  if (how.bf16 && !how.sgd) {
    EXPECT_LE(share, 0.03);
  } else {
    EXPECT_EQ(share, 0) << "largest difference "
                        << (r0 - single).abs().max().item<double>() / largest
                        << " of the largest update";
  }
  std::filesystem::remove_all(dir);
}

// The Trainer of the token-batch families, and the shared train_step of the
// others: both average gradients over the ranks; AdamW and SGD, fp32 and
// bf16 autocast.
INSTANTIATE_TEST_SUITE_P(Workloads, DataParallel,
                         testing::Values("Trainer", "SharedPhase", "TrainerSGD",
                                         "TrainerBf16", "TrainerSGDBf16"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// The ranks' side of the test below: rank 1 joins, then stalls (as a rank
// stuck in a failed step would) until rank 0 has written its result; rank 0
// all-reduces and writes how long it waited and what it was told.
TEST(DataParallelRank, StallOrGiveUp) {
  const char* out = std::getenv("LTB_DDP_TIMEOUT_OUT");
  if (out == nullptr)
    GTEST_SKIP() << "run by DataParallel.ACollectiveGivesUpAfterTheTimeout";
  const DistEnv env = ReadDistEnv().value();
  auto group = JoinProcessGroup(env, c10::Device(c10::kCPU), std::chrono::seconds(2));
  ASSERT_TRUE(group.ok()) << group.status();
  if (env.rank == 1) {
    for (int i = 0; i < 600 && !std::filesystem::exists(out); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  std::string what = "no error";
  try {
    at::Tensor t = at::ones({1});
    (*group)->SumInPlace(t);
  } catch (const std::exception& e) {
    what = e.what();
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  (*group)->Shutdown();
  std::ofstream(std::string(out) + ".tmp") << waited << "\n" << what;
  std::filesystem::rename(std::string(out) + ".tmp", out);
}

TEST(DataParallel, ACollectiveGivesUpAfterTheTimeout) {
  const std::string out =
      testing::TempDir() + "/ltb_ddp_timeout_" + std::to_string(::getpid());
  std::filesystem::remove(out);
  EXPECT_TRUE(RunRanks("DataParallelRank.StallOrGiveUp", {"LTB_DDP_TIMEOUT_OUT=" + out}))
      << "a rank failed";
  std::ifstream in(out);
  double waited = 0;
  std::string what;
  in >> waited;
  std::getline(in >> std::ws, what, '\0');
  // Rank 0 was told, after the 2 s timeout and long before rank 1 (which
  // waits up to 60 s for this result) would have come.
  EXPECT_NE(what, "no error");
  EXPECT_NE(absl::AsciiStrToLower(what).find("timed out"), std::string::npos) << what;
  EXPECT_GE(waited, 1.5) << what;
  EXPECT_LT(waited, 30) << what;
  std::filesystem::remove(out);
}

// The ranks' side of the test below: a BatchNorm that does not move its
// running statistics (momentum 0), whose statistics rank 1 changes; after
// the Trainer starts, after a step without averaging, and after one with,
// each rank writes its running mean's sum and batches tracked.
TEST(DataParallelRank, BuffersFromRankZero) {
  const char* out = std::getenv("LTB_DDP_BUFFERS_OUT");
  if (out == nullptr)
    GTEST_SKIP() << "run by DataParallel.BuffersAreRankZerosBeforeEachAveragedStep";
  const DistEnv env = ReadDistEnv().value();
  auto group = JoinProcessGroup(env, c10::Device(c10::kCPU));
  ASSERT_TRUE(group.ok()) << group.status();
  SetCurrentProcessGroup(std::move(*group));
  at::manual_seed(0);
  torch::nn::Linear linear(4, 4);
  torch::nn::BatchNorm1d norm(torch::nn::BatchNorm1dOptions(4).momentum(0.0));
  torch::nn::Sequential model(linear, norm);
  const auto drift = [&] {  // what rank 1's own statistics would be
    if (env.rank != 1) return;
    torch::NoGradGuard no_grad;
    norm->running_mean.fill_(7);
    norm->num_batches_tracked.fill_(100);
  };
  drift();
  TrainFns fns;
  fns.module = model.ptr();
  fns.loss = [model](const at::Tensor& b) mutable {
    return model->forward(b).pow(2).mean();
  };
  fns.make_optimizer = [model] {
    return std::make_unique<torch::optim::SGD>(model->parameters(),
                                               torch::optim::SGDOptions(0.1));
  };
  BenchSpec spec;
  spec.family = "Test";
  SetPhase(TrainStepPhase(), &spec);
  Trainer trainer(spec, fns);
  std::ofstream file(out);
  const auto write = [&] {
    file << norm->running_mean.sum().item<double>() << " "
         << norm->num_batches_tracked.item<int64_t>() << "\n";
  };
  write();  // both: rank 0's
  drift();
  const at::Tensor batch = at::randn({8, 4});
  trainer.Step(batch, /*sync=*/false);
  write();  // rank 1's own: no communication without averaging
  trainer.Step(batch, /*sync=*/true);
  write();  // rank 0's again, then this forward's count
  file.close();
  CurrentProcessGroup()->Barrier();
  SetCurrentProcessGroup(nullptr);
}

TEST(DataParallel, BuffersAreRankZerosBeforeEachAveragedStep) {
  const std::string dir =
      testing::TempDir() + "/ltb_ddp_buffers_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(RunRanks("DataParallelRank.BuffersFromRankZero",
                       {"LTB_DDP_BUFFERS_OUT=" + dir + "/rank%r"}))
      << "a rank failed";
  const auto read = [&](int rank) {
    std::ifstream in(dir + "/rank" + std::to_string(rank));
    std::vector<std::pair<double, int64_t>> rows;
    double sum = 0;
    int64_t tracked = 0;
    while (in >> sum >> tracked) rows.emplace_back(sum, tracked);
    return rows;
  };
  using Rows = std::vector<std::pair<double, int64_t>>;
  // Rank 0: untouched statistics, one batch tracked a forward.
  EXPECT_EQ(read(0), (Rows{{0, 0}, {0, 1}, {0, 2}}));
  // Rank 1: rank 0's at the start; its own (7 x 4 features, 100 + 1) after
  // the step without averaging; rank 0's (0, 1) before the averaged step's
  // forward, which tracks one more batch.
  EXPECT_EQ(read(1), (Rows{{0, 0}, {28, 101}, {0, 2}}));
  std::filesystem::remove_all(dir);
}

// The ranks' side of the test below: tensors of two dtypes, one of them not
// contiguous, each rank with its own values; after the broadcast in buckets
// of 32 bytes (several tensors a bucket), each rank writes whether it holds
// rank 0's values, in place.
TEST(DataParallelRank, BroadcastBuckets) {
  const char* out = std::getenv("LTB_DDP_BROADCAST_OUT");
  if (out == nullptr)
    GTEST_SKIP() << "run by DataParallel.BroadcastWritesEveryTensorBackWhole";
  const DistEnv env = ReadDistEnv().value();
  auto group = JoinProcessGroup(env, c10::Device(c10::kCPU));
  ASSERT_TRUE(group.ok()) << group.status();
  const auto values = [](int rank) {
    const double r = 100.0 * rank;
    return std::vector<at::Tensor>{at::arange(3, at::kFloat) + r,
                                   at::arange(2, at::kLong) + static_cast<int64_t>(r),
                                   (at::arange(4, at::kFloat) + r).reshape({2, 2}).t(),
                                   at::arange(5, at::kFloat) - r};
  };
  std::vector<at::Tensor> mine = values(env.rank);
  std::vector<void*> where;
  for (const at::Tensor& t : mine) where.push_back(t.data_ptr());
  (*group)->Broadcast(mine, /*bucket_bytes=*/32);
  const std::vector<at::Tensor> want = values(0);
  bool ok = true;
  for (size_t i = 0; i < mine.size(); ++i) {
    ok = ok && torch::equal(mine[i], want[i]) && mine[i].data_ptr() == where[i] &&
         mine[i].strides() == want[i].strides();
  }
  std::ofstream(out) << (ok ? "ok" : "different");
  (*group)->Barrier();
  (*group)->Shutdown();
}

TEST(DataParallel, BroadcastWritesEveryTensorBackWhole) {
  const std::string dir =
      testing::TempDir() + "/ltb_ddp_broadcast_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(RunRanks("DataParallelRank.BroadcastBuckets",
                       {"LTB_DDP_BROADCAST_OUT=" + dir + "/rank%r"}))
      << "a rank failed";
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(dir + "/rank" + std::to_string(rank));
    std::string verdict;
    in >> verdict;
    EXPECT_EQ(verdict, "ok") << "rank " << rank;
  }
  std::filesystem::remove_all(dir);
}

TEST(ReadDistEnv, TorchrunsAgentStoreMakesEveryRankAClient) {
  {
    ScopedEnv env({{"RANK", "1"},
                   {"WORLD_SIZE", "2"},
                   {"MASTER_PORT", "29511"},
                   {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                   {"TORCHELASTIC_RESTART_COUNT", "3"}});
    const DistEnv d = ReadDistEnv().value();
    EXPECT_EQ(d.rank, 1);
    EXPECT_EQ(d.world_size, 2);
    EXPECT_EQ(d.master_port, 29511);
    EXPECT_TRUE(d.agent_store);
    EXPECT_EQ(d.restart_count, 3);
  }
  {
    ScopedEnv env({{"TORCHELASTIC_USE_AGENT_STORE", "False"}});
    EXPECT_FALSE(ReadDistEnv().value().agent_store);
  }
  {
    ScopedEnv env({{"TORCHELASTIC_RESTART_COUNT", "x"}});
    const absl::StatusOr<DistEnv> bad = ReadDistEnv();
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("TORCHELASTIC_RESTART_COUNT"),
              std::string::npos);
  }
}

TEST(Buckets, GroupTensorsUpToTheBucketSize) {
  const std::vector<at::Tensor> t = {at::empty({10}), at::empty({10}), at::empty({100}),
                                     at::empty({5})};
  const auto b = Buckets(t, 80);  // 80 bytes: 20 floats
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], std::make_pair(size_t{0}, size_t{2}));
  EXPECT_EQ(b[1], std::make_pair(size_t{2}, size_t{3}));  // too big: alone
  EXPECT_EQ(b[2], std::make_pair(size_t{3}, size_t{4}));
}

}  // namespace
}  // namespace distributed_test
}  // namespace ltb
