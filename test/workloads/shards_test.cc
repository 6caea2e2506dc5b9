#include "workloads/shards.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>

namespace ltb {
namespace {

namespace fs = std::filesystem;

class ShardsTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ltb_shards_" + std::to_string(::getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  DatasetSpec Spec() const {
    DatasetSpec s;
    s.samples = 50;
    s.sample_tokens = 33;
    s.vocab = 8192;
    s.shard_mb = 1;
    s.seed = 3;
    return s;
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes one shard and returns its path.
  std::string OneShard() {
    const std::string path = Path("one.bin");
    EXPECT_TRUE(WriteShard(path, GenerateShard(Spec(), 0), 8192).ok());
    return path;
  }

  fs::path dir_;
};

TEST_F(ShardsTest, WriteThenReadGivesTheSameTokens) {
  const at::Tensor tokens = GenerateShard(Spec(), 0);
  ASSERT_EQ(tokens.sizes(), (std::vector<int64_t>{50, 33}));
  EXPECT_GE(tokens.max().item<int64_t>(), 8000);  // uses the top of the uint16 range too
  const std::string path = OneShard();
  absl::StatusOr<at::Tensor> read = ReadShard(path, 33, 8192);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(torch::equal(*read, tokens));
  EXPECT_EQ(fs::file_size(path), 64u + 50 * 33 * 2);
}

TEST_F(ShardsTest, AFlippedByteIsACorruptShardNamedByPath) {
  const std::string path = OneShard();
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 1000);
    char c = 0;
    f.read(&c, 1);
    f.seekp(64 + 1000);
    c ^= 0x10;
    f.write(&c, 1);
  }
  const auto read = ReadShard(path, 33, 8192);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find(path), std::string::npos);
  EXPECT_NE(read.status().message().find("checksum"), std::string::npos);
  // The advice must be a command line bench accepts: a bare --regenerate
  // is refused ("needs a value").
  EXPECT_NE(read.status().message().find("--regenerate=true"), std::string::npos)
      << read.status();
}

TEST_F(ShardsTest, ATruncatedShardIsDetected) {
  const std::string path = OneShard();
  fs::resize_file(path, fs::file_size(path) - 7);
  const auto read = ReadShard(path, 33, 8192);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("truncated"), std::string::npos)
      << read.status();
  EXPECT_NE(read.status().message().find(path), std::string::npos);
  fs::resize_file(path, 20);
  EXPECT_NE(ReadShard(path, 33, 8192).status().message().find("header"),
            std::string::npos);
}

TEST_F(ShardsTest, AMissingShardSaysWhyAndHowToRewriteIt) {
  // The manifest promises every shard: one deleted since (a cleaned cache)
  // is a dataset to rewrite, and the message must say so as the others do.
  const std::string path = Path("gone.bin");
  const auto read = ReadShard(path, 33, 8192);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find(path), std::string::npos);
  EXPECT_NE(read.status().message().find("No such file"), std::string::npos)
      << read.status();
  EXPECT_NE(read.status().message().find("--regenerate=true"), std::string::npos)
      << read.status();
}

TEST_F(ShardsTest, AWrongHeaderIsDetected) {
  const std::string path = OneShard();
  // Another dataset's shard: other sample length or vocabulary.
  EXPECT_NE(ReadShard(path, 32, 8192).status().message().find("this run needs"),
            std::string::npos);
  EXPECT_FALSE(ReadShard(path, 33, 1000).ok());
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.write("NOTSHARD", 8);
  }
  const auto read = ReadShard(path, 33, 8192);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("bad magic"), std::string::npos);
  EXPECT_NE(read.status().message().find(path), std::string::npos);
}

