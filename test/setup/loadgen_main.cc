// MLPerf LoadGen as the set-up provides it (third_party/build-deps, or the
// CMake fallback), linked alone: it is the version pinned in
// third_party/loadgen/pin.txt, and a short SingleStream test over a system
// under test that completes each query at once issues every sample exactly
// once, from the samples it loaded, and counts each in its own results.
#include <gtest/gtest.h>
#include <loadgen/loadgen.h>
#include <loadgen/query_sample_library.h>
#include <loadgen/system_under_test.h>
#include <loadgen/test_settings.h>
#include <loadgen/version.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Which samples LoadGen holds loaded, and how often it loaded any.
class CountingLibrary : public mlperf::QuerySampleLibrary {
 public:
  const std::string& Name() override { return name_; }
  size_t TotalSampleCount() override { return 16; }
  size_t PerformanceSampleCount() override { return 8; }
  void LoadSamplesToRam(const std::vector<mlperf::QuerySampleIndex>& samples) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto s : samples) loaded_.insert(s);
    ++loads_;
  }
  void UnloadSamplesFromRam(
      const std::vector<mlperf::QuerySampleIndex>& samples) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto s : samples) loaded_.erase(s);
  }
  bool Loaded(mlperf::QuerySampleIndex s) {
    std::lock_guard<std::mutex> lock(mu_);
    return loaded_.count(s) > 0;
  }
  size_t LoadedCount() {
    std::lock_guard<std::mutex> lock(mu_);
    return loaded_.size();
  }
  int loads() const { return loads_; }

 private:
  std::string name_ = "counting";
  std::mutex mu_;
  std::set<mlperf::QuerySampleIndex> loaded_;
  int loads_ = 0;
};

// Completes every sample inside IssueQuery, recording what it was given.
class ImmediateSut : public mlperf::SystemUnderTest {
 public:
  explicit ImmediateSut(CountingLibrary* library) : library_(library) {}
  const std::string& Name() override { return name_; }
  void IssueQuery(const std::vector<mlperf::QuerySample>& samples) override {
    std::vector<mlperf::QuerySampleResponse> responses;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++queries_;
      for (const auto& s : samples) {
        ++issued_[s.id];
        if (!library_->Loaded(s.index)) ++not_loaded_;
        responses.emplace_back(s.id, 0, 0);
      }
    }
    mlperf::QuerySamplesComplete(responses.data(), responses.size());
  }
  void FlushQueries() override {}

  int queries() const { return queries_; }
  int not_loaded() const { return not_loaded_; }
  const std::map<mlperf::ResponseId, int>& issued() const { return issued_; }

 private:
  std::string name_ = "immediate";
  CountingLibrary* library_;
  std::mutex mu_;
  int queries_ = 0;
  int not_loaded_ = 0;
  std::map<mlperf::ResponseId, int> issued_;
};

// A value LoadGen's detail log records (":::MLLOG {"key": KEY, "value": V,
// ...}"), as text; "" when absent.
std::string DetailValue(const std::string& log, const std::string& key) {
  const std::regex pattern("\"key\": \"" + key + "\", \"value\": \"?([^\",]*)");
  std::smatch match;
  return std::regex_search(log, match, pattern) ? match[1].str() : "";
}

TEST(LoadGen, IsThePinnedVersion) {
  EXPECT_EQ(mlperf::LoadgenVersion(), LTB_LOADGEN_VERSION);
}

TEST(LoadGen, SingleStreamIssuesEverySampleOnceAndCountsIt) {
  const std::filesystem::path dir =
      std::filesystem::path(testing::TempDir()) / "ltb-loadgen-single-stream";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  constexpr int kQueries = 40;
  mlperf::TestSettings settings;
  settings.scenario = mlperf::TestScenario::SingleStream;
  settings.mode = mlperf::TestMode::PerformanceOnly;
  settings.min_duration_ms = 0;
  settings.min_query_count = kQueries;
  settings.max_query_count = kQueries;
  mlperf::LogSettings log;
  log.log_output.outdir = dir.string();
  log.enable_trace = false;

  CountingLibrary library;
  ImmediateSut sut(&library);
  mlperf::StartTest(&sut, &library, settings, log);

  // SingleStream: one sample a query, each a new response id.
  EXPECT_EQ(sut.queries(), kQueries);
  EXPECT_EQ(sut.issued().size(), static_cast<size_t>(kQueries));
  for (const auto& [id, times] : sut.issued()) EXPECT_EQ(times, 1) << id;
  EXPECT_EQ(sut.not_loaded(), 0) << "samples issued before they were loaded";
  EXPECT_GE(library.loads(), 1);
  EXPECT_EQ(library.LoadedCount(), 0u) << "samples left loaded after the test";

  std::ifstream in(dir / "mlperf_log_detail.txt");
  ASSERT_TRUE(in) << "LoadGen wrote no detail log in " << dir;
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(DetailValue(text.str(), "result_query_count"), std::to_string(kQueries));
  EXPECT_EQ(DetailValue(text.str(), "effective_scenario"), "SingleStream");
  std::filesystem::remove_all(dir);
}

}  // namespace
