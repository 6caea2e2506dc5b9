#include "suite/flags.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"

namespace ltb {
namespace {

template <typename T>
T Parsed(absl::string_view text) {
  T value{};
  std::string error;
  EXPECT_TRUE(absl::ParseFlag(text, &value, &error)) << text << ": " << error;
  return value;
}

// The parse error of `text`, which must not parse.
template <typename T>
std::string ErrorOf(absl::string_view text) {
  T value{};
  std::string error;
  EXPECT_FALSE(absl::ParseFlag(text, &value, &error)) << text;
  return error;
}

TEST(PositiveInts, ExpandsAndDeduplicates) {
  EXPECT_EQ(Parsed<PositiveInts>("1,8,32").values, (std::vector<int64_t>{1, 8, 32}));
  EXPECT_EQ(Parsed<PositiveInts>("4, 4,2").values, (std::vector<int64_t>{4, 2}));
}

TEST(PositiveInts, RejectsWithTheValidForm) {
  for (const char* bad : {"0", "-1", "1,,2", "x", "1.5", "8,"}) {
    EXPECT_NE(ErrorOf<PositiveInts>(bad).find("valid: positive integers"),
              std::string::npos)
        << bad;
  }
}

TEST(DtypeList, KnowsThreePrecisions) {
  EXPECT_EQ(Parsed<DtypeList>("fp32,bf16,fp16").values,
            (std::vector<c10::ScalarType>{c10::kFloat, c10::kBFloat16, c10::kHalf}));
  EXPECT_NE(ErrorOf<DtypeList>("fp32,fp64").find("valid: fp32, bf16, fp16"),
            std::string::npos);
}

TEST(QuantList, KnowsFourPathsAndTheGroupSizes) {
  EXPECT_EQ(Parsed<QuantList>("none,int8,int4,int8dyn,int8").values,
            (std::vector<QuantKind>{QuantKind::kNone, QuantKind::kInt8, QuantKind::kInt4,
                                    QuantKind::kInt8Dyn}));
  EXPECT_EQ(absl::UnparseFlag(Parsed<QuantList>("int4,none")), "int4,none");
  const std::string error = ErrorOf<QuantList>("int8,q4_0");
  EXPECT_NE(error.find("unknown quantisation 'q4_0'; valid: none, int8, int4, int8dyn"),
            std::string::npos)
      << error;
  EXPECT_EQ(Parsed<QuantGroups>("128,32").values, (std::vector<int64_t>{128, 32}));
  EXPECT_NE(ErrorOf<QuantGroups>("32,16").find("'16'; valid: 32, 64, 128"),
            std::string::npos);
}

TEST(DeviceList, ParsesAndNamesTheBadDevice) {
  EXPECT_EQ(Parsed<DeviceList>("cpu,cuda:1,cpu").values.size(), 2u);
  EXPECT_TRUE(Parsed<DeviceList>("").values.empty());
  const std::string error = ErrorOf<DeviceList>("cpu,tpu");
  EXPECT_NE(error.find("'tpu'"), std::string::npos);
  EXPECT_NE(error.find("valid: cpu, cuda, cuda:N"), std::string::npos);
}

TEST(MemoryFormats, ContiguousAndChannelsLast) {
  EXPECT_EQ(Parsed<MemoryFormats>("contiguous,channels_last").channels_last,
            (std::vector<bool>{false, true}));
  EXPECT_NE(ErrorOf<MemoryFormats>("nhwc").find("valid: contiguous, channels_last"),
            std::string::npos);
}

TEST(TwoValueLists, BothIsEveryValueAsTheHelpSays) {
  EXPECT_EQ(Parsed<MemoryFormats>("both").channels_last,
            (std::vector<bool>{false, true}));
  EXPECT_EQ(Parsed<CpuLinearList>("both").packed, (std::vector<bool>{false, true}));
  EXPECT_EQ(Parsed<SwitchList>("both").values, (std::vector<bool>{false, true}));
  EXPECT_EQ(Parsed<SwitchList>("true,false").values, (std::vector<bool>{true, false}));
  EXPECT_NE(ErrorOf<SwitchList>("maybe").find("valid: false, true, or both"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf<MemoryFormats>("nhwc").find("valid: contiguous, channels_last, or both"),
      std::string::npos);
  // "both" is the whole list, not one of its items.
  ErrorOf<SwitchList>("false,both");
}

TEST(Switch, AcceptsTheUsualSpellingsOnly) {
  EXPECT_TRUE(Parsed<Switch>("true").value);
  EXPECT_FALSE(Parsed<Switch>("false").value);
  EXPECT_FALSE(Parsed<Switch>("0").value);
  EXPECT_TRUE(Parsed<Switch>("yes").value);
  EXPECT_NE(ErrorOf<Switch>("maybe").find("valid: true, false"), std::string::npos);
}

TEST(ScalarFlags, RefuseAListInsteadOfKeepingItsFirstItem) {
  EXPECT_NE(ErrorOf<PositiveCount>("2,5").find("one value, not a list"),
            std::string::npos);
  EXPECT_NE(ErrorOf<Count>("1,2").find("one value, not a list"), std::string::npos);
  EXPECT_NE(ErrorOf<Seconds>("0.5,1").find("one value, not a list"), std::string::npos);
  EXPECT_NE(ErrorOf<OptionalPositive>("64,96").find("one value, not a list"),
            std::string::npos);
}

TEST(ScalarFlags, Bounds) {
  EXPECT_EQ(Parsed<Count>("0").value, 0);
  EXPECT_NE(ErrorOf<Count>("-2").find(">= 0"), std::string::npos);
  EXPECT_EQ(Parsed<PositiveCount>("3").value, 3);
  EXPECT_NE(ErrorOf<PositiveCount>("0").find(">= 1"), std::string::npos);
  EXPECT_DOUBLE_EQ(Parsed<Seconds>("0.25").value, 0.25);
  for (const char* bad : {"inf", "nan", "-1", "soon"}) ErrorOf<Seconds>(bad);
  EXPECT_EQ(Parsed<OptionalPositive>("").value, 0);
  EXPECT_EQ(Parsed<OptionalPositive>("96").value, 96);
}

TEST(Choices, NameTheValidOnes) {
  EXPECT_EQ(Parsed<MallocMode>("system"), MallocMode::kSystem);
  EXPECT_NE(ErrorOf<MallocMode>("jemalloc").find("valid: tuned, system"),
            std::string::npos);
  EXPECT_EQ(Parsed<DataSource>("disk"), DataSource::kDisk);
  EXPECT_NE(ErrorOf<DataSource>("tape").find("valid: memory, disk"), std::string::npos);
  EXPECT_EQ(Parsed<CpuLinearList>("aten,onednn,aten").packed,
            (std::vector<bool>{false, true}));
  EXPECT_NE(ErrorOf<CpuLinearList>("blas").find("valid: aten, onednn"),
            std::string::npos);
}

TEST(PeakFlagValues, OneNumberOrPerDtype) {
  EXPECT_EQ(Parsed<PeakFlopsValue>("1.5e14").per_dtype.size(), 4u);  // fp64's too
  EXPECT_DOUBLE_EQ(Parsed<PeakFlopsValue>("fp32=6.7e13").per_dtype.at(c10::kFloat),
                   6.7e13);
  ErrorOf<PeakFlopsValue>("int8=1");
  EXPECT_DOUBLE_EQ(Parsed<PeakBandwidthValue>("3.35e12").value, 3.35e12);
  ErrorOf<PeakBandwidthValue>("0");
}

TEST(SuiteFlags, OneListHoldsEveryFlagOfTheSuiteAndNoneOfAbseils) {
  std::set<std::string> names;
  for (const absl::CommandLineFlag* flag : SuiteFlags()) {
    names.insert(std::string(flag->Name()));
    EXPECT_FALSE(flag->Help().empty()) << flag->Name();
  }
  // The harness's own, and one a family reads (EncDec's, through FamilyOptions).
  for (const char* name :
       {"devices", "batch", "dtype", "cpu_linear", "epochs", "d_model"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_FALSE(names.count("flagfile"));
  EXPECT_FALSE(names.count("fromenv"));
}

TEST(SuiteFlags, EveryDefaultParsesBackToItself) {
  for (const absl::CommandLineFlag* flag : SuiteFlags()) {
    absl::CommandLineFlag* f = absl::FindCommandLineFlag(flag->Name());
    const std::string before = f->CurrentValue();
    std::string error;
    EXPECT_TRUE(f->ParseFrom(f->DefaultValue(), &error)) << flag->Name() << ": " << error;
    EXPECT_EQ(f->CurrentValue(), f->DefaultValue()) << flag->Name();
    ASSERT_TRUE(f->ParseFrom(before, &error));
  }
}

TEST(SetSuiteFlag, ErrorsNameTheFlagValueAndValidChoices) {
  absl::FlagSaver saver;
  const absl::Status bad = SetSuiteFlag("dtype", "fp64");
  EXPECT_NE(bad.message().find("bad --dtype value 'fp64'"), std::string::npos);
  EXPECT_NE(bad.message().find("valid: fp32, bf16, fp16"), std::string::npos);
  const absl::Status unknown = SetSuiteFlag("no_such_flag", "1");
  EXPECT_NE(unknown.message().find("unknown flag '--no_such_flag'"), std::string::npos);
  EXPECT_NE(unknown.message().find("--devices"), std::string::npos);
  EXPECT_FALSE(SetSuiteFlag("flagfile", "x").ok()) << "Abseil's flags are not bench's";
}

TEST(OptionsFromFlags, DefaultsAndDerivedSettings) {
  absl::FlagSaver saver;
  SuiteOptions o = OptionsFromFlags().value();
  EXPECT_EQ(o.sweep.dtypes, (std::vector<c10::ScalarType>{c10::kFloat}));
  EXPECT_TRUE(o.sweep.prompts.empty());  // kDefaultPrompt, or the suite's CPU one
  EXPECT_TRUE(o.sweep.batches.empty());
  EXPECT_EQ(o.epochs.data, "memory");
  EXPECT_EQ(o.measured_epochs, 2);
  ASSERT_TRUE(SetSuiteFlag("data_dir", "/tmp/shards").ok());
  ASSERT_TRUE(SetSuiteFlag("seed", "7").ok());
  o = OptionsFromFlags().value();
  EXPECT_EQ(o.epochs.data, "disk") << "--data_dir implies disk";
  EXPECT_EQ(o.epochs.seed, 7u);
  EXPECT_EQ(o.run.seed, 7u);
  ASSERT_TRUE(SetSuiteFlag("dtype", "").ok());
  EXPECT_FALSE(OptionsFromFlags().ok()) << "an empty --dtype would run nothing";
}

TEST(OptionsFromFlags, FamilySettingsAndWhetherADtypeWasGiven) {
  absl::FlagSaver saver;
  char prog[] = "bench", d_model[] = "--d_model=96", model[] = "--model=a.pt2,b.pt2",
       flops[] = "--flops_per_step=3e9", dtype[] = "--dtype=bf16";
  char* argv[] = {prog, d_model, model, flops, dtype};
  ASSERT_TRUE(ParseSuiteFlags(5, argv).ok());
  const SuiteOptions o = OptionsFromFlags().value();
  EXPECT_EQ(o.families.d_model, 96);
  EXPECT_EQ(o.families.heads, 0) << "not given";
  EXPECT_EQ(o.families.model_files, (std::vector<std::string>{"a.pt2", "b.pt2"}));
  EXPECT_EQ(o.families.model_flops_per_step, "3e9");
  EXPECT_TRUE(o.families.model_inputs.empty());
  EXPECT_TRUE(o.dtypes_given);
  // A parse is a whole command line: the next one forgets what this one gave,
  // as the flags' values return to their defaults with the saver.
  ASSERT_TRUE(ParseSuiteFlags(1, argv).ok());
  EXPECT_FALSE(SuiteFlagGiven("model"));
  EXPECT_FALSE(SuiteFlagGiven("dtype"));
}

TEST(OptionsFromFlags, FlopsPerStepHoldAtOneBatch) {
  absl::FlagSaver saver;
  ASSERT_TRUE(SetSuiteFlag("model", "a.pt").ok());
  ASSERT_TRUE(SetSuiteFlag("flops_per_step", "2e6").ok());
  ASSERT_TRUE(SetSuiteFlag("batch", "4").ok());
  EXPECT_TRUE(OptionsFromFlags().ok());
  ASSERT_TRUE(SetSuiteFlag("batch", "1,4").ok());
  const absl::StatusOr<SuiteOptions> sweep = OptionsFromFlags();
  ASSERT_FALSE(sweep.ok());
  EXPECT_EQ(sweep.status().message(),
            "--flops_per_step gives the FLOPs of one forward at one batch: give one "
            "--batch with it, or leave it out to have each batch's FLOPs counted");
}

TEST(OptionsFromFlags, RatesAndBoundsAreNamedAsGiven) {
  // Names hold six significant digits: two rates that round alike would
  // share one, and a bound rounded to 100 would read as LoadGen's default.
  for (const auto& [flag, value, named] :
       {std::tuple<const char*, const char*, const char*>{"target_qps", "12.3456789,5",
                                                          "12.3457"},
        {"latency_bound_ms", "100.00001", "100"}}) {
    absl::FlagSaver saver;
    ASSERT_TRUE(SetSuiteFlag("scenario", "Server").ok());
    ASSERT_TRUE(SetSuiteFlag(flag, value).ok());
    const absl::StatusOr<SuiteOptions> o = OptionsFromFlags();
    ASSERT_FALSE(o.ok()) << flag;
    EXPECT_NE(o.status().message().find(absl::StrCat(
                  "a benchmark's name holds it to six significant digits (", named, ")")),
              std::string::npos)
        << o.status().message();
  }
  absl::FlagSaver saver;
  ASSERT_TRUE(SetSuiteFlag("scenario", "Server").ok());
  ASSERT_TRUE(SetSuiteFlag("target_qps", "12.3457,0.5").ok());
  EXPECT_TRUE(OptionsFromFlags().ok());
}

TEST(ParseSuiteFlags, NeedsNameEqualsValue) {
  absl::FlagSaver saver;
  char prog[] = "bench", batch[] = "--batch", ok[] = "--batch=2,4", stray[] = "stray";
  char* no_value[] = {prog, batch};
  const absl::Status s = ParseSuiteFlags(2, no_value);
  EXPECT_NE(s.message().find("--batch needs a value"), std::string::npos);
  char* good[] = {prog, ok};
  ASSERT_TRUE(ParseSuiteFlags(2, good).ok());
  EXPECT_EQ(OptionsFromFlags()->sweep.batches, (std::vector<int64_t>{2, 4}));
  char* positional[] = {prog, stray};
  EXPECT_NE(ParseSuiteFlags(2, positional).message().find("unexpected argument 'stray'"),
            std::string::npos);
}

}  // namespace
}  // namespace ltb
