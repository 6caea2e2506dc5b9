#include "suite/suite.h"

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <tuple>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/digest.h"
#include "base/interrupt.h"
#include "base/threads.h"
#include "base/torch_compat.h"
#include "device/cpu_isa.h"
#include "device/device.h"
#include "distributed/distributed.h"
#include "family/registry.h"
#include "measure/memory.h"
#include "measure/runner.h"
#include "peaks/peaks.h"
#include "report/context.h"
#include "report/reporters.h"
#include "report/summary.h"
#include "suite/compiled.h"
#include "suite/facts.h"
#include "suite/sweep.h"
#include "workloads/model_file.h"

namespace ltb {
namespace {

// The context's "precision": what a dtype in a name means in each kind of
// phase; tools/ltb/pysuite/context.py says the same.
constexpr char kPrecision[] =
    "inference phases: weights, activations and caches in the dtype; training phases "
    "(/bf16, /fp16): fp32 weights, forward and loss under autocast to the dtype, fp16 "
    "with dynamic loss scaling";

constexpr int kUsageError = 2;

// Whether `path` can be written: the file if it exists, else its directory.
absl::Status CheckWritableFile(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const char* reason = nullptr;
  if (fs::is_directory(p, ec)) {
    reason = "it is a directory";
  } else if (fs::exists(p, ec)) {
    if (::access(path.c_str(), W_OK) != 0) reason = std::strerror(errno);
  } else if (!fs::is_directory(dir, ec)) {
    reason = "its directory does not exist";
  } else if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    reason = std::strerror(errno);
  } else {
    // access() answers for permissions alone (root passes every check), not
    // for a file system that makes no files (/proc, a read-only mount):
    // making the file, and removing it, is the only sure test.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      reason = std::strerror(errno);
    } else {
      ::close(fd);
      ::unlink(path.c_str());
    }
  }
  if (reason == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("cannot write --", flag, "=", path, ": ", reason));
}

absl::Status CheckWritableDirectory(const std::string& flag, const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create --", flag, "=", path, ": ", ec.message()));
  }
  if (::access(path.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write in --", flag, "=", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status CheckFilter(const std::string& filter) {
  if (filter == "all") return absl::OkStatus();
  // Google Benchmark compiles the filter as an extended regex, less a leading
  // '-' that negates it; a bad one would run nothing, silently.
  try {
    std::regex(filter[0] == '-' ? filter.substr(1) : filter, std::regex::extended);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("--benchmark_filter='", filter,
                     "' is not a valid regular expression: ", e.what()));
  }
  return absl::OkStatus();
}

void Warn(const CommandLine& command_line) {
  if (!command_line.quiet_rank) std::cerr << DeviceSummary();
  if (!BuiltOptimized()) {
    std::cerr << "***WARNING*** bench was built without optimisation; timings are not "
                 "representative. Build with -DCMAKE_BUILD_TYPE=Release.\n";
  }
  if (!command_line.quiet_rank && ReferenceBlasLoaded()) {
    std::cerr << "***WARNING*** LibTorch's matmuls run on the reference BLAS ("
              << BlasLibrary()
              << "), single-threaded and unvectorised: they are tens of times slower "
                 "than on an optimised BLAS. On Debian, install libopenblas0-pthread "
                 "and its libblas.so.3 replaces this one.\n";
  }
}

// Data-parallel training steps each rank measures when --steps is not given.
constexpr int kDataParallelSteps = 10;

// The fixed iteration count of a benchmark; 0 when timed. An epoch is one
// iteration; data-parallel ranks must all take the same number of steps, so
// those counts are fixed rather than timed.
int64_t FixedIterations(const BenchSpec& spec, const SuiteOptions& o, int world_size) {
  if (spec.iterations == Iterations::kEpochs) return o.measured_epochs;
  if (spec.serving()) return 1;  // one LoadGen test
  if (o.steps > 0) return o.steps;
  if (world_size > 1 && spec.data_parallel) return kDataParallelSteps;
  return 0;
}

// The name Google Benchmark gives a registered benchmark, which the filter sees.
std::string FullName(const BenchSpec& spec, int64_t iterations) {
  std::string name = spec.Name();
  if (iterations > 0) absl::StrAppend(&name, "/iterations:", iterations);
  return name + "/manual_time";
}

