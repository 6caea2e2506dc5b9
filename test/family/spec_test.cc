#include "family/spec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <regex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "family/registry.h"
#include "models/decoder_family.h"
#include "models/ops.h"
#include "spec_for.h"
#include "suite/sweep.h"

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

TEST(BenchSpecName, Tf32FollowsTheDtype) {
  BenchSpec s = TransformerSpec();
  s.device = c10::Device(c10::kCUDA, 0);
  s.tf32 = true;
  s.sync = false;
  EXPECT_EQ(s.Name(), "Transformer/small/cuda/forward/batch:4/seq:512/fp32/tf32/nosync");
}

// The names `sweep` registers, and the specs an axis selects (`on`); each of
// those must have its plain twin, the same spec with the axis off (`off`).
std::set<std::string> ExpandAxis(const Sweep& sweep,
                                 const std::function<bool(const BenchSpec&)>& on,
                                 const std::function<void(BenchSpec*)>& off,
                                 std::vector<BenchSpec>* selected) {
  static const std::vector<Family>* families =
      new std::vector<Family>(RegisteredFamilies(true).value());
  std::set<std::string> names, plain_twins;
  for (const Registration& r : ExpandSweep(*families, sweep)) {
    names.insert(r.spec.Name());
    if (!on(r.spec)) continue;
    selected->push_back(r.spec);
    BenchSpec plain = r.spec;
    off(&plain);
    plain_twins.insert(plain.Name());
  }
  EXPECT_FALSE(selected->empty());
  for (const std::string& twin : plain_twins) EXPECT_TRUE(names.count(twin)) << twin;
  return names;
}

TEST(ExpandSweep, Tf32IsAnAxisOfFp32OnDevicesThatHaveIt) {
  Sweep sweep;
  sweep.devices = {c10::Device(c10::kCPU), c10::Device(c10::kCUDA, 0)};
  sweep.dtypes = {c10::kFloat, c10::kBFloat16};
  sweep.tf32 = {false, true};
  std::vector<BenchSpec> tf32;
  const std::set<std::string> names = ExpandAxis(
      sweep, [](const BenchSpec& s) { return s.tf32; },
      [](BenchSpec* s) { s->tf32 = false; }, &tf32);
  for (const BenchSpec& s : tf32) {
    EXPECT_TRUE(s.device.is_cuda()) << s.Name();
    EXPECT_EQ(s.dtype, c10::kFloat) << s.Name();
  }
  EXPECT_TRUE(names.count("Ops/matmul/2048x2048/cuda/fp32/tf32"));
  EXPECT_TRUE(names.count("Ops/matmul/2048x2048/cuda/fp32"));
  EXPECT_TRUE(names.count("ResNet/resnet18/cuda/train_step/batch:32/fp32/tf32"));
  EXPECT_FALSE(
      names.count("Ops/copy/256MiB/cuda/fp32/tf32"));  // no matmul to run as TF32
  EXPECT_FALSE(names.count("Ops/matmul/2048x2048/cpu/fp32/tf32"));
  EXPECT_FALSE(names.count("Ops/matmul/2048x2048/cuda/bf16/tf32"));
}

TEST(BenchSpecName, GraphEndsTheNameBeforeNosync) {
  BenchSpec s = TransformerSpec();
  s.device = c10::Device(c10::kCUDA, 0);
  s.graph = true;
  EXPECT_EQ(s.Name(), "Transformer/small/cuda/forward/batch:4/seq:512/fp32/graph");
  s.sync = false;
  s.dtype = c10::kBFloat16;
  EXPECT_EQ(s.Name(), "Transformer/small/cuda/forward/batch:4/seq:512/bf16/graph/nosync");
}

