// The run's steps between the options and the runner: the filter, the
// sweep completed for the run, and the registrations.
#include "suite/suite.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "device/device.h"
#include "family/registry.h"
#include "spec_for.h"

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

std::set<std::string> NamesOf(const std::vector<Registration>& registrations) {
  std::set<std::string> names;
  for (const Registration& r : registrations) names.insert(r.spec.Name());
  return names;
}

TEST(ExpandSweep, ScenariosAddServeBenchmarksAndKeepEveryOtherName) {
  Sweep plain;
  plain.devices = {HostDevice()};
  plain.batches = {2, 4};
  plain.seqs = {32};
  Sweep served = plain;
  served.serve_scenarios = {"SingleStream", "Server"};
  served.serve_qps = {20, 40};
  served.serve.max_batch = 8;
  const std::set<std::string> before = NamesOf(ExpandSweep(Families(), plain));
  const std::set<std::string> after = NamesOf(ExpandSweep(Families(), served));
  std::set<std::string> kept, serve;
  for (const std::string& name : after) {
    (name.find("/serve/") == std::string::npos ? kept : serve).insert(name);
  }
  EXPECT_EQ(kept, before);
  for (const char* name :
       {"GPT2/nano/cpu/serve/scenario:SingleStream/max_batch:8/seq:32/fp32",
        "GPT2/nano/cpu/serve/scenario:Server/qps:20/max_batch:8/seq:32/fp32",
        "GPT2/nano/cpu/serve/scenario:Server/qps:40/max_batch:8/seq:32/fp32",
        "ResNet/resnet18/cpu/serve/scenario:Server/qps:40/max_batch:8/fp32",
        "CNN/nano/cpu/serve/scenario:SingleStream/max_batch:8/fp32",
        "Encoder/nano/cpu/serve/scenario:SingleStream/max_batch:8/seq:32/fp32",
        "EncDec/nano/cpu/serve/scenario:Server/qps:20/max_batch:8/seq:32/fp32",
        "Whisper/nano/cpu/serve/scenario:Server/qps:40/max_batch:8/fp32"}) {
    EXPECT_EQ(serve.count(name), 1u) << name;
  }
  // One a scenario and rate per served benchmark (forward; Whisper's encode,
  // not its generation), whatever --batch sweeps.
  for (const std::string& name : serve) {
    EXPECT_EQ(name.find("/batch:"), std::string::npos) << name;
  }
  auto count = [&](const std::string& prefix) {
    size_t n = 0;
    for (const std::string& name : serve) n += name.rfind(prefix, 0) == 0;
    return n;
  };
  EXPECT_EQ(count("GPT2/nano/"), 3u);
  EXPECT_EQ(count("Whisper/nano/"), 3u);
  // --serve_phase keeps one phase's: Whisper's encode alone.
  served.serve.phase = "encode";
  for (const std::string& name : NamesOf(ExpandSweep(Families(), served))) {
    if (name.find("/serve/") != std::string::npos) {
      EXPECT_EQ(name.rfind("Whisper/", 0), 0u) << name;
    }
  }
}