// Peaks for mfu/mbu, determined before anything is timed, for the devices
// and dtypes of the benchmarks the filter selects. Other ranks do not
// report, and measuring on every rank at once would split the cores.
void PreparePeaks(const std::vector<Registration>& registrations,
                  const std::string& filter, const SuiteOptions& o, int world_size,
                  Peaks* peaks) {
  for (const Registration& r : registrations) {
    std::string why;
    if (!FilterSelects(filter,
                       FullName(r.spec, FixedIterations(r.spec, o, world_size))) ||
        !DeviceAvailable(r.spec.device, &why) ||
        !DtypeRuns(r.spec.device, r.spec.dtype, &why)) {
      continue;
    }
    absl::StatusOr<Plan> plan = r.family->PlanFor(r.spec);
    if (!plan.ok()) continue;
    const bool bandwidth = plan->MemoryBound() || plan->reports_weight_bandwidth;
    if (plan->flops_per_step <= 0 && !plan->counts_flops_when_built && !bandwidth)
      continue;
    peaks->Prepare(r.spec.device, r.spec.dtype, bandwidth, r.spec.tf32);
  }
}

// Google Benchmark's registry holds lambdas pointing at `runner` and at the
// registrations' families: both must outlive the run.
void AddToGoogleBenchmark(const std::vector<Registration>& registrations,
                          const SuiteOptions& o, int world_size, Runner* runner) {
  for (const Registration& r : registrations) {
    const Family* family = r.family;
    const BenchSpec spec = r.spec;
    benchmark::internal::Benchmark* b =
        benchmark::RegisterBenchmark(spec.Name().c_str(),
                                     [family, spec, runner](benchmark::State& state) {
                                       runner->Run(state, *family, spec);
                                     })
            ->UseManualTime()
            ->Unit(r.unit);
    if (const int64_t n = FixedIterations(spec, o, world_size); n > 0) b->Iterations(n);
  }
}

// Why a filter that matched nothing matched nothing, where it is anchored
// and its first parts are plain names (^NoSuchModel, ^GPT2/huge/): the
// family or size it names that is none, and the valid ones; "" otherwise
// (an unanchored filter searches anywhere in the names).
std::string UnknownNameIn(const std::string& filter,
                          const std::vector<Family>& families) {
  if (!absl::StartsWith(filter, "^")) return "";
  const std::vector<std::string> parts = absl::StrSplit(filter.substr(1), '/');
  const auto plain = [](const std::string& part) {
    return !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
  };
  if (parts.empty() || !plain(parts[0])) return "";
  std::vector<std::string> family_names;
  const Family* family = nullptr;
  bool names_one = false;  // "^GPT" begins GPT2's names; "^GPT/" none
  for (const Family& f : families) {
    family_names.push_back(f.name);
    if (f.name == parts[0]) family = &f;
    names_one = names_one || f.name == parts[0] ||
                (parts.size() == 1 && absl::StartsWith(f.name, parts[0]));
  }
  if (!names_one) {
    return absl::StrCat("no family is called '", parts[0],
                        "'; families: ", absl::StrJoin(family_names, ", "));
  }
  if (family == nullptr || parts.size() < 2 || !plain(parts[1]) ||
      std::find(family->sizes.begin(), family->sizes.end(), parts[1]) !=
          family->sizes.end()) {
    return "";
  }
  return absl::StrCat("no ", family->name, " benchmark is named ", family->name, "/",
                      parts[1], "/...; after ", family->name,
                      "/ come: ", absl::StrJoin(family->sizes, ", "));
}

void AddContext(const SuiteOptions& o, const CommandLine& command_line,
                const std::string& malloc_description, int world_size) {
  // The peaks are added by the reporters (LateContextReporter): a benchmark
  // may raise a measured one.
  for (const auto& [key, value] :
       CollectContext(SettingsContext(o, command_line, malloc_description, world_size))) {
    benchmark::AddCustomContext(key, value);
  }
}

}  // namespace

absl::Status CheckWritablePaths(const SuiteOptions& options,
                                const CommandLine& command_line) {
  if (command_line.list_only) return absl::OkStatus();
  if (!command_line.out.empty() && !command_line.quiet_rank) {
    if (absl::Status s = CheckWritableFile("benchmark_out", command_line.out); !s.ok()) {
      return s;
    }
  }
  if (!options.run.profile_dir.empty()) {
    if (absl::Status s = CheckWritableDirectory("profile", options.run.profile_dir);
        !s.ok()) {
      return s;
    }
  }
  if (!options.sweep.serve_scenarios.empty() && !options.sweep.serve.log_dir.empty()) {
    if (absl::Status s =
            CheckWritableDirectory("serve_log_dir", options.sweep.serve.log_dir);
        !s.ok()) {
      return s;
    }
  }
  if (options.epochs.data == "disk") {
    return CheckWritableDirectory("data_dir", options.epochs.data_dir);
  }
  return absl::OkStatus();
}

void ExitWithUsageError(const absl::Status& status) {
  std::fprintf(stderr, "bench: %s\n", std::string(status.message()).c_str());
  std::exit(kUsageError);
}

