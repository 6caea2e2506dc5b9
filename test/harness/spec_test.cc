#include "harness/spec.h"

#include <gtest/gtest.h>

#include <regex>

#include "harness/sweep.h"
#include "models/ops.h"
#include "models/transformer.h"
#include "spec_for.h"

namespace ltb {
namespace {

BenchSpec TransformerSpec() { return SpecFor("Transformer", "small", "forward", 4, 512); }

TEST(BenchSpecName, FollowsFamilySizeDevicePhaseSettings) {
  BenchSpec s = TransformerSpec();
  EXPECT_EQ(s.Name(), "Transformer/small/cpu/forward/batch:4/seq:512/fp32");
  s.device = c10::Device(c10::kCUDA, 1);
  s.dtype = c10::kBFloat16;
  s.sync = false;
  EXPECT_EQ(s.Name(), "Transformer/small/cuda:1/forward/batch:4/seq:512/bf16/nosync");
}

TEST(BenchSpecName, OpsPutTheShapeBeforeTheDevice) {
  EXPECT_EQ(SpecFor("Ops", "matmul", "2048x2048").Name(),
            "Ops/matmul/2048x2048/cpu/fp32");
}

TEST(ParsePositiveList, ExpandsAndDeduplicates) {
  EXPECT_EQ(ParsePositiveList("batch", "1,8,32").value(),
            (std::vector<int64_t>{1, 8, 32}));
  EXPECT_EQ(ParsePositiveList("batch", "4, 4,2").value(), (std::vector<int64_t>{4, 2}));
}

TEST(ParsePositiveList, RejectsWithTheFlagAndValidForm) {
  for (const char* bad : {"", "0", "-1", "1,,2", "x", "1.5", "8,"}) {
    absl::StatusOr<std::vector<int64_t>> v = ParsePositiveList("seq", bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_NE(v.status().message().find("--seq"), std::string::npos);
    EXPECT_NE(v.status().message().find("valid: positive integers"), std::string::npos);
  }
}

TEST(ParseDtypeList, KnowsThreePrecisions) {
  EXPECT_EQ(ParseDtypeList("fp32,bf16,fp16").value(),
            (std::vector<c10::ScalarType>{c10::kFloat, c10::kBFloat16, c10::kHalf}));
  const auto bad = ParseDtypeList("fp32,fp64");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("valid: fp32, bf16, fp16"), std::string::npos);
  for (c10::ScalarType t : {c10::kFloat, c10::kBFloat16, c10::kHalf}) {
    EXPECT_EQ(ParseDtype(DtypeName(t)).value(), t);
  }
}

TEST(ParseDeviceList, NamesTheFlagOnError) {
  EXPECT_EQ(ParseDeviceList("cpu,cuda:1").value().size(), 2u);
  const auto bad = ParseDeviceList("cpu,tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--devices"), std::string::npos);
  EXPECT_NE(bad.status().message().find("'tpu'"), std::string::npos);
}

TEST(ParseBool, AcceptsTheUsualSpellingsOnly) {
  EXPECT_TRUE(ParseBool("sync", "true").value());
  EXPECT_FALSE(ParseBool("sync", "false").value());
  EXPECT_FALSE(ParseBool("sync", "0").value());
  EXPECT_FALSE(ParseBool("sync", "maybe").ok());
}

TEST(ExpandSweep, CrossesEveryListAndKeepsFamilyDefaults) {
  const std::vector<Family> families = {OpsFamily(), TransformerFamily()};
  Sweep sweep;
  sweep.devices = {c10::Device(c10::kCPU), c10::Device(c10::kCUDA, 0)};
  sweep.batches = {1, 8};
  sweep.dtypes = {c10::kFloat, c10::kBFloat16};
  const std::vector<Registration> regs = ExpandSweep(families, sweep);
  // Ops: 24 ops on both devices and 5 transfers on cuda only, in 2 dtypes,
  // and noop in fp32 on both; no batch or seq.
  // Transformer: 6 sizes x 4 phases x 2 devices x 2 dtypes x 2 batches x 1 seq.
  EXPECT_EQ(regs.size(), (24 * 2 + 5) * 2 + 2 + 6 * 4 * 2 * 2 * 2);
  std::set<std::string> names;
  for (const Registration& r : regs) names.insert(r.spec.Name());
  EXPECT_EQ(names.size(), regs.size()) << "names must be unique";
  EXPECT_TRUE(names.count("Transformer/2.7B/cuda/train_step/batch:8/seq:512/bf16"));
  EXPECT_TRUE(names.count("Ops/matmul/2048x2048/cuda/bf16"));
  EXPECT_FALSE(names.count("Ops/noop/empty/cpu/bf16"));
}

TEST(DefaultSuiteFilter, SelectsEachFamilysSuiteSizes) {
  const std::vector<Family> families = {OpsFamily(), TransformerFamily()};
  const std::regex suite(DefaultSuiteFilter(families));
  const auto selected = [&](const std::string& name) {
    return std::regex_search(name, suite);
  };
  EXPECT_TRUE(selected("Transformer/small/cpu/forward/batch:4/seq:512/fp32/manual_time"));
  EXPECT_TRUE(
      selected("Transformer/small/cuda/train_step/batch:4/seq:512/fp32/manual_time"));
  EXPECT_TRUE(selected("Ops/matmul/2048x2048/cpu/fp32/manual_time"));
  EXPECT_TRUE(selected("Ops/noop/empty/cpu/fp32/manual_time"));
  EXPECT_FALSE(selected("Transformer/nano/cpu/forward/batch:4/seq:512/fp32/manual_time"));
  EXPECT_FALSE(selected("Transformer/xl/cpu/forward/batch:4/seq:512/fp32/manual_time"));
}

TEST(DevicesNamedIn, FindsDevicesInAFilter) {
  const auto devices = DevicesNamedIn("Transformer/small/(cuda|mps)|Ops/.*/cuda:2/");
  EXPECT_EQ(devices.size(), 3u);
  EXPECT_TRUE(DevicesNamedIn("Transformer/small/cpu").empty());
}

}  // namespace
}  // namespace ltb