TEST(UntakenSettings, ASettingNoSelectedBenchmarkTakesIsNamedWithTheFamiliesThatDo) {
  Sweep sweep;
  sweep.devices = {HostDevice()};
  sweep.dtypes = {c10::kFloat, c10::kBFloat16};
  sweep.quants = {Quant{QuantKind::kInt8}};
  sweep.batches = {3};  // Ops' shapes are fixed: it went unsaid
  sweep.seqs = {32};
  sweep.prompts = {7};
  sweep.depths = {0, 600};
  const std::vector<Registration> registrations = ExpandSweep(Families(), sweep);
  const auto family_is = [](std::set<std::string> names) {
    return [names](const BenchSpec& s) { return names.count(s.family) > 0; };
  };
  // Every setting is some family's, and none is Ops/matmul's: each is named.
  const std::vector<std::string> ops =
      UntakenSettings(registrations, sweep, /*dtypes_given=*/true, family_is({"Ops"}));
  std::set<std::string> flags;
  for (const std::string& said : ops) flags.insert(said.substr(0, said.find(' ')));
  EXPECT_EQ(flags, (std::set<std::string>{"--quant=int8", "--batch=3", "--seq=32",
                                          "--prompt=7", "--depth=600"}))
      << absl::StrJoin(ops, "\n");
  EXPECT_NE(std::find(ops.begin(), ops.end(),
                      "--depth=600 adds no benchmark that the filter selects (Ops): it "
                      "applies to GPT2, Llama"),
            ops.end())
      << absl::StrJoin(ops, "\n");
  // GPT2 takes them all; Whisper's generation fixes its prompt and depth.
  const std::vector<std::string> decoders =
      UntakenSettings(registrations, sweep, true, [](const BenchSpec& s) {
        return (s.family == "GPT2" || s.family == "Whisper") && s.phase == "generate";
      });
  EXPECT_EQ(decoders,
            (std::vector<std::string>{
                "--seq=32 adds no benchmark that the filter selects (GPT2, Whisper): it "
                "applies to EncDec, Encoder, GPT2, Llama, Transformer",
                "--prompt does not set the generation of Whisper (4): its family fixes "
                "the prompt",
                "--depth does not set the generation of Whisper (0): its family "
                "generates from position 0 alone"}));
  // A dtype the defaults add (not given) is not the user's to be told of.
  for (const std::string& said :
       UntakenSettings(registrations, sweep, false, family_is({"Ops"}))) {
    EXPECT_FALSE(absl::StrContains(said, "--dtype")) << said;
  }
  // Nothing selected: the run's own error says so.
  EXPECT_TRUE(UntakenSettings(registrations, sweep, true, family_is({})).empty());
}

TEST(UntakenSettings, ServingsSettingsAreNamedWithTheScenarioThatReadsThem) {
  Sweep sweep = OfflineServeSweep(4);
  sweep.serve_qps = {20, 40};
  sweep.serve.latency_bound_ms = 37.5;
  sweep.serve.samples_per_query = 4;
  sweep.serve.batch_timeout_us = 500;
  const std::vector<Registration> registrations = ExpandSweep(Families(), sweep);
  // Offline alone: its batcher waits --batch_timeout_us; nothing it runs
  // reads Server's bound and rates or MultiStream's query size.
  const auto offline = [](const BenchSpec& s) {
    return s.family == "GPT2" && s.serving() && s.serve.scenario == "Offline";
  };
  EXPECT_EQ(
      UntakenSettings(registrations, sweep, false, offline),
      (std::vector<std::string>{
          "--samples_per_query=4 adds no benchmark that the filter selects (GPT2): it "
          "sets MultiStream's queries",
          "--latency_bound_ms=37.5 adds no benchmark that the filter selects (GPT2): it "
          "bounds Server's p99",
          "--target_qps=40 adds no benchmark that the filter selects (GPT2): a rate "
          "after the first is Server's alone"}));
  sweep.serve_scenarios = {"Offline", "Server", "MultiStream"};
  EXPECT_TRUE(UntakenSettings(ExpandSweep(Families(), sweep), sweep, false,
                              [](const BenchSpec& s) { return s.family == "GPT2"; })
                  .empty());
}

TEST(ExpandSweep, GenerationIsServedByTheFamiliesThatBatchItContinuouslyAlone) {
  // Whisper generates too, but its decoding has no slots: serving its
  // generation would time something else under a generation's name.
  Sweep sweep = OfflineServeSweep(4);
  sweep.serve.phase = "generate";
  std::set<std::string> families;
  for (const Registration& r : ExpandSweep(Families(), sweep)) {
    if (!r.spec.serving()) continue;
    families.insert(r.family->name);
    EXPECT_EQ(r.spec.serve.phase, "generate") << r.spec.Name();
  }
  EXPECT_EQ(families, (std::set<std::string>{"GPT2", "Llama"}));
  // Without --serve_phase, each serves its first: Whisper its encode.
  sweep.serve.phase.clear();
  std::map<std::string, std::string> phases;
  for (const Registration& r : ExpandSweep(Families(), sweep)) {
    if (r.spec.serving()) phases[r.family->name] = r.spec.serve.phase;
  }
  EXPECT_EQ(phases, (std::map<std::string, std::string>{{"CNN", "forward"},
                                                        {"EncDec", "forward"},
                                                        {"Encoder", "forward"},
                                                        {"GPT2", "forward"},
                                                        {"Llama", "forward"},
                                                        {"ResNet", "forward"},
                                                        {"Transformer", "forward"},
                                                        {"Whisper", "encode"}}));
}