Context SettingsContext(const SuiteOptions& o, const CommandLine& command_line,
                        const std::string& malloc_description, int world_size) {
  const std::string unused =
      CurrentProcessGroup() == nullptr
          ? "not used, no process group (several ranks or --force_process_group make "
            "one); with one: "
          : "";
  Context extra = {
      {"malloc", malloc_description},
      {"sync", o.sweep.sync ? "true" : "false (clock read without device sync)"},
      {"min_time",
       DefaultSuiteMinTime(command_line)
           ? absl::StrCat(kDefaultSuiteMinTime, " s (the default suite's)")
       : command_line.min_time_given
           ? absl::StrCat("as given: --benchmark_min_time=", command_line.min_time)
           : "Google Benchmark's 0.5 s (no --benchmark_min_time)"},
      // Data-parallel ranks in a group warm up by count alone, in lockstep
      // (measure/warmup.cc).
      {"warmup", absl::StrCat(">= ", o.run.warmup_steps,
                              " steps and >= ", o.run.warmup_seconds, " s",
                              CurrentProcessGroup() == nullptr
                                  ? ""
                                  : absl::StrCat("; data-parallel training phases: ",
                                                 o.run.warmup_steps, " steps"))},
      {"warmup_epochs", absl::StrCat(o.run.warmup_epochs,
                                     " (train_epoch: whole epochs before the measured "
                                     "ones)")},
      {"seed", absl::StrCat(o.run.seed)},
      // Inference phases run under c10::InferenceMode (workloads/phases.cc,
      // generation.cc); tools/pybench records its own, and the C++ and
      // Python comparison names a difference.
      {"grad_mode", "inference_mode"},
      // What /bf16 and /fp16 mean, which differs by phase (docs/flags.md,
      // "Precision").
      {"precision", kPrecision},
      {"memory_guard",
       o.run.memory_guard
           ? "on: a benchmark whose estimate does not fit is refused before it is built"
           : "off (--memory_guard=false): a benchmark that does not fit runs into the "
             "device's out-of-memory error"},
      {"world_size", absl::StrCat(world_size)},
      {"process_group",
       CurrentProcessGroup() == nullptr
           ? "none"
           : absl::StrCat(BackendOf(CurrentProcessGroup()->device()).CollectivesName(),
                          ", ", world_size, world_size == 1 ? " rank" : " ranks")},
      // What a process group would do, said as unused where there is none.
      {"dp_gradients",
       absl::StrCat(
           unused,
           LTB_HAS_REDUCER
               ? absl::StrCat("c10d::Reducer (Python DDP's engine): ", o.sweep.bucket_mb,
                              " MB buckets (1 MB first), all-reduced during the "
                              "backward, gradients as bucket views")
               : absl::StrCat("all-reduce of ", o.sweep.bucket_mb,
                              " MB buckets after the backward (this LibTorch's "
                              "c10d::Reducer is not used: it needs " LTB_REDUCER_VERSION
                              ")"))},
      {"dp_buffers",
       absl::StrCat(
           unused,
           "rank 0's buffers (BatchNorm statistics, ...) broadcast to every rank "
           "before each forward that averages gradients, in 250 MB buckets "
           "(Python DDP's broadcast_buffers=True, its default, in a run of "
           "averaging steps)")},
      {"cpu_linear",
       "aten: LibTorch's default linear path; names ending in /onednn: linear weights "
       "packed once for oneDNN (CPU inference)"},
      {"quant",
       "names ending in /int8, /int4:gN or /int8dyn: linear weights (and the output "
       "head) quantised once before the timed steps: int8 per output channel "
       "(_weight_int8pack_mm), int4 in groups of N with a scale and a zero each "
       "(_weight_int4pack_mm), int8dyn FBGEMM's dynamic int8 linear "
       "(quantized::linear_dynamic); kld_mean, kld_p99, kld_max and same_top1_% "
       "teacher-forced against fp32 unquantised, top1_agree_%, rel_err and "
       "token_match_% against the same weights unquantised; with --eval_tokens, ppl, "
       "ppl_ratio and the kld over the text"},
  };
  if (!command_line.min_warmup_time.empty()) {
    // Google Benchmark's own warm-up, run before bench's.
    extra.emplace_back("benchmark_min_warmup_time", command_line.min_warmup_time);
  }
  // Where train_epoch's batches come from: storage and its files are how
  // the epoch reads (the name says /data:disk and the shards' size).
  const EpochSettings& epochs = o.epochs;
  extra.emplace_back(
      "train_epoch_data",
      epochs.data == "disk"
          ? absl::StrCat(
                "disk: ", epochs.data_dir, ", shards of ", epochs.shard_mb, " MB",
                epochs.drop_page_cache ? ", dropped from the page cache before each epoch"
                                       : "")
          : "memory: the dataset generated in RAM once, before the epochs");
  if (!o.run.profile_dir.empty()) {
    extra.emplace_back(
        "profile", absl::StrCat(o.run.profile_dir, ": ", o.run.profile_steps,
                                " steps of each benchmark profiled after its warm-up, "
                                "before its timed steps"));
  }
  if (!o.sweep.serve_scenarios.empty()) {
    // How long LoadGen measures a served benchmark (MLPerf's: 600 s).
    extra.emplace_back("serve_min", absl::StrCat(o.sweep.serve.min_s, " s and ",
                                                 o.sweep.serve.min_queries,
                                                 " queries a LoadGen test at least"));
  }
  const FamilyOptions& model = o.families;
  if (!model.model_inputs.empty()) extra.emplace_back("model_inputs", model.model_inputs);
  if (!model.model_flops_per_step.empty()) {
    extra.emplace_back("model_flops_per_step", model.model_flops_per_step);
  }
  // A file a run read, by content: its path and SHA-256 (or why not).
  const auto add_file = [&extra](const std::string& key, const std::string& path,
                                 const absl::StatusOr<std::string>& digest) {
    extra.emplace_back(key, path);
    extra.emplace_back(
        key + "_sha256",
        digest.ok() ? *digest : absl::StrCat("unreadable: ", digest.status().message()));
  };
  // What was loaded (a bad checkpoint says why here too, and in each
  // benchmark that tried it).
  if (!o.sweep.weights.empty()) {
    add_file("weights", o.sweep.weights, CheckpointSha256(o.sweep.weights));
  }
  // The model files measured: two files of one stem are not one model.
  for (size_t i = 0; i < model.model_files.size(); ++i) {
    add_file(absl::StrCat("model_", i + 1), model.model_files[i],
             FileSha256(model.model_files[i]));
  }
  // The text ppl and the divergence were computed over: two files of one
  // name are not one text.
  if (!o.run.eval_tokens.empty()) {
    add_file("eval_tokens", o.run.eval_tokens, FileSha256(o.run.eval_tokens));
  }
  return extra;
}

