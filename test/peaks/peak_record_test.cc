#include "peaks/peak_record.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/threads.h"
#include "device/device.h"
#include "peaks/peaks.h"

namespace ltb {
namespace {

namespace fs = std::filesystem;

// A fresh directory for one test's record.
class PeakRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ltb-peak-record-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    path_ = (dir_ / "sub" / "peaks.json").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  nlohmann::json Read() const {
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    return nlohmann::json::parse(text.str());
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(PeakRecordTest, KeepsTheBestAndCountsTheRuns) {
  PeakRecord record(path_);
  ASSERT_TRUE(record.enabled());
  RecordedPeak first = record.Merge("k", 2.4e10, "measured: sum 2.4e10");
  EXPECT_TRUE(first.warning.empty()) << first.warning;
  EXPECT_DOUBLE_EQ(first.value, 2.4e10);
  EXPECT_FALSE(first.from_record);
  EXPECT_EQ(first.runs, 1);

  // A slower run divides by the earlier, faster one.
  RecordedPeak second = record.Merge("k", 2.2e10, "measured: sum 2.2e10");
  EXPECT_DOUBLE_EQ(second.value, 2.4e10);
  EXPECT_DOUBLE_EQ(second.this_run, 2.2e10);
  EXPECT_TRUE(second.from_record);
  EXPECT_EQ(second.best_source, "measured: sum 2.4e10");
  EXPECT_EQ(second.best_at, first.best_at);
  EXPECT_EQ(second.runs, 2);

  // A faster one raises the record.
  RecordedPeak third = record.Merge("k", 2.6e10, "measured: read 2.6e10");
  EXPECT_DOUBLE_EQ(third.value, 2.6e10);
  EXPECT_FALSE(third.from_record);
  EXPECT_EQ(third.runs, 3);

  // Another key is its own record.
  RecordedPeak other = record.Merge("other", 1e9, "measured: x");
  EXPECT_DOUBLE_EQ(other.value, 1e9);
  EXPECT_EQ(other.runs, 1);

  const nlohmann::json doc = Read();
  EXPECT_DOUBLE_EQ(doc["peaks"]["k"]["bytes_or_flops_per_s"].get<double>(), 2.6e10);
  EXPECT_EQ(doc["peaks"]["k"]["runs"].get<int>(), 3);
  EXPECT_EQ(doc["peaks"]["k"]["how"].get<std::string>(), "measured: read 2.6e10");
  EXPECT_DOUBLE_EQ(doc["peaks"]["k"]["last_run"]["measured"].get<double>(), 2.6e10);
  EXPECT_DOUBLE_EQ(doc["peaks"]["other"]["bytes_or_flops_per_s"].get<double>(), 1e9);
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "sub")) {
    ++files;
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
  EXPECT_EQ(files, 2);  // the record and its lock file
}

TEST_F(PeakRecordTest, OffOrEmptyKeepsNothing) {
  for (const std::string off : {"off", ""}) {
    PeakRecord record(off);
    EXPECT_FALSE(record.enabled());
    const RecordedPeak r = record.Merge("k", 5, "measured: x");
    EXPECT_DOUBLE_EQ(r.value, 5);
    EXPECT_FALSE(r.from_record);
    EXPECT_TRUE(r.warning.empty());
  }
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(PeakRecordTest, ACorruptRecordIsReplacedWithAWarning) {
  fs::create_directories(fs::path(path_).parent_path());
  for (const std::string bad : {"{not json", "[1, 2]", R"({"peaks": 3})"}) {
    std::ofstream(path_) << bad;
    PeakRecord record(path_);
    const RecordedPeak r = record.Merge("k", 7, "measured: x");
    EXPECT_DOUBLE_EQ(r.value, 7) << bad;
    EXPECT_EQ(r.runs, 1) << bad;
    EXPECT_NE(r.warning.find("is not a record of peaks"), std::string::npos) << r.warning;
    EXPECT_NE(r.warning.find(path_), std::string::npos) << r.warning;
    EXPECT_DOUBLE_EQ(Read()["peaks"]["k"]["bytes_or_flops_per_s"].get<double>(), 7);
  }
  // An entry with a value that is no number counts as none.
  std::ofstream(path_)
      << R"({"peaks": {"k": {"bytes_or_flops_per_s": "fast", "runs": 4}}})";
  const RecordedPeak r = PeakRecord(path_).Merge("k", 3, "measured: y");
  EXPECT_DOUBLE_EQ(r.value, 3);
  EXPECT_EQ(r.runs, 5);
  EXPECT_TRUE(r.warning.empty()) << r.warning;
}

TEST_F(PeakRecordTest, AMalformedEntryIsReplacedWithAWarningNotACrash) {
  fs::create_directories(fs::path(path_).parent_path());
  // This key's entry is not an object, or names its best with fields of
  // the wrong type, or counts more runs than a run count can hold: each
  // was an uncaught exception that aborted bench before its first result.
  for (const std::string bad : {
           R"({"peaks": {"k": 5, "other": {"bytes_or_flops_per_s": 1}}})",
           R"({"peaks": {"k": {"bytes_or_flops_per_s": 1e15, "measured_at": 5},
                         "other": {"bytes_or_flops_per_s": 1}}})",
           R"({"peaks": {"k": {"bytes_or_flops_per_s": 1e15, "how": []},
                         "other": {"bytes_or_flops_per_s": 1}}})",
           R"({"peaks": {"k": {"bytes_or_flops_per_s": 1e15, "runs": 99999999999},
                         "other": {"bytes_or_flops_per_s": 1}}})",
       }) {
    std::ofstream(path_) << bad;
    RecordedPeak r;
    ASSERT_NO_THROW(r = PeakRecord(path_).Merge("k", 7, "measured: x")) << bad;
    EXPECT_DOUBLE_EQ(r.value, 7) << bad;
    EXPECT_FALSE(r.from_record) << bad;
    EXPECT_EQ(r.runs, 1) << bad;
    EXPECT_NE(r.warning.find("the peak cache " + path_ +
                             " holds an entry for k that is "
                             "not a record of a peak"),
              std::string::npos)
        << bad << ": " << r.warning;
    const nlohmann::json doc = Read();
    EXPECT_DOUBLE_EQ(doc["peaks"]["k"]["bytes_or_flops_per_s"].get<double>(), 7) << bad;
    EXPECT_EQ(doc["peaks"]["k"]["runs"].get<int>(), 1) << bad;
    // The other keys' entries are kept as they were.
    EXPECT_DOUBLE_EQ(doc["peaks"]["other"]["bytes_or_flops_per_s"].get<double>(), 1)
        << bad;
  }
}