TEST(ExpandSweep, FindPeakNamesServersStartAndLeavesTheOtherScenarios) {
  Sweep sweep;
  sweep.devices = {HostDevice()};
  sweep.batches = {2};
  sweep.seqs = {32};
  sweep.serve_scenarios = {"Offline", "Server"};
  sweep.serve_qps = {20};
  sweep.serve.max_batch = 4;
  sweep.serve.find_peak = true;
  std::set<std::string> serve;
  for (const std::string& name : NamesOf(ExpandSweep(Families(), sweep))) {
    if (name.rfind("GPT2/nano/cpu/serve/", 0) == 0) serve.insert(name);
  }
  EXPECT_EQ(serve,
            (std::set<std::string>{
                // 1.1 x 20 QPS x 1 s is 22 samples: the 32 of the minimum count
                // hold, as by default.
                "GPT2/nano/cpu/serve/scenario:Offline/max_batch:4/seq:32/fp32",
                "GPT2/nano/cpu/serve/scenario:Server/find_peak_from:20/max_batch:4/"
                "seq:32/fp32"}));
}

TEST(ExpandSweep, ServedGenerationIsGraphedOnDevicesWithGraphsAndNothingElseServed) {
  Sweep sweep = OfflineServeSweep(4);
  sweep.devices = {HostDevice(), c10::Device(c10::kCUDA, 0)};
  sweep.batches = {2};
  sweep.seqs = {32};
  const auto serve_names = [&](std::vector<bool> graphs) {
    sweep.graphs = std::move(graphs);
    std::set<std::string> serve;
    for (const std::string& name : NamesOf(ExpandSweep(Families(), sweep))) {
      if (name.find("/serve/") != std::string::npos) serve.insert(name);
    }
    return serve;
  };
  const std::set<std::string> eager = serve_names({false});
  const std::set<std::string> both = serve_names({false, true});
  std::set<std::string> graphed;
  for (const std::string& name : both) {
    if (eager.count(name) == 0) graphed.insert(name);
  }
  EXPECT_EQ(both.size(), eager.size() + graphed.size()) << "every eager name kept";
  // The forwards served by the batcher have no graph form: with
  // --serve_phase left out, nothing served is graphed.
  EXPECT_TRUE(graphed.empty()) << *graphed.begin();
  sweep.serve.phase = "generate";
  const std::set<std::string> generate = serve_names({false, true});
  std::set<std::string> graph_names;  // the nano sizes'
  for (const std::string& name : generate) {
    if (!absl::EndsWith(name, "/graph")) continue;
    // Beside the same benchmark eager, on the device that has graphs.
    EXPECT_EQ(generate.count(name.substr(0, name.size() - 6)), 1u) << name;
    EXPECT_TRUE(absl::StrContains(name, "/cuda/")) << name;
    if (absl::StrContains(name, "/nano/")) graph_names.insert(name);
  }
  EXPECT_EQ(graph_names,
            (std::set<std::string>{
                "GPT2/nano/cuda/serve/scenario:Offline/max_batch:4/prompt:32/output:100/"
                "fp32/graph",
                "Llama/nano/cuda/serve/scenario:Offline/max_batch:4/prompt:32/output:100/"
                "fp32/graph"}));
  EXPECT_EQ(
      generate.count(
          "GPT2/nano/cpu/serve/scenario:Offline/max_batch:4/prompt:32/output:100/fp32"),
      1u);
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

std::map<std::string, std::string> AsMap(const Context& context) {
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : context) out[key] = value;
  return out;
}