CommandLine ReadCommandLine(int* argc, char** argv) {
  CommandLine c;
  const char* rank = std::getenv("RANK");
  c.quiet_rank = rank != nullptr && std::string(rank) != "0";
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    absl::string_view arg = argv[i];
    if (c.quiet_rank && (absl::StartsWith(arg, "--benchmark_out") ||
                         absl::StartsWith(arg, "--benchmark_format"))) {
      continue;
    }
    // A bare switch, as --benchmark_list_tests is: the suite's flags take
    // a value.
    static char list_families[] = "--list_families=true";
    argv[kept++] = arg == "--list_families" ? list_families : argv[i];
    if (arg == "--benchmark_list_tests" || arg == "--benchmark_list_tests=true" ||
        arg == "--benchmark_list_tests=1") {
      c.list_only = true;
    }
    if (absl::ConsumePrefix(&arg, "--benchmark_filter=")) c.filter = std::string(arg);
    if (absl::StartsWith(arg, "--benchmark_min_time")) c.min_time_given = true;
    if (absl::ConsumePrefix(&arg, "--benchmark_min_time=")) c.min_time = std::string(arg);
    if (absl::ConsumePrefix(&arg, "--benchmark_min_warmup_time=")) {
      c.min_warmup_time = std::string(arg);
    }
    if (absl::ConsumePrefix(&arg, "--benchmark_out=")) c.out = std::string(arg);
    if (absl::ConsumePrefix(&arg, "--benchmark_out_format=")) {
      c.out_format = std::string(arg);
    }
  }
  *argc = kept;
  return c;
}

bool DefaultSuiteMinTime(const CommandLine& command_line) {
  return command_line.filter.empty() && !command_line.min_time_given;
}

std::vector<char*> BenchmarkArguments(const CommandLine& command_line, int argc,
                                      char** argv) {
  std::vector<char*> args(argv, argv + argc);
  if (DefaultSuiteMinTime(command_line)) {
    static std::string min_time =
        absl::StrCat("--benchmark_min_time=", kDefaultSuiteMinTime);
    args.push_back(min_time.data());
  }
  args.push_back(nullptr);
  return args;
}

absl::StatusOr<std::string> RunFilter(const std::vector<Family>& families,
                                      const SuiteOptions& options,
                                      const CommandLine& command_line) {
  std::string filter;
  if (!command_line.filter.empty()) {
    if (!options.suite_skip.empty()) {
      return absl::InvalidArgumentError(
          "--suite_skip leaves members out of the default suite: it goes without "
          "--benchmark_filter");
    }
    filter = command_line.filter;
  } else {
    absl::StatusOr<std::string> suite = DefaultSuiteFilter(families, options.suite_skip);
    if (!suite.ok()) return suite.status();
    filter = *std::move(suite);
  }
  if (absl::Status s = CheckFilter(filter); !s.ok()) return s;
  return filter;
}

