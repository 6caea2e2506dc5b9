// bench: every model family and phase as Google Benchmark benchmarks.
// Google Benchmark's flags (--benchmark_*) are handled first; the suite's
// own flags below select the sweep and the run settings.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "harness/context.h"
#include "harness/device.h"
#include "harness/distributed.h"
#include "harness/epoch.h"
#include "harness/memory.h"
#include "harness/peaks.h"
#include "harness/runner.h"
#include "harness/summary.h"
#include "harness/sweep.h"
#include "harness/threads.h"
#include "models/cnn.h"
#include "models/encdec.h"
#include "models/encoder.h"
#include "models/gpt2.h"
#include "models/ops.h"
#include "models/resnet.h"
#include "models/selftest.h"
#include "models/transformer.h"
#include "models/whisper.h"

// Every flag is a string, validated here, so that a bad value stops the
// program with exit code 2 and the valid choices.
ABSL_FLAG(std::string, devices, "",
          "Devices to benchmark, e.g. cpu,cuda,cuda:1,mps. Default: every "
          "available device.");
ABSL_FLAG(std::string, batch, "",
          "Batch sizes to sweep, e.g. 1,8,32. Default: per family.");
ABSL_FLAG(std::string, seq, "",
          "Sequence lengths to sweep, e.g. 128,512. Default: per family.");
ABSL_FLAG(std::string, prompt, "32",
          "Prompt tokens per sequence for generate, e.g. 32,128.");
ABSL_FLAG(std::string, new_tokens, "100",
          "Tokens generated per sequence for generate, e.g. 100.");
ABSL_FLAG(std::string, memory_format, "contiguous",
          "Convolution models' memory format: contiguous, channels_last, or both.");
ABSL_FLAG(std::string, dtype, "fp32", "Precisions to sweep: fp32, bf16, fp16.");
ABSL_FLAG(std::string, threads, "0",
          "Intra-op (and BLAS) threads. 0: LibTorch's default, one per physical core.");
ABSL_FLAG(std::string, interop_threads, "1", "Inter-op threads.");
ABSL_FLAG(std::string, sync, "true",
          "Synchronise the device before reading the clock. false reproduces "
          "the classic timing mistake; such runs carry /nosync in their names.");
ABSL_FLAG(std::string, warmup_s, "0.5", "Minimum warm-up time per benchmark, seconds.");
ABSL_FLAG(std::string, warmup_steps, "1", "Minimum warm-up steps per benchmark.");
ABSL_FLAG(std::string, malloc, "tuned",
          "glibc malloc settings: tuned (keep freed memory, no trimming) or system.");
ABSL_FLAG(std::string, cpu_linear, "onednn",
          "Linear layers of CPU generation: onednn (weights packed once for oneDNN) "
          "or aten (LibTorch's default GEMM path).");
ABSL_FLAG(std::string, peak_flops, "",
          "Peak FLOP/s for mfu: one number for every dtype, or dtype=number pairs "
          "(fp32=6.7e13,bf16=9.9e14). Default: a known GPU's datasheet, else measured.");
ABSL_FLAG(std::string, peak_bandwidth, "",
          "Peak memory bandwidth in bytes/s for mbu. Default: a known GPU's datasheet, "
          "else a measured copy.");
ABSL_FLAG(std::string, profile, "",
          "Directory: profile each benchmark's steps (apart from the timed ones) into a "
          "Chrome trace and a table of the top operators.");
ABSL_FLAG(std::string, profile_steps, "5", "Steps to profile with --profile.");
ABSL_FLAG(std::string, epochs, "2", "train_epoch: measured epochs per benchmark.");
ABSL_FLAG(std::string, warmup_epochs, "1",
          "train_epoch: epochs before the measured ones.");
ABSL_FLAG(std::string, dataset_samples, "128",
          "train_epoch: samples in the synthetic dataset.");
ABSL_FLAG(
    std::string, data, "memory",
    "train_epoch data: memory (generated in RAM) or disk (shards under --data_dir).");
ABSL_FLAG(
    std::string, data_dir, "",
    "train_epoch: directory of the dataset shards; implies --data=disk. Default with "
    "--data=disk: ~/.cache/libtorch-bench/data.");
ABSL_FLAG(std::string, shard_mb, "128", "train_epoch: size of a shard file, MB.");
ABSL_FLAG(std::string, regenerate, "false", "train_epoch: rewrite the dataset on disk.");
ABSL_FLAG(
    std::string, steps, "10",
    "Data-parallel runs: optimizer steps each train_step benchmark measures (every rank "
    "must take the same number).");
