// The run's steps between the options and the runner: the filter, the
// sweep completed for the run, and the registrations.
#include "suite/suite.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "device/device.h"
#include "family/registry.h"

namespace ltb {
namespace {

const std::vector<Family>& Families() {
  static const auto* families = new std::vector<Family>(RegisteredFamilies().value());
  return *families;
}

CommandLine WithFilter(const std::string& filter) {
  CommandLine c;
  c.filter = filter;
  return c;
}

TEST(RunFilter, TheUsersOrTheDefaultSuitesLessItsSkippedMembers) {
  SuiteOptions o;
  EXPECT_EQ(RunFilter(Families(), o, WithFilter("GPT2/nano/")).value(), "GPT2/nano/");
  EXPECT_EQ(RunFilter(Families(), o, CommandLine{}).value(),
            DefaultSuiteFilter(Families()));
  o.suite_skip = {"Llama/1B"};
  const std::string skipped = RunFilter(Families(), o, CommandLine{}).value();
  EXPECT_EQ(skipped, DefaultSuiteFilter(Families(), o.suite_skip).value());
  EXPECT_NE(skipped, DefaultSuiteFilter(Families()));
  const absl::StatusOr<std::string> both = RunFilter(Families(), o, WithFilter("GPT2/"));
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("--suite_skip"), std::string::npos);
}

TEST(RunFilter, ABadRegularExpressionIsAnError) {
  const absl::StatusOr<std::string> bad = RunFilter(Families(), {}, WithFilter("GPT2/("));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("is not a valid regular expression"),
            std::string::npos);
  EXPECT_TRUE(RunFilter(Families(), {}, WithFilter("-GPT2/(nano|small)/")).ok());
}

TEST(SweepFor, AddsTheDevicesAndDtypesTheFilterNamesUnlessGiven) {
  const c10::Device cpu = HostDevice();
  SuiteOptions o;
  const CommandLine filter = WithFilter("GPT2/nano/cuda/forward/.*/bf16");
  Sweep sweep = SweepFor(o, filter, {cpu});
  ASSERT_EQ(sweep.devices.size(), 2u);
  EXPECT_EQ(sweep.devices[0], cpu);
  EXPECT_EQ(DeviceName(sweep.devices[1]).rfind("cuda", 0), 0u);
  EXPECT_EQ(sweep.dtypes, (std::vector<c10::ScalarType>{c10::kFloat, c10::kBFloat16}));
  EXPECT_FALSE(sweep.default_suite);

  o.sweep.devices = {cpu};  // --devices=cpu
  o.dtypes_given = true;    // --dtype=fp32
  sweep = SweepFor(o, filter, {cpu});
  EXPECT_EQ(sweep.devices, (std::vector<c10::Device>{cpu}));
  EXPECT_EQ(sweep.dtypes, (std::vector<c10::ScalarType>{c10::kFloat}));
}

TEST(SweepFor, TheDefaultSuiteWithoutAFilterAndTheEpochsData) {
  SuiteOptions o;
  o.epochs.dataset_samples = 8;
  o.epochs.data = "disk";
  const Sweep sweep = SweepFor(o, CommandLine{}, {HostDevice()});
  EXPECT_TRUE(sweep.default_suite);
  EXPECT_EQ(sweep.devices, (std::vector<c10::Device>{HostDevice()}));
  EXPECT_EQ(sweep.epochs.dataset_samples, 8);
  // Every benchmark of the sweep carries them (train_epoch reads its own).
  for (const Registration& r : ExpandSweep(Families(), sweep)) {
    EXPECT_EQ(r.spec.epochs.dataset_samples, 8) << r.spec.Name();
    EXPECT_EQ(r.spec.epochs.data, "disk") << r.spec.Name();
  }
}

TEST(RegistrationsFor, TheSweepsBenchmarksAndNoneFromAnEmptyCompiledFolder) {
  Sweep sweep;
  sweep.devices = {HostDevice()};
  const std::vector<Registration> eager =
      RegistrationsFor(Families(), sweep, true).value();
  const std::vector<Registration> expanded = ExpandSweep(Families(), sweep);
  ASSERT_EQ(eager.size(), expanded.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_EQ(eager[i].spec.Name(), expanded[i].spec.Name());
  }
  const std::string empty = testing::TempDir() + "/ltb_no_compiled";
  std::filesystem::create_directories(empty);
  sweep.compiled_dir = empty;
  const absl::StatusOr<std::vector<Registration>> none =
      RegistrationsFor(Families(), sweep, true);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("holds no model file tools/export wrote"),
            std::string::npos);
  std::filesystem::remove_all(empty);
}

}  // namespace
}  // namespace ltb