TEST(ExpandSweep, BucketCapNamesDataParallelTrainingOnlyWhenNotTheDefault) {
  const std::vector<Family> families = RegisteredFamilies(true).value();
  Sweep sweep;
  sweep.devices = {c10::Device(c10::kCPU)};
  sweep.bucket_mb = 4;
  // Without a process group there are no buckets: nothing to name.
  for (const Registration& r : ExpandSweep(families, sweep)) {
    EXPECT_FALSE(absl::StrContains(r.spec.Name(), "bucket_mb")) << r.spec.Name();
  }
  sweep.process_group = true;  // one rank's, --force_process_group
  std::set<std::string> names;
  for (const Registration& r : ExpandSweep(families, sweep)) names.insert(r.spec.Name());
  EXPECT_TRUE(names.count(
      "Transformer/nano/cpu/train_step/batch:4/seq:512/fp32/bucket_mb:4/ranks:1"));
  EXPECT_TRUE(names.count("Transformer/nano/cpu/forward/batch:4/seq:512/fp32"));
  sweep.bucket_mb = 25;
  for (const Registration& r : ExpandSweep(families, sweep)) {
    EXPECT_FALSE(absl::StrContains(r.spec.Name(), "bucket_mb")) << r.spec.Name();
  }
}

TEST(ExpandSweep, RanksNameDataParallelTrainingOverMoreThanOneRank) {
  // Each rank runs --batch: two ranks' step does twice one's work.
  const std::vector<Family> families = RegisteredFamilies(true).value();
  Sweep sweep;
  sweep.devices = {c10::Device(c10::kCPU)};
  sweep.world_size = 2;
  sweep.process_group = true;
  sweep.sync = false;
  std::set<std::string> names;
  for (const Registration& r : ExpandSweep(families, sweep)) names.insert(r.spec.Name());
  EXPECT_TRUE(
      names.count("Transformer/nano/cpu/train_step/batch:4/seq:512/fp32/nosync/ranks:2"));
  // Inference runs on each rank alone.
  EXPECT_TRUE(names.count("Transformer/nano/cpu/forward/batch:4/seq:512/fp32/nosync"));
  for (const std::string& name : names) {
    if (absl::StartsWith(name, "Selftest/")) continue;  // a data-parallel forward
    EXPECT_EQ(absl::StrContains(name, "/ranks:2"), absl::StrContains(name, "/train_"))
        << name;
  }
  // One rank in a process group (--force_process_group) averages through
  // it, which a plain run does not: /ranks:1, not a plain run's name.
  sweep.world_size = 1;
  names.clear();
  for (const Registration& r : ExpandSweep(families, sweep)) names.insert(r.spec.Name());
  EXPECT_TRUE(
      names.count("Transformer/nano/cpu/train_step/batch:4/seq:512/fp32/nosync/ranks:1"));
  sweep.process_group = false;
  for (const Registration& r : ExpandSweep(families, sweep)) {
    EXPECT_FALSE(absl::StrContains(r.spec.Name(), "ranks:")) << r.spec.Name();
  }
}

TEST(ExpandSweep, GraphsAreAnAxisOfInferenceOnDevicesThatHaveThem) {
  Sweep sweep;
  sweep.devices = {c10::Device(c10::kCPU), c10::Device(c10::kCUDA, 0)};
  sweep.dtypes = {c10::kFloat, c10::kBFloat16};
  sweep.graphs = {false, true};
  std::vector<BenchSpec> graphs;
  const std::set<std::string> names = ExpandAxis(
      sweep, [](const BenchSpec& s) { return s.graph; },
      [](BenchSpec* s) { s->graph = false; }, &graphs);
  for (const BenchSpec& s : graphs) {
    EXPECT_TRUE(s.device.is_cuda()) << s.Name();
    EXPECT_FALSE(s.training()) << s.Name();
  }
  EXPECT_TRUE(names.count("Transformer/small/cuda/forward/batch:4/seq:512/bf16/graph"));
  EXPECT_TRUE(names.count("Ops/matmul/2048x2048/cuda/bf16/graph"));
  EXPECT_TRUE(names.count("Ops/copy/256MiB/cuda/fp32/graph"));  // a device-side copy
  for (const std::string& name : names) {
    if (!absl::EndsWith(name, "/graph")) continue;
    // Not training, not transfers that wait for the host, not an empty step,
    // not Whisper's transcription (the host reads when it ends).
    EXPECT_FALSE(absl::StrContains(name, "train")) << name;
    EXPECT_FALSE(absl::StrContains(name, "h2d") || absl::StrContains(name, "d2h"))
        << name;
    EXPECT_FALSE(absl::StrContains(name, "noop")) << name;
    EXPECT_FALSE(absl::StrContains(name, "transcribe")) << name;
  }
  // Generation: its decode steps are graphed.
  bool generate = false;
  for (const std::string& name : names) {
    generate |= absl::StartsWith(name, "GPT2/") &&
                absl::StrContains(name, "/generate/") && absl::EndsWith(name, "/graph");
  }
  EXPECT_TRUE(generate);
}