TEST_F(PeakRecordTest, ARecordTenTimesThisRunsIsReplacedWithAWarning) {
  fs::create_directories(fs::path(path_).parent_path());
  // 1e300 FLOP/s divided every mfu down to zero.
  std::ofstream(path_) << R"({"peaks": {"k": {"bytes_or_flops_per_s": 1e300, "runs": 6},
                                        "other": {"bytes_or_flops_per_s": 1}}})";
  const RecordedPeak r = PeakRecord(path_).Merge("k", 2e11, "measured: x");
  EXPECT_DOUBLE_EQ(r.value, 2e11);
  EXPECT_FALSE(r.from_record);
  EXPECT_EQ(r.runs, 1);
  EXPECT_NE(r.warning.find("the peak cache " + path_ +
                           " holds 1e+300 for k, 10 or more times this run's 2e+11"),
            std::string::npos)
      << r.warning;
  const nlohmann::json doc = Read();
  EXPECT_DOUBLE_EQ(doc["peaks"]["k"]["bytes_or_flops_per_s"].get<double>(), 2e11);
  EXPECT_EQ(doc["peaks"]["k"]["runs"].get<int>(), 1);
  EXPECT_DOUBLE_EQ(doc["peaks"]["other"]["bytes_or_flops_per_s"].get<double>(), 1);

  // Just under ten times is a record this machine may have reached on a
  // quieter day: it is kept and divided by.
  std::ofstream(path_) << R"({"peaks": {"k": {"bytes_or_flops_per_s": 1.9e12}}})";
  const RecordedPeak kept = PeakRecord(path_).Merge("k", 2e11, "measured: x");
  EXPECT_DOUBLE_EQ(kept.value, 1.9e12);
  EXPECT_TRUE(kept.from_record);
  EXPECT_TRUE(kept.warning.empty()) << kept.warning;
}