Sweep SweepFor(const SuiteOptions& options, const CommandLine& command_line,
               const std::vector<c10::Device>& available) {
  Sweep sweep = options.sweep;
  // Default: every available device, plus any the filter names explicitly
  // so that they report why they cannot run instead of vanishing.
  if (sweep.devices.empty()) {
    sweep.devices = available;
    for (const c10::Device& d : DevicesNamedIn(command_line.filter)) {
      if (std::find(sweep.devices.begin(), sweep.devices.end(), d) == sweep.devices.end())
        sweep.devices.push_back(d);
    }
  }
  // Likewise dtypes a filter names ("Llama/1B/cpu/generate/.*/bf16") without
  // --dtype: registered beside the default, so that the filter selects them.
  if (!options.dtypes_given) {
    for (const c10::ScalarType t : DtypesNamedIn(command_line.filter)) {
      if (std::find(sweep.dtypes.begin(), sweep.dtypes.end(), t) == sweep.dtypes.end())
        sweep.dtypes.push_back(t);
    }
  }
  sweep.default_suite = command_line.filter.empty();
  sweep.epochs = options.epochs;
  return sweep;
}

absl::StatusOr<std::vector<Registration>> RegistrationsFor(
    const std::vector<Family>& families, const Sweep& sweep, bool quiet) {
  std::vector<Registration> registrations = ExpandSweep(families, sweep);
  // An axis that no selected device offers adds nothing: say so.
  for (const auto& [flag, asked, offered, devices] :
       {std::tuple<const char*, bool, bool, const char*>{
            "tf32", absl::c_linear_search(sweep.tf32, true),
            absl::c_any_of(registrations,
                           [](const Registration& r) { return r.spec.tf32; }),
            "CUDA GPUs, in fp32"},
        {"cuda_graphs", absl::c_linear_search(sweep.graphs, true),
         absl::c_any_of(registrations,
                        [](const Registration& r) { return r.spec.graph; }),
         "CUDA GPUs, in inference phases"}}) {
    if (asked && !offered && !quiet) {
      std::cerr << "bench: --" << flag << "=true adds no benchmark here: it applies to "
                << devices << ", and no selected device is one\n";
    }
  }
  if (!sweep.compiled_dir.empty()) {
    std::vector<std::string> unreadable;
    const auto compiled = CompiledBenchmarks(sweep.compiled_dir, &unreadable);
    for (const std::string& why : unreadable) {
      std::cerr << "bench: --compiled: skipping " << why << "\n";
    }
    if (compiled.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--compiled=", sweep.compiled_dir, " holds no model file tools/export wrote"));
    }
    // A file whose eager benchmark these flags do not make (another batch,
    // seq or dtype) would be passed over without a word.
    std::set<std::string> eager;
    for (const Registration& r : registrations) eager.insert(r.spec.Name());
    for (const auto& [name, file] : compiled) {
      if (!eager.count(name) && !quiet) {
        std::cerr << "bench: --compiled: " << file.path << " compiles " << name
                  << ", which these flags make no benchmark of (give its shapes and "
                     "dtype)\n";
      }
    }
    registrations = WithCompiled(registrations, compiled);
  }
  return registrations;
}