ABSL_FLAG(std::string, d_model, "", "EncDec: override every size's d_model.");
ABSL_FLAG(std::string, nhead, "", "EncDec: override every size's attention heads.");
ABSL_FLAG(std::string, num_encoder_layers, "",
          "EncDec: override every size's encoder layers.");
ABSL_FLAG(std::string, num_decoder_layers, "",
          "EncDec: override every size's decoder layers.");
ABSL_FLAG(std::string, dim_feedforward, "", "EncDec: override every size's FFN width.");
ABSL_FLAG(std::string, seed, "0", "Random seed for weights and inputs.");

namespace {

constexpr int kBadUsage = 2;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "bench: %s\n", message.c_str());
  std::exit(kBadUsage);
}

template <typename T>
T OrDie(absl::StatusOr<T> value) {
  if (!value.ok()) Die(std::string(value.status().message()));
  return *std::move(value);
}

const std::vector<std::string>& OwnFlags() {
  // clang-format off
  static const auto* flags = new std::vector<std::string>{
      "devices", "batch", "seq", "prompt", "new_tokens", "memory_format", "dtype", "threads",
      "interop_threads", "sync", "warmup_s", "warmup_steps", "malloc", "cpu_linear",
      "peak_flops", "peak_bandwidth", "profile", "profile_steps", "epochs", "warmup_epochs",
      "dataset_samples", "data", "data_dir", "shard_mb", "regenerate", "steps", "d_model",
      "nhead", "num_encoder_layers", "num_decoder_layers", "dim_feedforward", "seed"};
  // clang-format on
  return *flags;
}

void PrintHelp() {
  benchmark::PrintDefaultHelp();
  std::fprintf(stdout,
               "\nbench flags (lists are comma-separated and expand into a sweep):\n");
  for (const std::string& name : OwnFlags()) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::fprintf(stdout, "  --%s=%s\n      %s\n", name.c_str(),
                 flag->DefaultValue().c_str(), flag->Help().c_str());
  }
  std::fprintf(stdout,
               "\nWith no --benchmark_filter the default suite runs; "
               "--benchmark_filter=all runs everything.\n");
}

// Anything left after Google Benchmark took its flags must be one of ours.
void RejectUnknownArguments(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) {
      Die(absl::StrCat("unexpected argument '", argv[i], "'"));
    }
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    if (name == "help" || name == "helpfull") continue;
    if (std::find(OwnFlags().begin(), OwnFlags().end(), name) == OwnFlags().end()) {
      Die(absl::StrCat("unknown flag '", argv[i], "'; bench flags: --",
                       absl::StrJoin(OwnFlags(), ", --"),
                       "; Google Benchmark flags start with --benchmark_ (see --help)"));
    }
    if (eq == absl::string_view::npos) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      Die(absl::StrCat("--", name, " needs a value, as --", name, "=VALUE (default ",
                       flag->DefaultValue(), "): ", flag->Help()));
    }
  }
}

// What ranks other than 0 report: nothing.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

std::string DeviceList(const std::vector<c10::Device>& devices) {
  std::vector<std::string> names;
  for (const c10::Device& d : devices) names.push_back(ltb::DeviceName(d));
  return absl::StrJoin(names, ",");
}

bool ListOnly(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--benchmark_list_tests" || arg == "--benchmark_list_tests=true" ||
        arg == "--benchmark_list_tests=1") {
      return true;
    }
  }
  return false;
}

