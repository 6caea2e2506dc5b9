// What each data-parallel rank trains on in an epoch, from memory and from
// shards on disk: whole batches only, as many on every rank, each rank a
// contiguous run of the dataset's samples, and every sample trained counted
// in the plan's samples an epoch (EpochSamples), with a dataset that neither
// the batch nor the ranks divide.
#include "workloads/loader.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "distributed/distributed.h"
#include "workloads/epoch.h"
#include "workloads/shards.h"

namespace ltb {
namespace {

namespace fs = std::filesystem;

// Rank `rank` of `world` as far as the loader asks: no collective runs.
class RankOnly final : public DataParallel {
 public:
  RankOnly(int rank, int world) : rank_(rank), world_(world) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  void AverageGradients(const std::vector<at::Tensor>&, int64_t) override { Fail(); }
  std::unique_ptr<GradientSync> SyncGradients(std::vector<at::Tensor>, int64_t) override {
    Fail();
    return nullptr;
  }
  void SumInPlace(at::Tensor&) override { Fail(); }
  void MaxInPlace(at::Tensor&) override { Fail(); }
  void Broadcast(const std::vector<at::Tensor>&, int64_t) override { Fail(); }
  void Barrier() override { Fail(); }
  void Post(const std::string&) override { Fail(); }
  bool Posted(const std::string&) override {
    Fail();
    return false;
  }
  void Shutdown() override {}
  void Abort() override {}