TEST(BenchSpecName, OpsPutTheShapeBeforeTheDevice) {
  EXPECT_EQ(SpecFor("Ops", "matmul", "2048x2048").Name(),
            "Ops/matmul/2048x2048/cpu/fp32");
}

TEST(ParseDtype, KnowsThreePrecisions) {
  for (c10::ScalarType t : {c10::kFloat, c10::kBFloat16, c10::kHalf}) {
    EXPECT_EQ(ParseDtype(DtypeName(t)).value(), t);
  }
  const auto bad = ParseDtype("fp64");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("valid: fp32, bf16, fp16"), std::string::npos);
}

// How many benchmarks a case gives under `sweep`, counted from its case and
// phase alone: the independent count ExpandSweep must agree with.
size_t CaseCount(const Family& f, const Case& c, const Sweep& sweep) {
  size_t count = 0;
  for (const c10::Device& d : sweep.devices) {
    if (c.needs_host_transfers && !d.is_cuda()) continue;
    const size_t dtypes = c.sweeps_dtype ? sweep.dtypes.size() : 1;
    const size_t batches = c.phase.shape == Shape::kNone ? 1 : sweep.batches.size();
    const std::vector<int64_t>& seqs = f.default_seqs;
    size_t lengths = 1;
    if (c.phase.shape == Shape::kSequence) {
      lengths = sweep.seqs.empty() ? seqs.size() : sweep.seqs.size();
    } else if (c.phase.shape == Shape::kGenerate) {
      lengths = (c.fixed_prompt > 0 ? 1 : sweep.prompts.size()) *
                std::max<size_t>(sweep.new_tokens.size(), 1);
    }
    const size_t formats = f.sweeps_memory_format ? sweep.channels_last.size() : 1;
    count += dtypes * batches * lengths * formats;
  }
  return count;
}

TEST(ExpandSweep, CrossesEveryListForEveryRegisteredFamily) {
  const std::vector<Family> families = RegisteredFamilies(true).value();
  Sweep sweep;
  sweep.devices = {c10::Device(c10::kCPU), c10::Device(c10::kCUDA, 0)};
  sweep.batches = {1, 8};
  sweep.prompts = {16, 32};
  sweep.dtypes = {c10::kFloat, c10::kBFloat16};
  sweep.channels_last = {false, true};
  const std::vector<Registration> regs = ExpandSweep(families, sweep);
  size_t expected = 0;
  for (const Family& f : families) {
    size_t family_count = 0;
    for (const Case& c : f.Cases()) family_count += CaseCount(f, c, sweep);
    EXPECT_GT(family_count, 0u) << f.name;
    const size_t registered = std::count_if(
        regs.begin(), regs.end(), [&](const Registration& r) { return r.family == &f; });
    EXPECT_EQ(registered, family_count) << f.name;
    expected += family_count;
  }
  EXPECT_EQ(regs.size(), expected);
  std::set<std::string> names;
  for (const Registration& r : regs) names.insert(r.spec.Name());
  EXPECT_EQ(names.size(), regs.size()) << "names must be unique";
  EXPECT_TRUE(names.count("Transformer/2.7B/cuda/train_step/batch:8/seq:512/bf16"));
  EXPECT_TRUE(names.count("Ops/matmul/2048x2048/cuda/bf16"));
  EXPECT_TRUE(names.count("ResNet/nano/cpu/forward/batch:1/bf16/channels_last"));
  EXPECT_TRUE(names.count("GPT2/nano/cuda/generate/batch:8/prompt:16/new:100/fp32"));
  // Outside the default suite the CPU runs the card's shapes too.
  EXPECT_TRUE(names.count("GPT2/nano/cpu/generate/batch:8/prompt:16/new:100/fp32"));
  EXPECT_TRUE(names.count("Transformer/small/cpu/train_step/batch:8/seq:512/fp32"));
  EXPECT_FALSE(names.count("Ops/noop/empty/cpu/bf16"));
  EXPECT_FALSE(names.count("Ops/h2d_pinned/256MiB/cpu/fp32"));
}