std::vector<std::string> UntakenSettings(
    const std::vector<Registration>& registrations, const Sweep& sweep, bool dtypes_given,
    const std::function<bool(const BenchSpec&)>& selected) {
  using Takes = std::function<bool(const BenchSpec&)>;
  struct Given {
    std::string flag;
    Takes takes;
    std::string applies = {};  // "": the families that take it, named
  };
  std::vector<Given> given;
  if (dtypes_given) {
    for (const c10::ScalarType t : sweep.dtypes) {
      given.push_back({absl::StrCat("--dtype=", DtypeName(t)),
                       [t](const BenchSpec& s) { return s.dtype == t; }});
    }
  }
  for (const Quant& q : sweep.quants) {
    if (q.none()) continue;
    given.push_back(
        {absl::StrCat("--quant=", kQuantNames[static_cast<int>(q.kind)],
                      q.group > 0 ? absl::StrCat(" --quant_group=", q.group) : ""),
         [q](const BenchSpec& s) { return s.quant == q; }});
  }
  if (absl::c_linear_search(sweep.channels_last, true)) {
    given.push_back({"--memory_format=channels_last",
                     [](const BenchSpec& s) { return s.channels_last; }});
  }
  if (absl::c_linear_search(sweep.pack_cpu_linears, true)) {
    given.push_back(
        {"--cpu_linear=onednn", [](const BenchSpec& s) { return s.pack_cpu_linears; }});
  }
  const auto each = [&](const char* flag, const std::vector<int64_t>& values,
                        int64_t BenchSpec::*field) {
    for (const int64_t v : values) {
      if (v == 0) continue;  // --depth's default
      given.push_back({absl::StrCat("--", flag, "=", v),
                       [v, field](const BenchSpec& s) { return s.*field == v; }});
    }
  };
  each("batch", sweep.batches, &BenchSpec::batch);
  each("seq", sweep.seqs, &BenchSpec::seq);
  each("prompt", sweep.prompts, &BenchSpec::prompt);
  each("new_tokens", sweep.new_tokens, &BenchSpec::new_tokens);
  each("depth", sweep.depths, &BenchSpec::depth);
  // Serving's: what one scenario reads, given where it is not the default.
  const ServeSettings& serve = sweep.serve;
  const auto scenario = [](const BenchSpec& s, const char* name) {
    return s.serving() && s.serve.scenario == name;
  };
  if (!sweep.serve_scenarios.empty()) {
    if (serve.samples_per_query > 0 &&
        serve.samples_per_query != kLoadGenSamplesPerQuery) {
      given.push_back(
          {absl::StrCat("--samples_per_query=", serve.samples_per_query),
           [scenario](const BenchSpec& s) { return scenario(s, "MultiStream"); },
           "it sets MultiStream's queries"});
    }
    if (serve.latency_bound_ms > 0) {
      given.push_back({absl::StrCat("--latency_bound_ms=", serve.latency_bound_ms),
                       [scenario](const BenchSpec& s) { return scenario(s, "Server"); },
                       "it bounds Server's p99"});
    }
    // Served generation's token bounds: its Server's.
    for (const auto& [flag, ms] :
         {std::pair<const char*, double>{"ttft_bound_ms", serve.ttft_bound_ms},
          {"tpot_bound_ms", serve.tpot_bound_ms}}) {
      if (ms > 0) {
        given.push_back({absl::StrCat("--", flag, "=", ms),
                         [scenario](const BenchSpec& s) {
                           return scenario(s, "Server") && s.prompt > 0;
                         },
                         "it bounds the token latencies of served generation's Server"});
      }
    }
    if (serve.batch_timeout_us != kDefaultBatchTimeoutUs) {
      given.push_back({absl::StrCat("--batch_timeout_us=", serve.batch_timeout_us),
                       [](const BenchSpec& s) {
                         return s.serving() && s.prompt == 0 &&
                                s.serve.scenario != "SingleStream";
                       },
                       "it sets the batcher of a served forward, but SingleStream's"});
    }
    // The first rate is Offline's expected one too; the others, Server's alone.
    for (size_t i = 1; i < sweep.serve_qps.size(); ++i) {
      const double qps = sweep.serve_qps[i];
      given.push_back({absl::StrCat("--target_qps=", qps),
                       [scenario, qps](const BenchSpec& s) {
                         return scenario(s, "Server") && s.serve.target_qps == qps;
                       },
                       "a rate after the first is Server's alone"});
    }
  }

  std::set<std::string> chosen;  // the families the filter selects
  for (const Registration& r : registrations) {
    if (selected(r.spec)) chosen.insert(r.spec.family);
  }
  std::vector<std::string> out;
  for (const Given& g : given) {
    std::set<std::string> takers;
    bool taken = false;
    for (const Registration& r : registrations) {
      if (!g.takes(r.spec)) continue;
      takers.insert(r.spec.family);
      taken = taken || selected(r.spec);
    }
    if (taken || chosen.empty()) continue;
    out.push_back(absl::StrCat(
        g.flag, " adds no benchmark that the filter selects (",
        absl::StrJoin(chosen, ", "), "): ",
        !g.applies.empty() ? g.applies
        : takers.empty()   ? "no family here takes it"
                         : absl::StrCat("it applies to ", absl::StrJoin(takers, ", "))));
  }
  // Generation whose family fixes what the flag sets: the rest of the
  // selected generation takes it, these do not.
  for (const auto& [flag, values, field, fixed] :
       {std::tuple<const char*, std::vector<int64_t>, int64_t BenchSpec::*, const char*>{
            "prompt", sweep.prompts, &BenchSpec::prompt, "its family fixes the prompt"},
        {"depth", sweep.depths, &BenchSpec::depth,
         "its family generates from position 0 alone"}}) {
    if (values.empty() || values == std::vector<int64_t>{0}) continue;
    std::map<std::string, std::set<int64_t>> ran;  // a family's values
    for (const Registration& r : registrations) {
      if (r.spec.phase == kGenerate && selected(r.spec)) {
        ran[r.spec.family].insert(r.spec.*field);
      }
    }
    std::vector<std::string> families;
    for (const auto& [family, its] : ran) {
      if (!absl::c_all_of(values, [&its](int64_t v) { return its.count(v) > 0; })) {
        families.push_back(absl::StrCat(family, " (", absl::StrJoin(its, ","), ")"));
      }
    }
    if (!families.empty()) {
      out.push_back(absl::StrCat("--", flag, " does not set the generation of ",
                                 absl::StrJoin(families, ", "), ": ", fixed));
    }
  }
  return out;
}