 private:
  static void Fail() { ADD_FAILURE() << "the loader ran a collective"; }
  int rank_, world_;
};

// Restores the single-process state whatever the test does.
struct AsRank {
  AsRank(int rank, int world) {
    SetCurrentProcessGroup(std::make_unique<RankOnly>(rank, world));
  }
  ~AsRank() { SetCurrentProcessGroup(nullptr); }
};

constexpr int64_t kSamples = 37, kBatch = 4;

class LoaderTest : public testing::TestWithParam<bool> {  // on disk or in memory
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ltb_loader_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    data_.samples = kSamples;
    // 16 samples a 1 MB shard: the dataset's 37 lie in three shards, and
    // ranks' shares cross their boundaries.
    data_.sample_tokens = 32768;
    data_.vocab = 1000;
    data_.shard_mb = 1;
    data_.seed = 5;
    ASSERT_EQ(data_.Shards(), 3);
    spec_.batch = kBatch;
    spec_.epochs.dataset_samples = kSamples;
    if (GetParam()) {
      bool wrote = false;
      absl::StatusOr<std::vector<std::string>> paths =
          PrepareDataset(dir_.string(), data_, false, &wrote);
      ASSERT_TRUE(paths.ok()) << paths.status();
      shards_ = *paths;
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The batches of one epoch of rank `rank` of `world`.
  std::vector<at::Tensor> Epoch(int rank, int world) {
    AsRank as(rank, world);
    Loader loader(spec_, data_, shards_);
    std::vector<at::Tensor> out;
    loader.StartEpoch();
    while (std::optional<at::Tensor> b = loader.Next()) out.push_back(*b);
    EXPECT_EQ(static_cast<int64_t>(out.size()), loader.batches());
    return out;
  }

  fs::path dir_;
  DatasetSpec data_;
  BenchSpec spec_;
  std::vector<std::string> shards_;
};

TEST_P(LoaderTest, EveryRankTrainsWholeBatchesAndThePlanCountsThemAll) {
  std::vector<at::Tensor> parts;
  for (int64_t i = 0; i < data_.Shards(); ++i) parts.push_back(GenerateShard(data_, i));
  const at::Tensor whole = at::cat(parts);
  ASSERT_EQ(whole.size(0), kSamples);
  // 37 samples in batches of 4: 36 on one rank; 2 ranks of 18, 16 of them
  // in whole batches; 3 ranks of 12, all of them.
  const std::map<int, int64_t> trained = {{1, 36}, {2, 32}, {3, 36}};
  for (const auto& [world, expected] : trained) {
    int64_t rows = 0;
    size_t batches = 0;
    for (int rank = 0; rank < world; ++rank) {
      const std::vector<at::Tensor> epoch = Epoch(rank, world);
      if (rank == 0) batches = epoch.size();
      EXPECT_EQ(epoch.size(), batches) << "ranks take different numbers of steps";
      for (const at::Tensor& b : epoch) ASSERT_EQ(b.size(0), kBatch);
      const at::Tensor mine = at::cat(epoch);
      // A contiguous run of the dataset, from the rank's share's start.
      const int64_t first = rank * (kSamples / world);
      EXPECT_TRUE(at::equal(mine, whole.narrow(0, first, mine.size(0))))
          << "rank " << rank << " of " << world;
      rows += mine.size(0);
    }
    EXPECT_EQ(rows, expected) << world << " ranks";
    AsRank as(0, world);
    EXPECT_EQ(EpochSamples(spec_), rows) << world << " ranks";
  }
}

// Whether a file dropped from the page cache under `dir` leaves it (most
// filesystems) or stays (tmpfs keeps its files in memory); the test files
// are this process's own, so mincore answers.
bool DroppedPagesLeave(const fs::path& dir) {
  const std::string probe = (dir / "probe.bin").string();
  {
    std::ofstream out(probe, std::ios::binary);
    out << std::string(1 << 16, 'x');
  }
  const int fd = ::open(probe.c_str(), O_RDONLY);
  ::fsync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  const double cached = CachedFraction(probe);
  fs::remove(probe);
  return cached == 0;
}

// The shards of a dataset just written under `dir`, as a disk epoch's
// loader takes them.
std::vector<std::string> Written(const fs::path& dir, const DatasetSpec& data) {
  bool wrote = false;
  absl::StatusOr<std::vector<std::string>> paths =
      PrepareDataset(dir.string(), data, false, &wrote);
  EXPECT_TRUE(paths.ok()) << paths.status();
  return paths.ok() ? *paths : std::vector<std::string>{};
}

TEST(CachedFraction, SeesAFileReadAsCachedAndAnotherProcesssAsUnknown) {
  const fs::path dir =
      fs::temp_directory_path() / ("ltb_cached_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "read.bin").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string(3 << 12, 'x');
  }
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all.size(), 3u << 12);
  EXPECT_DOUBLE_EQ(CachedFraction(path), 1.0) << "a file just read is in the page cache";
  EXPECT_EQ(CachedFraction((dir / "absent.bin").string()), -1);
  fs::remove_all(dir);
}

// With the page cache dropped (the default), no epoch may read a shard from
// memory: not even the first, right after the shards were written.
TEST(LoaderPageCache, NoEpochReadsTheShardsJustWrittenFromMemory) {
  const fs::path dir =
      fs::temp_directory_path() / ("ltb_dropped_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (!DroppedPagesLeave(dir)) {
    fs::remove_all(dir);
    GTEST_SKIP() << dir << " keeps dropped pages in memory (tmpfs?)";
  }
  DatasetSpec data;
  data.samples = 4;
  data.sample_tokens = 262144;  // 2 samples a 1 MB shard: two shards
  data.vocab = 1000;
  data.shard_mb = 1;
  data.seed = 1;
  BenchSpec spec;
  spec.batch = 2;
  spec.epochs.dataset_samples = data.samples;
  const std::vector<std::string> shards = Written(dir, data);
  ASSERT_EQ(shards.size(), 2u);
  Loader loader(spec, data, shards);
  for (const std::string& shard : shards) {
    EXPECT_EQ(CachedFraction(shard), 0) << shard << " is read from the page cache";
  }
  EXPECT_EQ(loader.caveat(), "");  // the pages left: nothing to say
  loader.StartEpoch();
  int64_t batches = 0;
  while (loader.Next()) ++batches;
  EXPECT_EQ(batches, 2);
  for (const std::string& shard : shards) EXPECT_EQ(CachedFraction(shard), 0) << shard;
  fs::remove_all(dir);
}

// tmpfs keeps its files in memory whatever the loader asks: the result must
// say that its epochs read memory, not storage.
TEST(LoaderPageCache, ShardsThatStayInMemoryAreSaidToHave) {
  struct statfs fs_info {};
  if (::statfs("/dev/shm", &fs_info) != 0 ||
      static_cast<uint64_t>(fs_info.f_type) != TMPFS_MAGIC) {
    GTEST_SKIP() << "no tmpfs at /dev/shm";
  }
  const fs::path dir = fs::path("/dev/shm") / ("ltb_tmpfs_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  DatasetSpec data;
  data.samples = 4;
  data.sample_tokens = 64;
  data.vocab = 1000;
  data.shard_mb = 1;
  BenchSpec spec;
  spec.batch = 2;
  spec.epochs.dataset_samples = data.samples;
  const std::vector<std::string> shards = Written(dir, data);
  ASSERT_EQ(shards.size(), 1u);
  Loader loader(spec, data, shards);
  EXPECT_EQ(loader.caveat(),
            "the epochs read their shards from memory, not from storage: 1 of 1 stayed "
            "in the page cache when dropped from it (their filesystem keeps files in "
            "memory, as tmpfs does)");
  spec.epochs.drop_page_cache = false;  // nothing dropped, nothing claimed
  EXPECT_EQ(Loader(spec, data, shards).caveat(), "");
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Workloads, LoaderTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "Disk" : "Memory";
                         });

}  // namespace
}  // namespace ltb