TEST(ExpandSweep, OnlyTheDefaultSuiteRunsSmallerCpuShapesAndRunsThemEverywhere) {
  const std::vector<Family> families = {TransformerFamily()};
  const Family& f = families[0];
  ASSERT_GT(f.suite_cpu_batch, 0);
  ASSERT_FALSE(f.suite_cpu_seqs.empty());
  const std::string cpu_shape =
      absl::StrCat("batch:", f.suite_cpu_batch, "/seq:", f.suite_cpu_seqs[0]);
  const std::string usual_shape =
      absl::StrCat("batch:", f.default_batch, "/seq:", f.default_seqs[0]);
  ASSERT_NE(cpu_shape, usual_shape);
  const auto names = [&](bool default_suite) {
    Sweep sweep;
    sweep.devices = {c10::Device(c10::kCPU), c10::Device(c10::kCUDA, 0)};
    sweep.default_suite = default_suite;
    std::set<std::string> out;
    for (const Registration& r : ExpandSweep(families, sweep)) {
      if (r.spec.size == "small" && r.spec.phase == "forward") out.insert(r.spec.Name());
    }
    return out;
  };
  const std::string cuda_usual =
      "Transformer/small/cuda/forward/" + usual_shape + "/fp32";
  const std::string cuda_cpu = "Transformer/small/cuda/forward/" + cpu_shape + "/fp32";
  // A filter or a sweep: the card's shapes on every device.
  EXPECT_EQ(names(false),
            (std::set<std::string>{
                "Transformer/small/cpu/forward/" + usual_shape + "/fp32", cuda_usual}));
  // The default suite: the CPU's smaller shapes, and the CPU's work on the
  // GPU too.
  EXPECT_EQ(names(true),
            (std::set<std::string>{"Transformer/small/cpu/forward/" + cpu_shape + "/fp32",
                                   cuda_usual, cuda_cpu}));
  // Without the CPU in the run, or with shapes given, no twins.
  Sweep gpu_only;
  gpu_only.devices = {c10::Device(c10::kCUDA, 0)};
  gpu_only.default_suite = true;
  size_t forward = 0;
  for (const Registration& r : ExpandSweep(families, gpu_only)) {
    forward += r.spec.size == "small" && r.spec.phase == "forward";
  }
  EXPECT_EQ(forward, f.default_seqs.size());
  Sweep given;
  given.devices = {c10::Device(c10::kCPU), c10::Device(c10::kCUDA, 0)};
  given.default_suite = true;
  given.batches = {2};
  given.seqs = {64};
  std::set<std::string> both;
  for (const Registration& r : ExpandSweep(families, given)) {
    if (r.spec.size == "small" && r.spec.phase == "forward") both.insert(r.spec.Name());
  }
  EXPECT_EQ(both, (std::set<std::string>{
                      "Transformer/small/cpu/forward/batch:2/seq:64/fp32",
                      "Transformer/small/cuda/forward/batch:2/seq:64/fp32"}));
}