std::string UserFilter(int argc, char** argv) {
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--benchmark_filter=")) filter = std::string(arg);
  }
  return filter;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any tensor exists, so every CPU tensor is counted.
  ltb::InstallCpuTracking();

  // Under torchrun only rank 0 reports; the others drop the output flags.
  const char* rank_env = std::getenv("RANK");
  const bool quiet_rank = rank_env != nullptr && std::string(rank_env) != "0";
  if (quiet_rank) {
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
      const absl::string_view arg = argv[i];
      if (!absl::StartsWith(arg, "--benchmark_out") &&
          !absl::StartsWith(arg, "--benchmark_format")) {
        argv[kept++] = argv[i];
      }
    }
    argc = kept;
  }
  const std::string user_filter = UserFilter(argc, argv);
  const bool list_only = ListOnly(argc, argv);
  benchmark::Initialize(&argc, argv, PrintHelp);
  RejectUnknownArguments(argc, argv);
  absl::SetProgramUsageMessage("Benchmarks LibTorch models; see --help.");
  absl::ParseCommandLine(argc, argv);

  ltb::Sweep sweep;
  const std::string devices_flag = absl::GetFlag(FLAGS_devices);
  if (!devices_flag.empty()) sweep.devices = OrDie(ltb::ParseDeviceList(devices_flag));
  if (!absl::GetFlag(FLAGS_batch).empty()) {
    sweep.batches = OrDie(ltb::ParsePositiveList("batch", absl::GetFlag(FLAGS_batch)));
  }
  if (!absl::GetFlag(FLAGS_seq).empty()) {
    sweep.seqs = OrDie(ltb::ParsePositiveList("seq", absl::GetFlag(FLAGS_seq)));
  }
  sweep.prompts = OrDie(ltb::ParsePositiveList("prompt", absl::GetFlag(FLAGS_prompt)));
  sweep.new_tokens =
      OrDie(ltb::ParsePositiveList("new_tokens", absl::GetFlag(FLAGS_new_tokens)));
  sweep.channels_last =
      OrDie(ltb::ParseMemoryFormats(absl::GetFlag(FLAGS_memory_format)));
  sweep.dtypes = OrDie(ltb::ParseDtypeList(absl::GetFlag(FLAGS_dtype)));
  sweep.sync = OrDie(ltb::ParseBool("sync", absl::GetFlag(FLAGS_sync)));

  const std::string cpu_linear = absl::GetFlag(FLAGS_cpu_linear);
  if (cpu_linear != "onednn" && cpu_linear != "aten") {
    Die(absl::StrCat("unknown --cpu_linear '", cpu_linear, "'; valid: onednn, aten"));
  }
  sweep.pack_cpu_linears = cpu_linear == "onednn";

  ltb::ThreadSettings threads;
  threads.intra_op =
      OrDie(ltb::ParseNonNegativeInt("threads", absl::GetFlag(FLAGS_threads)));
  threads.inter_op = OrDie(
      ltb::ParseNonNegativeInt("interop_threads", absl::GetFlag(FLAGS_interop_threads)));
  if (threads.inter_op == 0)
    Die("bad --interop_threads value '0'; valid: a whole number >= 1");

  ltb::RunOptions run;
  run.warmup_seconds =
      OrDie(ltb::ParseNonNegativeDouble("warmup_s", absl::GetFlag(FLAGS_warmup_s)));
  run.warmup_steps =
      OrDie(ltb::ParseNonNegativeInt("warmup_steps", absl::GetFlag(FLAGS_warmup_steps)));
  run.profile_dir = absl::GetFlag(FLAGS_profile);
  run.profile_steps = OrDie(
      ltb::ParseNonNegativeInt("profile_steps", absl::GetFlag(FLAGS_profile_steps)));
  if (run.profile_steps == 0)
    Die("bad --profile_steps value '0'; valid: a whole number >= 1");
  std::map<c10::ScalarType, double> peak_flops;
  if (!absl::GetFlag(FLAGS_peak_flops).empty()) {
    peak_flops = OrDie(ltb::ParsePeakFlops(absl::GetFlag(FLAGS_peak_flops)));
  }
  const double peak_bandwidth =
      absl::GetFlag(FLAGS_peak_bandwidth).empty()
          ? 0
          : OrDie(ltb::ParsePeakBandwidth(absl::GetFlag(FLAGS_peak_bandwidth)));
  run.seed = static_cast<uint64_t>(
      OrDie(ltb::ParseNonNegativeInt("seed", absl::GetFlag(FLAGS_seed))));

  ltb::EpochSettings epochs;
  epochs.dataset_samples = OrDie(
      ltb::ParsePositiveList("dataset_samples", absl::GetFlag(FLAGS_dataset_samples)))[0];
  epochs.shard_mb =
      OrDie(ltb::ParsePositiveList("shard_mb", absl::GetFlag(FLAGS_shard_mb)))[0];
  epochs.regenerate =
      OrDie(ltb::ParseBool("regenerate", absl::GetFlag(FLAGS_regenerate)));
  epochs.data = absl::GetFlag(FLAGS_data);
  epochs.data_dir = absl::GetFlag(FLAGS_data_dir);
  if (epochs.data != "memory" && epochs.data != "disk") {
    Die(absl::StrCat("unknown --data '", epochs.data, "'; valid: memory, disk"));
  }
  if (!epochs.data_dir.empty()) epochs.data = "disk";
  if (epochs.data == "disk" && epochs.data_dir.empty()) {
    const char* cache = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    epochs.data_dir = cache != nullptr ? absl::StrCat(cache, "/libtorch-bench/data")
                                       : absl::StrCat(home ? home : "/tmp",
                                                      "/.cache/libtorch-bench/data");
  }
  epochs.seed = run.seed;
  ltb::SetEpochSettings(epochs);
  const int measured_epochs = static_cast<int>(
      OrDie(ltb::ParsePositiveList("epochs", absl::GetFlag(FLAGS_epochs)))[0]);
  run.warmup_epochs = OrDie(
      ltb::ParseNonNegativeInt("warmup_epochs", absl::GetFlag(FLAGS_warmup_epochs)));
  const int ddp_steps = static_cast<int>(
      OrDie(ltb::ParsePositiveList("steps", absl::GetFlag(FLAGS_steps)))[0]);

  ltb::EncDecOverrides overrides;
  const auto arch = [](const char* name,
                       const std::string& value) -> std::optional<int64_t> {
    if (value.empty()) return std::nullopt;
    return OrDie(ltb::ParsePositiveList(name, value))[0];
  };
  overrides.d_model = arch("d_model", absl::GetFlag(FLAGS_d_model));
  overrides.heads = arch("nhead", absl::GetFlag(FLAGS_nhead));
  overrides.encoder_layers =
      arch("num_encoder_layers", absl::GetFlag(FLAGS_num_encoder_layers));
  overrides.decoder_layers =
      arch("num_decoder_layers", absl::GetFlag(FLAGS_num_decoder_layers));
  overrides.d_ff = arch("dim_feedforward", absl::GetFlag(FLAGS_dim_feedforward));
  OrDie(ltb::EncDecSizeNames(overrides));  // heads must divide d_model

  const ltb::DistEnv dist = OrDie(ltb::ReadDistEnv());

  std::string malloc_description;
  if (absl::Status s =
          ltb::ConfigureMalloc(absl::GetFlag(FLAGS_malloc), &malloc_description);
      !s.ok()) {
    Die(std::string(s.message()));
  }
  if (absl::Status s = ltb::ConfigureThreads(threads); !s.ok())
    Die(std::string(s.message()));

  // Default: every available device, plus any the filter names explicitly
  // so that they report why they cannot run instead of vanishing.
  if (sweep.devices.empty()) {
    sweep.devices = ltb::AvailableDevices();
    for (const c10::Device& d : ltb::DevicesNamedIn(user_filter)) {
      if (std::find(sweep.devices.begin(), sweep.devices.end(), d) ==
          sweep.devices.end()) {
        sweep.devices.push_back(d);
      }
    }
  }

  if (dist.world_size > 1) {
    // Data-parallel: this rank's device only, cuda:LOCAL_RANK when CUDA is asked for.
    const bool cuda = std::any_of(sweep.devices.begin(), sweep.devices.end(),
                                  [](const c10::Device& d) { return d.is_cuda(); });
    const c10::Device device =
        cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(dist.local_rank))
             : c10::Device(c10::kCPU);
    sweep.devices = {device};
    ltb::SetCurrentProcessGroup(OrDie(ltb::JoinProcessGroup(dist, device)));
  }

  if (!quiet_rank) std::cerr << ltb::DeviceSummary();
  if (!ltb::BuiltOptimized()) {
    std::cerr << "***WARNING*** bench was built without optimisation; "
                 "timings are not representative. Build with "
                 "-DCMAKE_BUILD_TYPE=Release.\n";
  }
  if (!quiet_rank && ltb::ReferenceBlasLoaded()) {
    std::cerr << "***WARNING*** LibTorch's matmuls run on the reference BLAS ("
              << ltb::BlasLibrary()
              << "), single-threaded and unvectorised: they are tens of times slower "
                 "than on an optimised BLAS. On Debian, install libopenblas0-pthread "
                 "and its libblas.so.3 replaces this one.\n";
  }

  static const std::vector<ltb::Family> families = [&overrides] {
    std::vector<ltb::Family> f = {ltb::OpsFamily(),     ltb::TransformerFamily(),
                                  ltb::GPT2Family(),    ltb::ResNetFamily(),
                                  ltb::CNNFamily(),     ltb::EncoderFamily(),
                                  ltb::WhisperFamily(), ltb::EncDecFamily(overrides)};
    const char* selftest = std::getenv("LTB_SELFTEST");
    if (selftest != nullptr && std::string(selftest) == "1")
      f.push_back(ltb::SelftestFamily());
    return f;
  }();
  const std::string filter =
      user_filter.empty() ? ltb::DefaultSuiteFilter(families) : user_filter;
  if (filter != "all") {
    // Google Benchmark compiles the filter as an extended regex, less a
    // leading '-' that negates it; a bad one would run nothing, silently.
    try {
      std::regex(filter[0] == '-' ? filter.substr(1) : filter, std::regex::extended);
    } catch (const std::regex_error& e) {
      Die(absl::StrCat("--benchmark_filter='", filter,
                       "' is not a valid regular expression: ", e.what()));
    }
  }

  // Peaks for mfu/mbu, determined before anything is timed, for the devices
  // and dtypes of the benchmarks the filter selects.
  static ltb::Peaks peaks(peak_flops, peak_bandwidth, ltb::OpsMatmulShapes());
  const std::vector<ltb::Registration> registrations = ltb::ExpandSweep(families, sweep);
  // Other ranks do not report, and measuring on every rank at once would
  // split the cores between them.
  if (!list_only && !quiet_rank) {
    for (const ltb::Registration& r : registrations) {
      std::string why;
      if (!ltb::FilterSelects(filter, r.spec.Name() + "/manual_time") ||
          !ltb::DeviceAvailable(r.spec.device, &why)) {
        continue;
      }
      absl::StatusOr<ltb::Plan> plan = r.family->plan(r.spec);
      if (!plan.ok() || (plan->flops_per_step <= 0 && plan->bytes_per_step <= 0 &&
                         r.spec.phase != "generate")) {
        continue;
      }
      peaks.Prepare(r.spec.device, r.spec.dtype,
                    plan->bytes_per_step > 0 || r.spec.phase == "generate");
    }
  }
  run.peaks = &peaks;
  const ltb::RunOptions options = run;
  for (const ltb::Registration& r : registrations) {
    const ltb::Family* family = r.family;
    const ltb::BenchSpec spec = r.spec;
    benchmark::TimeUnit unit = benchmark::kMillisecond;
    if (spec.family == "Ops") {
      unit = spec.size == "noop" ? benchmark::kNanosecond : benchmark::kMicrosecond;
    }
    benchmark::internal::Benchmark* b =
        benchmark::RegisterBenchmark(spec.Name().c_str(),
                                     [family, spec, options](benchmark::State& state) {
                                       ltb::RunBenchmark(state, *family, spec, options);
                                     })
            ->UseManualTime()
            ->Unit(unit);
    // An epoch is one iteration; data-parallel ranks must all take the same
    // number of steps, so those counts are fixed rather than timed.
    if (spec.phase == ltb::kTrainEpoch) {
      b->Iterations(measured_epochs);
    } else if (dist.world_size > 1 && ltb::IsTraining(spec)) {
      b->Iterations(ddp_steps);
    }
  }

  const ltb::Context extra = {
      {"malloc", malloc_description},
      {"sync", sweep.sync ? "true" : "false (clock read without device sync)"},
      {"warmup",
       absl::StrCat(">= ", run.warmup_steps, " steps and >= ", run.warmup_seconds, " s")},
      {"seed", absl::StrCat(run.seed)},
      {"world_size", absl::StrCat(dist.world_size)},
      {"cpu_linear", sweep.pack_cpu_linears
                         ? "onednn (CPU generation: linear weights packed for oneDNN)"
                         : "aten (LibTorch's default GEMM path)"},
  };
  ltb::Context context_extra = extra;
  for (const auto& kv : peaks.Context()) context_extra.push_back(kv);
  for (const auto& [key, value] : ltb::CollectContext(context_extra)) {
    benchmark::AddCustomContext(key, value);
  }

  NullReporter null_reporter;
  benchmark::BenchmarkReporter* display =
      quiet_rank ? &null_reporter : benchmark::CreateDefaultDisplayReporter();
  ltb::RecordingReporter recorder(display);
  const size_t matched = benchmark::RunSpecifiedBenchmarks(&recorder, filter);
  ltb::ReleaseCachedWorkload();
  if (matched == 0) {
    Die(absl::StrCat("no benchmark matches --benchmark_filter='", filter, "' on devices ",
                     DeviceList(sweep.devices),
                     "; list them with --benchmark_filter=all --benchmark_list_tests"));
  }
  const std::string summary = ltb::SpeedupSummary(recorder.runs());
  // Console output ends with the summary; JSON or CSV on stdout stays clean.
  if (!summary.empty() && !quiet_rank) {
    (dynamic_cast<benchmark::ConsoleReporter*>(display) ? std::cout : std::cerr)
        << summary;
  }
  benchmark::Shutdown();
  return 0;
}