Suite::Suite(const CommandLine& command_line) : command_line_(command_line) {}
Suite::~Suite() = default;

absl::StatusOr<std::unique_ptr<Suite>> Suite::Register(const SuiteOptions& options,
                                                       const CommandLine& command_line) {
  std::unique_ptr<Suite> suite(new Suite(command_line));
  absl::StatusOr<DistEnv> dist = ReadDistEnv();
  if (!dist.ok()) return dist.status();
  absl::StatusOr<std::vector<Family>> families = RegisteredFamilies(options.families);
  if (!families.ok()) return families.status();
  suite->families_ = *std::move(families);
  absl::StatusOr<std::string> filter = RunFilter(suite->families_, options, command_line);
  if (!filter.ok()) return filter.status();
  suite->filter_ = *std::move(filter);
  if (absl::Status s = CheckCpuIsaLimit(); !s.ok()) return s;
  if (absl::Status s = CheckWritablePaths(options, command_line); !s.ok()) return s;
  // A checkpoint that is not there fails before anything runs, not as every
  // loading benchmark's error (a corrupt one is each benchmark's); a list
  // of names needs none.
  if (const std::string& weights = options.sweep.weights;
      !command_line.list_only && !weights.empty() && !std::filesystem::exists(weights)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--weights=", weights,
        ": no such file or folder; valid: a .safetensors file, a "
        "folder holding model.safetensors or model.safetensors.index.json, or such an "
        "index"));
  }

  std::string malloc_description;
  if (absl::Status s =
          ConfigureMalloc(AbslUnparseFlag(options.malloc), &malloc_description);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ConfigureThreads(options.threads); !s.ok()) return s;

  Sweep sweep = SweepFor(options, command_line, AvailableDevices());
  sweep.world_size = dist->world_size;
  sweep.process_group = dist->world_size > 1 || options.force_process_group;
  if (std::any_of(sweep.devices.begin(), sweep.devices.end(),
                  [](const c10::Device& d) { return BackendOf(d).Caps().tf32; })) {
    const bool tf32_runs =
        std::find(sweep.tf32.begin(), sweep.tf32.end(), true) != sweep.tf32.end();
    if (absl::Status s = CheckTf32Environment(tf32_runs); !s.ok()) return s;
  }
  const bool host_fp32 =
      std::find(sweep.dtypes.begin(), sweep.dtypes.end(), c10::kFloat) !=
          sweep.dtypes.end() &&
      std::any_of(sweep.devices.begin(), sweep.devices.end(),
                  [](const c10::Device& d) { return BackendOf(d).Caps().host; });
  if (host_fp32) {
    if (absl::Status s = CheckFpmathEnvironment(); !s.ok()) return s;
  }
  if (sweep.serve.log_dir.empty()) {
    // LoadGen's logs beside the results they explain.
    sweep.serve.log_dir = command_line.out.empty()
                              ? "loadgen_logs"
                              : std::filesystem::path(command_line.out)
                                    .replace_extension(".loadgen")
                                    .string();
  }
  if (dist->world_size > 1 || options.force_process_group) {
    // Data-parallel: one device a rank, bound by the backend of the first
    // accelerator asked for (cuda:LOCAL_RANK, or the one GPU a rank sees),
    // else the CPU.
    c10::Device asked = HostDevice();
    for (const c10::Device& d : sweep.devices) {
      if (!BackendOf(d).Caps().host) {
        asked = d;
        break;
      }
    }
    absl::StatusOr<c10::Device> device = BackendOf(asked).BindRank(dist->local_rank);
    if (!device.ok()) return device.status();
    sweep.devices = {*device};
    absl::StatusOr<std::unique_ptr<DataParallel>> group =
        JoinProcessGroup(*dist, *device, std::chrono::seconds(options.dist_timeout_s));
    if (!group.ok()) return group.status();
    SetCurrentProcessGroup(*std::move(group));
  }
  suite->devices_ = sweep.devices;
  Warn(command_line);

  std::vector<MatmulShape> matmuls;
  for (const Family& f : suite->families_) {
    matmuls.insert(matmuls.end(), f.peak_matmul_shapes.begin(),
                   f.peak_matmul_shapes.end());
  }
  suite->peaks_ = std::make_unique<Peaks>(options.peak_flops, options.peak_bandwidth,
                                          matmuls, options.peak_cache);
  absl::StatusOr<std::vector<Registration>> registrations =
      RegistrationsFor(suite->families_, sweep, command_line.quiet_rank);
  if (!registrations.ok()) return registrations.status();
  if (!sweep.serve_scenarios.empty() && !command_line.quiet_rank &&
      absl::c_none_of(*registrations, [&](const Registration& r) {
        return r.spec.serving() && FilterSelects(suite->filter_, FullName(r.spec, 1));
      })) {
    // As --tf32 and --cuda_graphs say when they add nothing.
    std::cerr << "bench: --scenario adds no benchmark that the filter selects: a "
                 "family serves one of its phases (forward; GPT2 and Llama generate "
                 "too, Whisper encode alone; --serve_phase picks it); list what serves "
                 "with the same --scenario and --benchmark_filter=/serve/ "
                 "--benchmark_list_tests\n";
  }
  if (!command_line.quiet_rank) {
    const auto selected = [&](const BenchSpec& s) {
      return FilterSelects(suite->filter_,
                           FullName(s, FixedIterations(s, options, dist->world_size)));
    };
    for (const std::string& said :
         UntakenSettings(*registrations, sweep, options.dtypes_given, selected)) {
      std::cerr << "bench: " << said << "\n";
    }
  }
  if (!command_line.list_only && !command_line.quiet_rank) {
    PreparePeaks(*registrations, suite->filter_, options, dist->world_size,
                 suite->peaks_.get());
  }
  RunOptions run = options.run;
  run.peaks = suite->peaks_.get();
  suite->runner_ = std::make_unique<Runner>(std::move(run));
  AddToGoogleBenchmark(*registrations, options, dist->world_size, suite->runner_.get());
  AddContext(options, command_line, malloc_description, dist->world_size);
  return suite;
}