TEST(ExpandSweep, SpecsCarryTheirPhasesKindAndIterations) {
  const std::vector<Family> families = RegisteredFamilies(true).value();
  Sweep sweep;
  sweep.devices = {c10::Device(c10::kCPU)};
  for (const Registration& r : ExpandSweep(families, sweep)) {
    const Case c = r.family->FindCase(r.spec.size, r.spec.phase).value();
    EXPECT_EQ(r.spec.kind, c.phase.kind) << r.spec.Name();
    EXPECT_EQ(r.spec.iterations, c.phase.iterations) << r.spec.Name();
    EXPECT_EQ(r.spec.data_parallel, c.phase.data_parallel) << r.spec.Name();
    EXPECT_EQ(r.unit, c.unit) << r.spec.Name();
  }
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

TEST(DefaultSuiteFilter, LeavesOutTheMembersSuiteSkipNames) {
  const std::vector<Family> families = RegisteredFamilies().value();
  const std::regex all(DefaultSuiteFilter(families));
  const std::regex skipped(DefaultSuiteFilter(families, {"Llama/8B"}).value());
  const std::string b8 =
      "Llama/8B/cuda/generate/batch:1/prompt:32/new:128/fp32/manual_time";
  const std::string b1 =
      "Llama/1B/cuda/generate/batch:1/prompt:32/new:128/fp32/manual_time";
  const std::string gpt2 = "GPT2/small/cpu/forward/batch:4/seq:512/fp32/manual_time";
  EXPECT_TRUE(std::regex_search(b8, all));
  EXPECT_FALSE(std::regex_search(b8, skipped));
  EXPECT_TRUE(std::regex_search(b1, skipped));
  EXPECT_TRUE(std::regex_search(gpt2, skipped));
  // A whole family's membership, and errors naming the members.
  const std::regex no_ops(
      DefaultSuiteFilter(families, {"Ops/matmul", "Ops/copy"}).value());
  EXPECT_FALSE(std::regex_search("Ops/matmul/2048x2048/cuda/fp32/manual_time", no_ops));
  EXPECT_TRUE(std::regex_search("Ops/noop/empty/cuda/fp32/manual_time", no_ops));
  const absl::StatusOr<std::string> bad = DefaultSuiteFilter(families, {"Llama/70B"});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "Llama/70B is not a member"))
      << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "Llama/1B, Llama/8B"))
      << bad.status();
  const absl::StatusOr<std::string> none =
      DefaultSuiteFilter({OpsFamily()}, {"Ops/matmul", "Ops/copy", "Ops/noop"});
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::StrContains(none.status().message(), "leaves nothing"))
      << none.status();
}

TEST(DevicesNamedIn, FindsDevicesInAFilter) {
  const auto devices = DevicesNamedIn("Transformer/small/(cuda|mps)|Ops/.*/cuda:2/");
  EXPECT_EQ(devices.size(), 3u);
  EXPECT_TRUE(DevicesNamedIn("Transformer/small/cpu").empty());
}

TEST(DtypesNamedIn, FindsDtypesThatArePartsOfANameOnly) {
  EXPECT_EQ(DtypesNamedIn("Llama/1B/cpu/generate/.*/bf16"),
            (std::vector<c10::ScalarType>{c10::kBFloat16}));
  EXPECT_EQ(DtypesNamedIn("GPT2/small/.*/(fp16|fp32)/"),
            (std::vector<c10::ScalarType>{}));  // inside a group: not a whole part
  EXPECT_EQ(DtypesNamedIn("/fp16/|/fp32/"),
            (std::vector<c10::ScalarType>{c10::kFloat, c10::kHalf}));
  EXPECT_TRUE(DtypesNamedIn("Transformer/small/cpu").empty());
  EXPECT_TRUE(DtypesNamedIn("Llama/xbf16y").empty());
}

