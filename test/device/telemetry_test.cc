#include "device/telemetry.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ltb {
namespace {

namespace fs = std::filesystem;

// A powercap tree as Linux lays it out, in a temporary directory.
class RaplTest : public ::testing::Test {
 protected:
  RaplTest()
      : root_(fs::temp_directory_path() /
              ("ltb_rapl_" +
               std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  ~RaplTest() override { fs::remove_all(root_); }

  void Write(const std::string& path, const std::string& text) {
    fs::create_directories((root_ / path).parent_path());
    std::ofstream(root_ / path) << text << "\n";
  }
  void Domain(const std::string& dir, const std::string& name, long long uj,
              long long range) {
    Write(dir + "/name", name);
    Write(dir + "/energy_uj", std::to_string(uj));
    Write(dir + "/max_energy_range_uj", std::to_string(range));
  }

  fs::path root_;
};

TEST_F(RaplTest, SumsThePackagesAcrossAWrapAndIgnoresTheirSubdomains) {
  Domain("intel-rapl:0", "package-0", 1'000'000, 262'143'328'850);
  Domain("intel-rapl:0/intel-rapl:0:0", "core", 5'000'000, 262'143'328'850);
  Domain("intel-rapl:1", "package-1", 9'000'000, 10'000'000);
  Domain("intel-rapl:0:0", "core", 0, 1'000);  // a flat layout's sub-domain
  auto meter = RaplMeter::Create(root_.string());
  ASSERT_TRUE(meter.ok()) << meter.status();
  EXPECT_EQ((*meter)->Covers(),
            "RAPL package-0 + package-1 (whole sockets: every process on them)");
  EXPECT_DOUBLE_EQ((*meter)->Joules(), 0);
  // package-0 counts 2 J; package-1 wraps at 10 J: 1 J to the wrap, 0.5 after.
  Write("intel-rapl:0/energy_uj", "3000000");
  Write("intel-rapl:1/energy_uj", "500000");
  Write("intel-rapl:0:0/energy_uj", "999");
  EXPECT_DOUBLE_EQ((*meter)->Joules(), 3.5);
  Write("intel-rapl:1/energy_uj", "1500000");
  EXPECT_DOUBLE_EQ((*meter)->Joules(), 4.5);
  // The smallest range (10 J) at 500 W.
  EXPECT_DOUBLE_EQ((*meter)->MaxSeconds(), 0.02);
  // A counter that stops being readable reads as no reading.
  fs::remove(root_ / "intel-rapl:1/energy_uj");
  EXPECT_LT((*meter)->Joules(), 0);
}

TEST_F(RaplTest, SaysWhyThereIsNoCounter) {
  const auto missing = RaplMeter::Create((root_ / "absent").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos);

  const auto empty = RaplMeter::Create(root_.string());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no RAPL package domains"), std::string::npos);

  Write("intel-rapl:0/name", "package-0");  // no energy_uj, as when unreadable
  const auto unreadable = RaplMeter::Create(root_.string());
  ASSERT_FALSE(unreadable.ok());
  EXPECT_NE(unreadable.status().message().find("intel-rapl:0/energy_uj cannot be read"),
            std::string::npos)
      << unreadable.status();
}

}  // namespace
}  // namespace ltb