TEST_F(ShardsTest, ASecondRunWithTheSameParametersWritesNothing) {
  DatasetSpec spec = Spec();
  spec.samples = 40000;  // 33 * 2 bytes a sample, 1 MB shards: 3 shards
  ASSERT_EQ(spec.Shards(), 3);
  bool wrote = false;
  const auto paths = PrepareDataset(dir_.string(), spec, false, &wrote);
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_TRUE(wrote);
  ASSERT_EQ(paths->size(), 3u);
  EXPECT_EQ(fs::path((*paths)[2]).filename(), "shard_0002.bin");
  const auto mtime = fs::last_write_time((*paths)[0]);

  const auto again = PrepareDataset(dir_.string(), spec, false, &wrote);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(wrote);
  EXPECT_EQ(fs::last_write_time((*paths)[0]), mtime);

  // Shards read back in order are the generated dataset.
  const auto last = ReadShard((*paths)[2], 33, 8192);
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(torch::equal(*last, GenerateShard(spec, 2)));
}

TEST_F(ShardsTest, OtherParametersAreAnErrorThatSaysHowToFixIt) {
  bool wrote = false;
  ASSERT_TRUE(PrepareDataset(dir_.string(), Spec(), false, &wrote).ok());
  DatasetSpec other = Spec();
  other.samples = 60;
  const auto mismatch = PrepareDataset(dir_.string(), other, false, &wrote);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("--regenerate=true"), std::string::npos)
      << mismatch.status();
  EXPECT_NE(mismatch.status().message().find("samples=50"), std::string::npos);
  EXPECT_FALSE(wrote);
  const auto rewritten =
      PrepareDataset(dir_.string(), other, /*regenerate=*/true, &wrote);
  ASSERT_TRUE(rewritten.ok());
  EXPECT_TRUE(wrote);
}

TEST_F(ShardsTest, AJunkManifestIsDescribedNotQuoted) {
  // Its bytes would go into the benchmark's error entry, and bytes that are
  // not UTF-8 there make the whole JSON output unreadable, results and all.
  bool wrote = false;
  ASSERT_TRUE(PrepareDataset(dir_.string(), Spec(), false, &wrote).ok());
  std::ofstream(dir_ / "manifest.txt", std::ios::binary)
      << std::string("\xee\x01junk\xff", 7);
  const auto junk = PrepareDataset(dir_.string(), Spec(), false, &wrote);
  ASSERT_FALSE(junk.ok());
  const std::string message(junk.status().message());
  for (const char c : message) {
    EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f))
        << "byte " << int(c) << " in " << message;
  }
  EXPECT_NE(message.find((dir_ / "manifest.txt").string()), std::string::npos) << message;
  EXPECT_NE(message.find("not a manifest"), std::string::npos) << message;
  EXPECT_NE(message.find("--regenerate=true"), std::string::npos) << message;
  EXPECT_FALSE(wrote);
}

}  // namespace
}  // namespace ltb

namespace ltb {
namespace {

// A storage limit hit mid-write (here the process's per-file size limit,
// which fails a write as a full disk does, with EFBIG instead of ENOSPC):
// the error names the shard and the reason, no partial shard and no manifest
// is left, and the next run with room writes the whole dataset.
TEST_F(ShardsTest, RunningOutOfSpaceLeavesNoPartialShard) {
  DatasetSpec spec = Spec();
  spec.samples = 20000;  // 1.3 MB of tokens: two shards of at most 1 MB
  ASSERT_EQ(spec.Shards(), 2);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);  // fail the write, not the process
  rlimit small = old;
  small.rlim_cur = 512 * 1024;  // half a shard
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  bool wrote = false;
  absl::StatusOr<std::vector<std::string>> paths =
      PrepareDataset(dir_.string(), spec, false, &wrote);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, previous);
  ASSERT_FALSE(paths.ok());
  EXPECT_FALSE(wrote);
  EXPECT_NE(paths.status().message().find("shard_0000.bin"), std::string::npos)
      << paths.status();
  EXPECT_NE(paths.status().message().find("File too large"), std::string::npos)
      << paths.status();
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_)) left.push_back(e.path().filename());
  EXPECT_TRUE(left.empty()) << "left behind: " << left.front();
  paths = PrepareDataset(dir_.string(), spec, false, &wrote);
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_TRUE(wrote);
  for (const std::string& p : *paths) EXPECT_TRUE(ReadShard(p, 33, 8192).ok()) << p;
}

}  // namespace
}  // namespace ltb