TEST(ExpandSweep, DepthIsAnAxisOfGenerationOfTheFamiliesThatHaveIt) {
  const std::vector<Family> families = RegisteredFamilies().value();
  Sweep sweep;
  sweep.devices = {c10::Device(c10::kCPU)};
  sweep.new_tokens = {16};
  sweep.depths = {0, 1024};
  std::set<std::string> names;
  for (const Registration& r : ExpandSweep(families, sweep)) names.insert(r.spec.Name());
  // Depth 0 keeps its name; another depth follows new:N.
  EXPECT_TRUE(names.count("Llama/1B/cpu/generate/batch:1/prompt:32/new:16/fp32"));
  EXPECT_TRUE(
      names.count("Llama/1B/cpu/generate/batch:1/prompt:32/new:16/depth:1024/fp32"));
  EXPECT_TRUE(
      names.count("GPT2/small/cpu/generate/batch:1/prompt:32/new:16/depth:1024/fp32"));
  // Not an axis of the other phases, nor of Whisper's generation.
  for (const std::string& name : names) {
    if (absl::StrContains(name, "/depth:")) {
      EXPECT_TRUE(absl::StrContains(name, "/generate/")) << name;
      EXPECT_FALSE(absl::StartsWith(name, "Whisper/")) << name;
    }
  }
}

TEST(BenchSpecName, WeightsNameTheCheckpointAndOtherFamiliesRefuseThem) {
  BenchSpec s = SpecFor("Llama", "1B", "forward", 1, 8);
  s.weights = "/models/Llama-3.2-1B/model.safetensors";
  EXPECT_EQ(s.Name(), "Llama/1B/cpu/forward/batch:1/seq:8/fp32/weights:Llama-3.2-1B");
  const std::vector<Family> families = RegisteredFamilies().value();
  const Family* resnet = FindFamily(families, "ResNet").value();
  BenchSpec r = SpecFor("ResNet", "resnet18", "forward", 1, 0);
  r.weights = "x.safetensors";
  const absl::StatusOr<Plan> plan = resnet->PlanFor(r);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(
      plan.status().message(),
      "ResNet does not load --weights; the families that do: Transformer, GPT2, Llama");
}