// How a run measures and what it reads, where no name carries it: the
// context says what ran, in every corner of the flags.
TEST(SettingsContext, RecordsTheMeasurementAndTheDataAsTheFlagsSetThem) {
  SuiteOptions o;
  CommandLine c = WithFilter("GPT2/");
  std::map<std::string, std::string> ctx = AsMap(SettingsContext(o, c, "glibc", 1));
  EXPECT_EQ(ctx["min_time"], "Google Benchmark's 0.5 s (no --benchmark_min_time)");
  EXPECT_EQ(AsMap(SettingsContext(o, CommandLine{}, "glibc", 1))["min_time"],
            "6 s (the default suite's)");
  EXPECT_EQ(ctx["warmup"], ">= 1 steps and >= 0.5 s");
  EXPECT_EQ(ctx["warmup_epochs"],
            "1 (train_epoch: whole epochs before the measured ones)");
  EXPECT_EQ(ctx["train_epoch_data"],
            "memory: the dataset generated in RAM once, before the epochs");
  EXPECT_NE(ctx["dp_gradients"].find(" 25 MB buckets"), std::string::npos);
  // Without a process group nothing is averaged or broadcast, and the
  // context says so before what one would do.
  for (const char* key : {"dp_gradients", "dp_buffers"}) {
    EXPECT_TRUE(absl::StartsWith(ctx[key], "not used, no process group")) << ctx[key];
  }
  for (const char* absent : {"benchmark_min_warmup_time", "profile", "serve_min",
                             "model_inputs", "model_flops_per_step"}) {
    EXPECT_EQ(ctx.count(absent), 0u) << absent;
  }

  c.min_time_given = true;
  c.min_time = "0.01";
  c.min_warmup_time = "0.2";
  o.run.warmup_epochs = 0;
  o.epochs.data = "disk";
  o.epochs.data_dir = "/data/shards";
  o.epochs.shard_mb = 4;
  o.run.profile_dir = "/tmp/profiles";
  o.run.profile_steps = 3;
  o.sweep.serve_scenarios = {"Server"};
  o.sweep.serve.min_s = 2.5;
  o.sweep.serve.min_queries = 64;
  o.sweep.bucket_mb = 5;
  o.families.model_inputs = "4x128:int64[0,50257)";
  o.families.model_flops_per_step = "3.6e9";
  ctx = AsMap(SettingsContext(o, c, "glibc", 1));
  EXPECT_EQ(ctx["min_time"], "as given: --benchmark_min_time=0.01");
  EXPECT_EQ(ctx["benchmark_min_warmup_time"], "0.2");
  EXPECT_EQ(ctx["warmup_epochs"],
            "0 (train_epoch: whole epochs before the measured ones)");
  EXPECT_EQ(ctx["train_epoch_data"],
            "disk: /data/shards, shards of 4 MB, dropped from the page cache before each "
            "epoch");
  EXPECT_EQ(ctx["profile"],
            "/tmp/profiles: 3 steps of each benchmark profiled after its warm-up, before "
            "its timed steps");
  EXPECT_EQ(ctx["serve_min"], "2.5 s and 64 queries a LoadGen test at least");
  // The gradient buckets --bucket_mb chose, not the default's.
  EXPECT_NE(ctx["dp_gradients"].find(" 5 MB buckets"), std::string::npos)
      << ctx["dp_gradients"];
  EXPECT_EQ(ctx["model_inputs"], "4x128:int64[0,50257)");
  // Each model file by its path and content.
  const std::string file = testing::TempDir() + "/ltb_context_model.pt";
  std::ofstream(file) << "a model";
  o.families.model_files = {file, "/no/such/model.pt2"};
  ctx = AsMap(SettingsContext(o, c, "glibc", 1));
  EXPECT_EQ(ctx["model_1"], file);
  EXPECT_EQ(ctx["model_1_sha256"].size(), 64u) << ctx["model_1_sha256"];
  EXPECT_EQ(ctx["model_2"], "/no/such/model.pt2");
  EXPECT_TRUE(absl::StartsWith(ctx["model_2_sha256"], "unreadable: "))
      << ctx["model_2_sha256"];
  EXPECT_EQ(ctx["model_flops_per_step"], "3.6e9");
}

}  // namespace
}  // namespace ltb
