#include "family/registry.h"

#include <gtest/gtest.h>

#include <set>

#include "scoped_env.h"
#include "suite/sweep.h"

namespace ltb {
namespace {

std::vector<std::string> Names(const std::vector<Family>& families) {
  std::vector<std::string> names;
  for (const Family& f : families) names.push_back(f.name);
  return names;
}

TEST(RegisteredFamilies, EveryModelFileRegistersItsFamilyInOrder) {
  ScopedEnv selftest({{"LTB_SELFTEST", nullptr}});
  EXPECT_EQ(Names(RegisteredFamilies().value()),
            (std::vector<std::string>{"Ops", "Transformer", "GPT2", "Llama", "ResNet",
                                      "CNN", "Encoder", "Whisper", "EncDec"}));
}

TEST(RegisteredFamilies, TestFamiliesOnlyWhenAskedFor) {
  {
    ScopedEnv selftest({{"LTB_SELFTEST", "1"}});
    EXPECT_EQ(Names(RegisteredFamilies().value()).back(), "Selftest");
  }
  ScopedEnv selftest({{"LTB_SELFTEST", nullptr}});
  EXPECT_EQ(Names(RegisteredFamilies(/*include_test_only=*/true).value()).back(),
            "Selftest");
}

TEST(RegisteredFamilies, EveryFamilyIsComplete) {
  const std::vector<Family> families = RegisteredFamilies(true).value();
  for (const Family& f : families) {
    EXPECT_FALSE(f.Cases().empty()) << f.name;
    EXPECT_TRUE(f.plan) << f.name;
    EXPECT_TRUE(f.build) << f.name;
    std::set<std::string> cases;
    for (const Case& c : f.Cases()) {
      EXPECT_TRUE(cases.insert(c.size + "/" + c.phase.name).second)
          << f.name << " registers " << c.size << "/" << c.phase.name << " twice";
    }
  }
}

TEST(RegisteredFamilies, FactoriesGetTheRunsFamilyOptions) {
  ScopedEnv selftest({{"LTB_SELFTEST", nullptr}});
  FamilyOptions o;
  o.d_model = 96;
  o.heads = 6;
  std::vector<Family> families = RegisteredFamilies(o).value();
  EXPECT_EQ(FindFamily(families, "EncDec").value()->sizes.at(1),
            "custom_d96_h6_e3_d3_ff512");
  EXPECT_FALSE(FindFamily(families, "Model").ok()) << "no --model, no Model family";
  o.d_model = 100;
  o.heads = 8;
  const auto bad = RegisteredFamilies(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--nhead=8 must divide --d_model=100"),
            std::string::npos);
  FamilyOptions files;
  files.model_files = {"/no/such/dir/mine.pt2"};
  families = RegisteredFamilies(files).value();
  const Family* model = FindFamily(families, "Model").value();
  EXPECT_EQ(model->sizes, (std::vector<std::string>{"mine"}));
  EXPECT_EQ(FindFamily(families, "EncDec").value()->sizes.at(1), "tiny");
}

TEST(FindFamily, NamesTheValidFamilies) {
  const std::vector<Family> families = RegisteredFamilies().value();
  EXPECT_EQ(FindFamily(families, "GPT2").value()->name, "GPT2");
  const auto bad = FindFamily(families, "Mamba");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.status().message().find("unknown family 'Mamba'; valid: Ops, Transformer"),
      std::string::npos);
}

// The Selftest family is one model file and one LTB_REGISTER_TEST_FAMILY
// line: registered, it is named, swept and planned like any family.
TEST(SelftestFamily, AddedAsOneRowIsNamedSweptAndPlanned) {
  const std::vector<Family> families = RegisteredFamilies(true).value();
  const std::vector<Family> selftest = {*FindFamily(families, "Selftest").value()};
  Sweep sweep;
  sweep.devices = {c10::Device(c10::kCPU)};
  sweep.dtypes = {c10::kFloat, c10::kBFloat16};
  std::vector<std::string> names;
  const std::vector<Registration> registrations = ExpandSweep(selftest, sweep);
  for (const Registration& r : registrations) {
    names.push_back(r.spec.Name());
    ASSERT_TRUE(r.family->PlanFor(r.spec).ok()) << r.spec.Name();
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "Selftest/ok/cpu/step/fp32", "Selftest/slow/cpu/step/fp32",
                "Selftest/abort/cpu/step/fp32", "Selftest/spin/cpu/step/fp32",
                "Selftest/kill/cpu/step/fp32", "Selftest/rank1_fails/cpu/step/fp32",
                "Selftest/together/cpu/step/fp32"}));
  selftest[0].build(registrations.front().spec)->Step();
}

TEST(Family, FindCaseNamesTheValidSizesAndPhases) {
  const std::vector<Family> families = RegisteredFamilies().value();
  const Family* whisper = FindFamily(families, "Whisper").value();
  EXPECT_EQ(whisper->FindCase("tiny", "transcribe")->fixed_prompt, 4);
  EXPECT_EQ(whisper->FindCase("tiny", "encode")->phase.kind, PhaseKind::kInference);
  EXPECT_NE(whisper->FindCase("tiny", "train_step")
                .status()
                .message()
                .find("Whisper/tiny has no phase 'train_step'; valid: encode, generate, "
                      "transcribe"),
            std::string::npos);
  EXPECT_NE(whisper->FindCase("huge", "encode")
                .status()
                .message()
                .find("unknown Whisper size 'huge'; valid: nano, tiny, base"),
            std::string::npos);
}

}  // namespace
}  // namespace ltb