// Server's p99 bounds decide its validity, goodput and found peak: two runs
// at other bounds are two benchmarks; LoadGen's own 100 ms keeps the name.
TEST(BenchSpecName, ServerBoundsOtherThanLoadGensAreInTheName) {
  BenchSpec s = SpecFor("GPT2", "small", "forward", 8, 64);
  s.phase = kServe;
  s.serve.scenario = "Server";
  s.serve.max_batch = 8;
  const std::string plain =
      "GPT2/small/cpu/serve/scenario:Server/qps:10/max_batch:8/seq:64/fp32";
  EXPECT_EQ(s.Name(), plain);
  s.serve.latency_bound_ms = kLoadGenBoundMs;
  EXPECT_EQ(s.Name(), plain);
  s.serve.latency_bound_ms = 37.5;
  EXPECT_EQ(s.Name(),
            "GPT2/small/cpu/serve/scenario:Server/qps:10/max_batch:8/seq:64/"
            "latency_bound_ms:37.5/fp32");
  s.serve.find_peak = true;
  EXPECT_EQ(s.Name(),
            "GPT2/small/cpu/serve/scenario:Server/find_peak_from:10/max_batch:8/seq:64/"
            "latency_bound_ms:37.5/fp32");
  // Other scenarios have no bound to meet.
  s.serve.scenario = "Offline";
  EXPECT_EQ(s.Name(), "GPT2/small/cpu/serve/scenario:Offline/max_batch:8/seq:64/fp32");
  // Offline's one query holds the minimum count (32), or 1.1 x the expected
  // rate x the minimum duration where more (LoadGen's sizing): named by
  // its samples where they are not the defaults' 32.
  const auto offline = [&](double qps, double min_s, int64_t min_queries) {
    BenchSpec o = s;
    o.serve.target_qps = qps;
    o.serve.min_s = min_s;
    o.serve.min_queries = min_queries;
    return std::make_pair(OfflineQuerySamples(o.serve), o.Name());
  };
  const std::string at = "GPT2/small/cpu/serve/scenario:Offline/";
  EXPECT_EQ(offline(2000, 1, 32),
            std::make_pair(int64_t{2200}, at + "samples:2200/max_batch:8/seq:64/fp32"));
  // 20 QPS for a second is 22 samples: the 32 hold, as by default.
  EXPECT_EQ(offline(20, 1, 32),
            std::make_pair(int64_t{32}, at + "max_batch:8/seq:64/fp32"));
  EXPECT_EQ(offline(10, 1, 200),
            std::make_pair(int64_t{200}, at + "samples:200/max_batch:8/seq:64/fp32"));
  EXPECT_EQ(offline(10, 3, 32),
            std::make_pair(int64_t{33}, at + "samples:33/max_batch:8/seq:64/fp32"));
  // Whole milliseconds, truncated: 2.09 ms is 2, and 1.1 x 0.002 s x 1e6 QPS
  // is 2200 (not 2299).
  EXPECT_EQ(offline(1e6, 0.00209, 1).first, 2200);
  EXPECT_EQ(offline(0, 0, 1).first, 1);

  BenchSpec g = SpecFor("GPT2", "small", "generate", 8, 0);
  g.phase = kServe;
  g.prompt = 32;
  g.new_tokens = 100;
  g.serve.scenario = "Server";
  g.serve.max_batch = 8;
  g.serve.ttft_bound_ms = 250;
  g.serve.tpot_bound_ms = kLoadGenBoundMs;
  EXPECT_EQ(
      g.Name(),
      "GPT2/small/cpu/serve/scenario:Server/qps:10/max_batch:8/prompt:32/output:100/"
      "ttft_bound_ms:250/fp32");
  g.serve.tpot_bound_ms = 20;
  EXPECT_EQ(
      g.Name(),
      "GPT2/small/cpu/serve/scenario:Server/qps:10/max_batch:8/prompt:32/output:100/"
      "ttft_bound_ms:250/tpot_bound_ms:20/fp32");
}

// An epoch read from storage reads a file a shard: their size is how it
// reads, in the name where it is not the default; from memory it is none.
TEST(BenchSpecName, ShardSizeNamesAnEpochFromDiskOnly) {
  BenchSpec s = SpecFor("EncDec", "tiny", "train_epoch", 16, 128);
  s.iterations = Iterations::kEpochs;
  s.epochs.shard_mb = 1;
  EXPECT_EQ(s.Name(), "EncDec/tiny/cpu/train_epoch/batch:16/seq:128/fp32");
  s.epochs.data = "disk";
  EXPECT_EQ(s.Name(),
            "EncDec/tiny/cpu/train_epoch/batch:16/seq:128/fp32/data:disk/shard_mb:1");
  s.epochs.shard_mb = kDefaultShardMb;
  EXPECT_EQ(s.Name(), "EncDec/tiny/cpu/train_epoch/batch:16/seq:128/fp32/data:disk");
}

// A model file run on --inputs of the user's computes on other shapes than
// its own: the name says which.
TEST(BenchSpecName, AModelFilesGivenInputsAreInTheName) {
  BenchSpec s = SpecFor("Model", "usernet", "forward", 4, 0);
  s.backend = "torchscript";
  EXPECT_EQ(s.Name(), "Model/usernet/cpu/forward/batch:4/fp32/torchscript");
  s.inputs = "4x128:int64[0,50257)";
  EXPECT_EQ(
      s.Name(),
      "Model/usernet/cpu/forward/batch:4/fp32/torchscript/inputs:4x128:int64[0,50257)");
}

}  // namespace
}  // namespace ltb