int PrintFamilyFacts(const FamilyOptions& options) {
  absl::StatusOr<std::vector<Family>> families = RegisteredFamilies(options);
  if (!families.ok()) ExitWithUsageError(families.status());
  std::cout << FamilyFactsJson(*families) << "\n";
  return 0;
}

int Suite::Run() {
  NullReporter null_reporter;
  benchmark::BenchmarkReporter* display = command_line_.quiet_rank
                                              ? &null_reporter
                                              : benchmark::CreateDefaultDisplayReporter();
  const LateContext peaks = [this] { return peaks_->Context(); };
  LateContextReporter display_with_peaks(display, peaks);
  RecordingReporter recorder(command_line_.quiet_rank ? display : &display_with_peaks);
  StoppedRunsFilter shown(&recorder, /*pass_streams=*/false);
  std::unique_ptr<benchmark::BenchmarkReporter> file_format;
  std::unique_ptr<LateContextReporter> file_with_peaks;
  std::unique_ptr<StoppedRunsFilter> file;
  if (!command_line_.out.empty()) {
    file_format = FileReporter(command_line_.out_format);
    file_with_peaks = std::make_unique<LateContextReporter>(file_format.get(), peaks);
    file =
        std::make_unique<StoppedRunsFilter>(file_with_peaks.get(), /*pass_streams=*/true);
  }
  InstallInterruptHandlers();
  const size_t matched = benchmark::RunSpecifiedBenchmarks(&shown, file.get(), filter_);
  runner_->Release();
  if (StopRequested()) {
    // The reporters have written what was measured. Other ranks may be
    // waiting on this one in a collective: aborting the group ends their
    // wait with an error at once (a graceful teardown would wait for them),
    // and the process ends without running destructors that could block.
    std::cerr << "bench: " << StopReason()
              << "; the results measured before it are written\n";
    std::cout.flush();
    std::cerr.flush();
    if (DataParallel* group = CurrentProcessGroup()) {
      try {
        group->Abort();
      } catch (const std::exception& e) {
        std::cerr << "bench: aborting the process group: " << e.what() << "\n";
      }
    }
    benchmark::Shutdown();
    std::fflush(nullptr);
    std::_Exit(StopExitCode());
  }
  try {
    runner_->Finish();
  } catch (const std::exception& e) {
    std::cerr << "bench: the ranks' last wait for each other failed: " << e.what()
              << "\n";
    std::fflush(nullptr);
    std::_Exit(1);
  }
  if (matched == 0) {
    std::vector<std::string> devices;
    for (const c10::Device& d : devices_) devices.push_back(DeviceName(d));
    const std::string unknown = UnknownNameIn(filter_, families_);
    ExitWithUsageError(absl::InvalidArgumentError(absl::StrCat(
        "no benchmark matches --benchmark_filter='", filter_, "' on devices ",
        absl::StrJoin(devices, ","), unknown.empty() ? "" : absl::StrCat(": ", unknown),
        "; list them with --benchmark_filter=all --benchmark_list_tests")));
  }
  const std::string summary = SpeedupSummary(recorder.runs());
  // Console output ends with the summary; JSON or CSV on stdout stays clean.
  if (!summary.empty() && !command_line_.quiet_rank) {
    (dynamic_cast<benchmark::ConsoleReporter*>(display) ? std::cout : std::cerr)
        << summary;
  }
  if (DataParallel* group = CurrentProcessGroup()) group->Shutdown();
  benchmark::Shutdown();
  return 0;
}

}  // namespace ltb