TEST_F(PeakRecordTest, AnUnwritablePlaceWarnsAndTheRunKeepsItsOwn) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  // Its parent is a file: neither the lock nor the record can be made.
  PeakRecord record((dir_ / "file" / "peaks.json").string());
  const RecordedPeak r = record.Merge("k", 9, "measured: z");
  EXPECT_DOUBLE_EQ(r.value, 9);
  EXPECT_FALSE(r.from_record);
  EXPECT_NE(r.warning.find("cannot be locked"), std::string::npos) << r.warning;
  EXPECT_NE(r.warning.find("not kept"), std::string::npos) << r.warning;
  // Its description said "kept in" the file that could not be made.
  EXPECT_FALSE(r.read);
  EXPECT_FALSE(r.kept);
  const std::string said = DescribeRecordedPeak(r, record.path());
  EXPECT_EQ(said, "measured: z; this run's own, for the peak cache " + record.path() +
                      " could not be used");
}

TEST_F(PeakRecordTest, RunsAtOnceTakeTurns) {
  // Four processes (ranks, or two benches at once), each merging 25 values
  // (within the tenfold a record may stand above a run): every run is
  // counted and the best survives.
  std::vector<pid_t> children;
  for (int p = 0; p < 4; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      PeakRecord record(path_);
      for (int i = 0; i < 25; ++i)
        record.Merge("k", 1000.0 * (p + 1) + i + 1, "measured: x");
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const nlohmann::json doc = Read();
  EXPECT_EQ(doc["peaks"]["k"]["runs"].get<int>(), 100);
  EXPECT_DOUBLE_EQ(doc["peaks"]["k"]["bytes_or_flops_per_s"].get<double>(), 4025);
}

TEST(DescribeRecordedPeak, NamesTheBestAndThisRun) {
  RecordedPeak r;
  r.value = 2.6e10;
  r.this_run = 2.4e10;
  r.from_record = true;
  r.best_at = "2026-11-26T15:00:00Z";
  r.best_source = "measured: streaming read, the fastest of 4 ways";
  r.this_run_source = "measured: sum, the fastest of 4 ways";
  r.runs = 3;
  const std::string text = DescribeRecordedPeak(r, "/x/peaks.json");
  EXPECT_EQ(text.rfind("measured: the best of 3 runs on this machine, 2.6e+10 at "
                       "2026-11-26T15:00:00Z (streaming read, the fastest of 4 ways); "
                       "this run measured 2.4e+10 (sum, the fastest of 4 ways); kept in "
                       "/x/peaks.json",
                       0),
            0u)
      << text;
  r.from_record = false;
  r.value = r.this_run;
  r.best_source = r.this_run_source;
  EXPECT_EQ(DescribeRecordedPeak(r, "/x/peaks.json")
                .rfind("measured: sum, the fastest of 4 ways; the best of 3 runs on "
                       "this machine, kept in /x/peaks.json",
                       0),
            0u);
  r.runs = 1;
  EXPECT_NE(DescribeRecordedPeak(r, "/x/peaks.json")
                .find("the first run on this machine to measure it"),
            std::string::npos);
}

TEST(PeakRecordKey, NamesWhatTheMeasurementDependsOn) {
  const std::string key = PeakRecordKey("bandwidth", "cpu", "Some CPU");
  for (const char* part : {"bandwidth | cpu: Some CPU | ", " CPUs online | ",
                           " allowed | CPU quota: ", " threads | ",
                           "CPU ISA limit: ", " | LibTorch ", " | methods v"}) {
    EXPECT_NE(key.find(part), std::string::npos) << part << " in " << key;
  }
  EXPECT_NE(key, PeakRecordKey("fp32 FLOP/s", "cpu", "Some CPU"));
  // Run on fewer CPUs (taskset), the same machine keeps another record.
  const std::vector<int> cpus = AllowedCpus();
  if (cpus.size() < 2) GTEST_SKIP() << "one CPU allowed: no fewer to run on";
  cpu_set_t all, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  CPU_ZERO(&one);
  CPU_SET(cpus[0], &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const std::string pinned = PeakRecordKey("bandwidth", "cpu", "Some CPU");
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
  EXPECT_NE(pinned, key);
  EXPECT_NE(pinned.find(" CPUs online | 1 allowed | "), std::string::npos) << pinned;
}

TEST(DefaultPeakCachePath, FollowsTheEnvironment) {
  const char* saved = std::getenv("LTB_PEAK_CACHE");
  const std::string restore = saved != nullptr ? saved : "";
  setenv("LTB_PEAK_CACHE", "/somewhere/p.json", 1);
  EXPECT_EQ(DefaultPeakCachePath(), "/somewhere/p.json");
  unsetenv("LTB_PEAK_CACHE");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(DefaultPeakCachePath(), "/xdg/libtorch-bench/peaks.json");
  unsetenv("XDG_CACHE_HOME");
  if (saved != nullptr) setenv("LTB_PEAK_CACHE", restore.c_str(), 1);
}

TEST_F(PeakRecordTest, PeaksDivideByTheRecordsBestAndSayWhereItIs) {
  // A record three times what this machine measured (beaten by no run,
  // and within what a record may be): the run's peak is the record's, its
  // source says so, and the record counts the run.
  const c10::Device cpu(c10::kCPU);
  const std::string key =
      PeakRecordKey("bandwidth", "cpu", BackendOf(cpu).DisplayName(cpu));
  Peaks({{c10::kFloat, 1e12}}, 0, {}, path_).Prepare(cpu, c10::kFloat, true);
  const double best = 3 * Read()["peaks"][key]["bytes_or_flops_per_s"].get<double>();
  nlohmann::json doc;
  doc["peaks"][key] = {{"bytes_or_flops_per_s", best},
                       {"measured_at", "2020-01-01T00:00:00Z"},
                       {"how", "measured: by hand"},
                       {"runs", 1}};
  std::ofstream(path_) << doc.dump();
  Peaks peaks({{c10::kFloat, 1e12}}, 0, {}, path_);
  peaks.Prepare(cpu, c10::kFloat, /*bandwidth=*/true);
  const Peak* p = peaks.Bandwidth(cpu);
  ASSERT_NE(p, nullptr);
  EXPECT_DOUBLE_EQ(p->value, best);
  EXPECT_TRUE(p->measured);
  EXPECT_EQ(p->source.rfind(absl::StrFormat("measured: the best of 2 runs on this "
                                            "machine, %.4g at 2020-01-01T00:00:00Z",
                                            best),
                            0),
            0u)
      << p->source;
  EXPECT_NE(p->source.find("(by hand); this run measured "), std::string::npos)
      << p->source;
  const nlohmann::json after = Read();
  ASSERT_EQ(after["peaks"].size(), 1u) << after.dump();  // --peak_flops given
  EXPECT_EQ(after["peaks"][key]["runs"].get<int>(), 2);
  EXPECT_DOUBLE_EQ(after["peaks"][key]["bytes_or_flops_per_s"].get<double>(), best);
  EXPECT_LT(after["peaks"][key]["last_run"]["measured"].get<double>(), best);
  bool named = false;
  for (const auto& [k, v] : peaks.Context()) {
    if (k == "peak_cache") named = v.rfind(path_, 0) == 0;
  }
  EXPECT_TRUE(named);
}

}  // namespace
}  // namespace ltb
