#include "suite/flags.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <system_error>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/cache_dir.h"
#include "base/format.h"
#include "device/device.h"
#include "family/spec.h"
#include "measure/accuracy.h"
#include "peaks/peaks.h"
#include "serve/serve.h"
#include "serve/text_serve.h"

// The suite's flags, those of families with settings of their own included
// (they reach the family's factory as FamilyOptions: no model file reads a
// flag); SuiteFlags() finds them all.
ABSL_FLAG(ltb::DeviceList, devices, {},
          "Devices to benchmark, e.g. cpu,cuda,cuda:1,mps. Default: every available "
          "device.");
ABSL_FLAG(ltb::PositiveInts, batch, {},
          "Batch sizes to sweep, e.g. 1,8,32. Default: per family (smaller on the CPU in "
          "the default suite alone).");
ABSL_FLAG(ltb::PositiveInts, seq, {},
          "Sequence lengths to sweep, e.g. 128,512. Default: per family (shorter on the "
          "CPU in the default suite alone).");
ABSL_FLAG(ltb::PositiveInts, prompt, ltb::PositiveInts{{32}},
          "Prompt tokens per sequence for generate, e.g. 32,128.");
ABSL_FLAG(ltb::PositiveInts, new_tokens, ltb::PositiveInts{{ltb::kDefaultNewTokens}},
          "Tokens generated per sequence for generate, e.g. 100.");
ABSL_FLAG(ltb::WholeInts, depth, ltb::WholeInts{{0}},
          "generate (GPT2, Llama): tokens already in the key/value cache when the prompt "
          "starts, e.g. 0,4096 (llama-bench's --n-depth). Names end in /depth:D when D > "
          "0.");
ABSL_FLAG(ltb::MemoryFormats, memory_format, ltb::MemoryFormats{{false}},
          "Convolution models' memory format: contiguous, channels_last, or both.");
ABSL_FLAG(ltb::DtypeList, dtype, ltb::DtypeList{{c10::kFloat}},
          "Precisions to sweep: fp32, bf16, fp16.");
ABSL_FLAG(ltb::Count, threads, {},
          "Intra-op (and BLAS) threads. 0: OMP_NUM_THREADS if set, else one per "
          "physical core the process may run on, no more than its cgroup's CPU quota.");
ABSL_FLAG(ltb::PositiveCount, interop_threads, ltb::PositiveCount{1},
          "Inter-op threads.");
ABSL_FLAG(ltb::SwitchList, tf32, ltb::SwitchList{{false}},
          "fp32 matmuls and convolutions as TF32 on devices that have it (CUDA): "
          "false (fp32 is fp32), true, or both. TF32 runs end in /tf32 and are "
          "compared with the device's TF32 peak.");
ABSL_FLAG(ltb::SwitchList, cuda_graphs, ltb::SwitchList{{false}},
          "Inference steps (generation, and its serve: its decode steps) replayed "
          "from CUDA graphs captured once, on devices that have them: false, true, "
          "or both. Graph runs end in /graph.");
ABSL_FLAG(ltb::Switch, sync, ltb::Switch{true},
          "Synchronise the device before reading the clock. false reproduces the "
          "classic timing mistake; such runs carry /nosync in their names.");
ABSL_FLAG(ltb::Seconds, warmup_s, ltb::Seconds{0.5},
          "Minimum warm-up time per benchmark, seconds.");
ABSL_FLAG(ltb::Count, warmup_steps, ltb::Count{1},
          "Minimum warm-up steps per benchmark.");
ABSL_FLAG(ltb::MallocMode, malloc, ltb::MallocMode::kTuned,
          "glibc malloc settings: tuned (keep freed memory, no trimming) or system.");
ABSL_FLAG(ltb::CpuLinearList, cpu_linear, ltb::CpuLinearList{{false}},
          "Linear layers of CPU inference: aten (LibTorch's default path), onednn "
          "(weights packed once for oneDNN; names end in /onednn), or both.");
ABSL_FLAG(ltb::QuantList, quant, ltb::QuantList{{ltb::QuantKind::kNone}},
          "Linear layers' weights for inference of Transformer, GPT2 and Llama: none, "
          "int8 (per output channel), int4 (in groups of --quant_group), int8dyn "
          "(FBGEMM's dynamic int8, fp32 on x86 CPUs), or a list; names end in /int8, "
          "/int4:gN, /int8dyn.");
ABSL_FLAG(ltb::QuantGroups, quant_group, ltb::QuantGroups{{32}},
          "--quant=int4's group sizes: input elements sharing a scale and a zero "
          "(32, 64, 128, or a list).");
ABSL_FLAG(ltb::PeakFlopsValue, peak_flops, {},
          "Peak FLOP/s for mfu: one number for every dtype, or dtype=number pairs "
          "(fp32=6.7e13,bf16=9.9e14). Default: a known GPU's datasheet, else measured.");
ABSL_FLAG(ltb::PeakBandwidthValue, peak_bandwidth, {},
          "Peak memory bandwidth in bytes/s for mbu. Default: a known GPU's datasheet, "
          "else a measured copy.");
ABSL_FLAG(std::string, peak_cache, "",
          "File of this machine's best measured peaks, kept from run to run: a measured "
          "peak is the best of it and this run's measurement, so runs share one "
          "denominator. off: this run's own. Default: $LTB_PEAK_CACHE, else "
          "~/.cache/libtorch-bench/peaks.json.");
ABSL_FLAG(std::string, profile, "",
          "Directory: profile each benchmark's steps (apart from the timed ones) into a "
          "Chrome trace and a table of the top operators.");
ABSL_FLAG(ltb::Switch, print_tokens, ltb::Switch{false},
          "generate: print the prompt's and the new tokens' ids of one generation "
          "(outside the timed steps) to stderr, a line a sequence: 'NAME prompt[0]: "
          "...' then 'NAME tokens[0]: ...'.");
ABSL_FLAG(ltb::PositiveCount, profile_steps, ltb::PositiveCount{5},
          "Steps to profile with --profile.");
ABSL_FLAG(ltb::PositiveCount, epochs, ltb::PositiveCount{2},
          "train_epoch: measured epochs per benchmark.");
ABSL_FLAG(ltb::Count, warmup_epochs, ltb::Count{1},
          "train_epoch: epochs before the measured ones.");
ABSL_FLAG(ltb::PositiveCount, dataset_samples,
          ltb::PositiveCount{ltb::kDefaultDatasetSamples},
          "train_epoch: samples in the synthetic dataset.");
ABSL_FLAG(
    ltb::DataSource, data, ltb::DataSource::kMemory,
    "train_epoch data: memory (generated in RAM) or disk (shards under --data_dir).");
ABSL_FLAG(std::string, data_dir, "",
          "train_epoch: directory of the dataset shards; implies --data=disk. Default "
          "with --data=disk: ~/.cache/libtorch-bench/data.");
ABSL_FLAG(ltb::PositiveCount, shard_mb, ltb::PositiveCount{128},
          "train_epoch: size of a shard file, MB.");
ABSL_FLAG(ltb::Switch, memory_guard, ltb::Switch{true},
          "Refuse, before building it, a benchmark whose estimated memory does not fit "
          "on its device. false lets it run into the device's own out-of-memory error.");
ABSL_FLAG(ltb::Switch, regenerate, ltb::Switch{false},
          "train_epoch: rewrite the dataset on disk.");
ABSL_FLAG(ltb::OptionalPositive, steps, {},
          "Measure exactly this many steps in every benchmark (train_epoch: see "
          "--epochs). Default: as many as --benchmark_min_time needs; data-parallel "
          "training phases, whose ranks must take the same number, 10.");
ABSL_FLAG(ltb::Count, seed, {}, "Random seed for weights and inputs.");
ABSL_FLAG(ltb::PositiveCount, bucket_mb, ltb::PositiveCount{25},
          "Data-parallel training: the cap of a gradient bucket in MB (DDP's "
          "bucket_cap_mb; the first is 1 MB). Names end in /bucket_mb:N when not 25.");
ABSL_FLAG(ltb::Switch, force_process_group, ltb::Switch{false},
          "Join a process group even with one rank (WORLD_SIZE=1 or unset), so that the "
          "data-parallel path runs on one device: its collectives (NCCL on CUDA, Gloo on "
          "the CPU), the Reducer and the data-parallel counters.");
ABSL_FLAG(ltb::PositiveCount, dist_timeout_s, ltb::PositiveCount{300},
          "Data-parallel runs: seconds a rank waits in a collective (or for the "
          "others to join) before it gives up, stops the run and writes its "
          "results, rather than hang on a rank that failed.");
ABSL_FLAG(ltb::Switch, list_families, ltb::Switch{false},
          "Print every family's facts as JSON (sizes with their parameter counts, "
          "cases, phases, default shapes, the default suite) and exit; tools/pybench "
          "and the Python models' tests read them.");
ABSL_FLAG(std::string, suite_skip, "",
          "Members of the default suite to leave out, as Family/size, e.g. Llama/8B "
          "(a short check on a lent GPU). Only without --benchmark_filter.");
ABSL_FLAG(std::string, weights, "",
          "A Hugging Face safetensors checkpoint (a .safetensors file, or a folder with "
          "model.safetensors.index.json and its shards) loaded by name into Llama, GPT2 "
          "or Transformer instead of random weights; its shapes must be the size's. "
          "Names end in /weights:NAME; the context records the files' SHA-256.");
ABSL_FLAG(std::string, eval_tokens, "",
          "A held-out text's token ids (a text file, one sequence a line, as "
          "tools/train-nano writes) that inference of Transformer, GPT2 and Llama scores "
          "in the accuracy check: ppl, and against fp32 unquantised ppl_ratio, kld_* and "
          "same_top1_% over its positions. Not in the names; the context records it.");
ABSL_FLAG(std::string, compiled, "",
          "Directory of compiled models tools/export wrote: each runs beside the eager "
          "benchmark it compiles, named like it with /aoti or /torchscript appended.");

// EncDec's (models/encdec.cc) architecture, applied to every size.
ABSL_FLAG(ltb::OptionalPositive, d_model, {}, "EncDec: override every size's d_model.");
ABSL_FLAG(ltb::OptionalPositive, nhead, {},
          "EncDec: override every size's attention heads.");
ABSL_FLAG(ltb::OptionalPositive, num_encoder_layers, {},
          "EncDec: override every size's encoder layers.");
ABSL_FLAG(ltb::OptionalPositive, num_decoder_layers, {},
          "EncDec: override every size's decoder layers.");
ABSL_FLAG(ltb::OptionalPositive, dim_feedforward, {},
          "EncDec: override every size's FFN width.");
// The Model family's (models/user_model.cc) files.
ABSL_FLAG(std::vector<std::string>, model, {},
          "Model files to benchmark: AOTInductor packages (.pt2) or TorchScript modules "
          "(torch.jit.save), comma-separated. A model file is code: load only files you "
          "trust.");
ABSL_FLAG(std::string, inputs, "",
          "--model: the inputs, e.g. 8x3x224x224:fp32 or '4x128:int64[0,50257)', several "
          "separated by ';'. Default: the example inputs saved with the model, if any.");
ABSL_FLAG(std::string, flops_per_step, "",
          "--model: FLOPs of one forward at the one --batch given, for FLOP/s and mfu. "
          "Default: a TorchScript file's counted in one step (matmuls, convolutions, "
          "attention); none for an AOTInductor package.");

ABSL_FLAG(std::string, scenario, "",
          "serve: MLPerf LoadGen scenarios to run the forward phase under, e.g. "
          "SingleStream,MultiStream,Server,Offline; each registers "
          ".../serve/scenario:S/... benchmarks. Default: none.");
ABSL_FLAG(std::string, target_qps, "10",
          "serve: Server's arrival rates (queries a second) to sweep, e.g. 20,40; "
          "Offline takes the first as its expected rate.");
ABSL_FLAG(double, latency_bound_ms, 0,
          "serve: Server's p99 latency bound in ms. Default: LoadGen's (100 ms).");
ABSL_FLAG(int64_t, samples_per_query, 0,
          "serve: MultiStream's samples a query. Default: LoadGen's (8).");
ABSL_FLAG(double, serve_min_s, 1,
          "serve: LoadGen's minimum test duration in seconds (MLPerf's: 600).");
ABSL_FLAG(int64_t, serve_min_queries, 32,
          "serve: LoadGen's minimum query count (MLPerf's: 1024 SingleStream, 270336 "
          "Server, 24576 samples Offline).");
ABSL_FLAG(int64_t, max_batch, 8, "serve: the dynamic batcher's largest batch.");
ABSL_FLAG(int64_t, batch_timeout_us, ltb::kDefaultBatchTimeoutUs,
          "serve: how long the batcher's oldest waiting sample waits for a batch to "
          "fill, in microseconds.");
ABSL_FLAG(std::string, serve_log_dir, "",
          "serve: where LoadGen's logs are kept, a folder a benchmark. Default: "
          "<--benchmark_out without extension>.loadgen, else ./loadgen_logs.");
ABSL_FLAG(std::string, serve_phase, "",
          "serve: the inference phase served (valid: forward, encode, generate). "
          "Default: generate where --prompt_len or --output_len is given, else each "
          "family's (Whisper's encode, the others' forward).");
ABSL_FLAG(std::string, prompt_len, "",
          "serve of generate: each request's prompt length, N or MIN:MAX (drawn "
          "uniformly, seeded). Default: --prompt.");
ABSL_FLAG(std::string, output_len, "",
          "serve of generate: each request's output tokens, N or MIN:MAX (drawn "
          "uniformly, seeded), at least 2. Default: --new_tokens.");
ABSL_FLAG(double, ttft_bound_ms, 0,
          "serve of generate: Server's p99 time-to-first-token bound in ms. Default: "
          "LoadGen's (100 ms).");
ABSL_FLAG(double, tpot_bound_ms, 0,
          "serve of generate: Server's p99 time-per-output-token bound in ms. "
          "Default: LoadGen's (100 ms).");
ABSL_FLAG(int64_t, prefill_chunk, 0,
          "serve of generate: prompt tokens prefilled between two decode steps at most "
          "(prompts in chunks). Default: 0, each waiting prompt whole.");
ABSL_FLAG(bool, find_peak, false,
          "serve: Server searches its peak QPS within --latency_bound_ms by LoadGen's "
          "FindPeakPerformance, from each --target_qps (which must meet the bound).");

namespace ltb {
namespace {

std::vector<std::string> SplitList(absl::string_view text) {
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    items.emplace_back(absl::StripAsciiWhitespace(item));
  }
  return items;
}

// Parses every comma-separated item with `one`, keeping the first of
// duplicates; false with `error` set at the first bad item.
template <typename T, typename ParseOne>
bool ParseList(absl::string_view text, std::vector<T>* out, std::string* error,
               ParseOne one, T blank = T{}) {
  std::vector<T> values;
  for (const std::string& item : SplitList(text)) {
    T value = blank;
    if (!one(item, &value, error)) return false;
    if (std::find(values.begin(), values.end(), value) == values.end())
      values.push_back(value);
  }
  *out = std::move(values);
  return true;
}

// A list of two names, one for false and one for true
// (--memory_format=contiguous,channels_last): each name's value, in order,
// once each; an unknown name is an error naming `what` and both.
bool ParseTwoNames(absl::string_view text, const std::string& what,
                   const std::string& off, const std::string& on, std::vector<bool>* out,
                   std::string* error) {
  if (absl::StripAsciiWhitespace(text) == "both") {  // as the help says
    *out = {false, true};
    return true;
  }
  return ParseList(text, out, error,
                   [&](const std::string& item, bool* value, std::string* e) {
                     if (item == off || item == on) {
                       *value = item == on;
                       return true;
                     }
                     *e = absl::StrCat("unknown ", what, " '", item, "'; valid: ", off,
                                       ", ", on, ", or both");
                     return false;
                   });
}
std::string UnparseTwoNames(const std::vector<bool>& values, const std::string& off,
                            const std::string& on) {
  std::vector<std::string> names;
  for (const bool v : values) names.push_back(v ? on : off);
  return absl::StrJoin(names, ",");
}

// A scalar flag given a list would silently keep one item: say so instead.
bool NotAList(absl::string_view text, std::string* error) {
  if (!absl::StrContains(text, ',')) return true;
  *error = "takes one value, not a list";
  return false;
}

bool ParseWhole(absl::string_view text, int64_t minimum, int64_t* out,
                std::string* error) {
  if (!NotAList(text, error)) return false;
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < minimum) {
    *error = absl::StrCat("valid: a whole number >= ", minimum);
    return false;
  }
  *out = v;
  return true;
}

template <typename Enum>
bool ParseChoice(absl::string_view text,
                 const std::vector<std::pair<std::string, Enum>>& choices, Enum* out,
                 std::string* error) {
  std::vector<std::string> names;
  for (const auto& [name, value] : choices) {
    if (text == name) {
      *out = value;
      return true;
    }
    names.push_back(name);
  }
  *error = absl::StrCat("valid: ", absl::StrJoin(names, ", "));
  return false;
}

template <typename Enum>
std::string UnparseChoice(const std::vector<std::pair<std::string, Enum>>& choices,
                          Enum value) {
  for (const auto& [name, v] : choices) {
    if (v == value) return name;
  }
  return "";
}

const std::vector<std::pair<std::string, MallocMode>>& MallocChoices() {
  static const auto* c = new std::vector<std::pair<std::string, MallocMode>>{
      {"tuned", MallocMode::kTuned}, {"system", MallocMode::kSystem}};
  return *c;
}
const std::vector<std::pair<std::string, DataSource>>& DataChoices() {
  static const auto* c = new std::vector<std::pair<std::string, DataSource>>{
      {"memory", DataSource::kMemory}, {"disk", DataSource::kDisk}};
  return *c;
}

const std::vector<std::pair<std::string, bool>>& SwitchChoices() {
  static const auto* c = new std::vector<std::pair<std::string, bool>>{
      {"true", true}, {"false", false}, {"1", true},
      {"0", false},   {"yes", true},    {"no", false}};
  return *c;
}

// Flags Abseil itself defines (--flagfile, --fromenv, ...) are not the suite's.
bool DefinedByAbseil(const absl::CommandLineFlag& flag) {
  return absl::StrContains(flag.Filename(), "absl/");
}

}  // namespace

bool AbslParseFlag(absl::string_view text, PositiveInts* out, std::string* error) {
  if (text.empty()) {  // not given: each family's default
    out->values.clear();
    return true;
  }
  return ParseList(text, &out->values, error,
                   [&](const std::string& item, int64_t* v, std::string* e) {
                     if (absl::SimpleAtoi(item, v) && *v > 0) return true;
                     *e = absl::StrCat("'", item,
                                       "' is not a positive integer; valid: positive "
                                       "integers separated by commas, e.g. 1,8,32");
                     return false;
                   });
}
std::string AbslUnparseFlag(const PositiveInts& v) {
  return absl::StrJoin(v.values, ",");
}

bool AbslParseFlag(absl::string_view text, WholeInts* out, std::string* error) {
  return ParseList(text, &out->values, error,
                   [&](const std::string& item, int64_t* v, std::string* e) {
                     if (absl::SimpleAtoi(item, v) && *v >= 0) return true;
                     *e = absl::StrCat("'", item,
                                       "' is not a whole number; valid: whole numbers "
                                       ">= 0 separated by commas, e.g. 0,1024,4096");
                     return false;
                   });
}
std::string AbslUnparseFlag(const WholeInts& v) { return absl::StrJoin(v.values, ","); }

bool AbslParseFlag(absl::string_view text, DeviceList* out, std::string* error) {
  if (text.empty()) {
    out->values.clear();
    return true;
  }
  return ParseList(
      text, &out->values, error,
      [](const std::string& item, c10::Device* d, std::string* e) {
        absl::StatusOr<c10::Device> device = ParseDevice(item);
        if (device.ok()) {
          *d = *device;
          return true;
        }
        *e = std::string(device.status().message());
        return false;
      },
      c10::Device(c10::kCPU));
}
std::string AbslUnparseFlag(const DeviceList& v) {
  std::vector<std::string> names;
  for (const c10::Device& d : v.values) names.push_back(DeviceName(d));
  return absl::StrJoin(names, ",");
}

bool AbslParseFlag(absl::string_view text, DtypeList* out, std::string* error) {
  if (text.empty()) {  // OptionsFromFlags says a list is needed
    out->values.clear();
    return true;
  }
  return ParseList(text, &out->values, error,
                   [](const std::string& item, c10::ScalarType* t, std::string* e) {
                     absl::StatusOr<c10::ScalarType> dtype = ParseDtype(item);
                     if (dtype.ok()) {
                       *t = *dtype;
                       return true;
                     }
                     *e = std::string(dtype.status().message());
                     return false;
                   });
}
std::string AbslUnparseFlag(const DtypeList& v) {
  std::vector<std::string> names;
  for (const c10::ScalarType t : v.values) names.push_back(DtypeName(t));
  return absl::StrJoin(names, ",");
}

bool AbslParseFlag(absl::string_view text, MemoryFormats* out, std::string* error) {
  return ParseTwoNames(text, "memory format", "contiguous", "channels_last",
                       &out->channels_last, error);
}
std::string AbslUnparseFlag(const MemoryFormats& v) {
  return UnparseTwoNames(v.channels_last, "contiguous", "channels_last");
}

bool AbslParseFlag(absl::string_view text, SwitchList* out, std::string* error) {
  if (absl::StripAsciiWhitespace(text) == "both") {  // as the help says
    out->values = {false, true};
    return true;
  }
  return ParseList(text, &out->values, error,
                   [](const std::string& item, bool* value, std::string* e) {
                     for (const auto& [name, v] : SwitchChoices()) {
                       if (item == name) {
                         *value = v;
                         return true;
                       }
                     }
                     *e = absl::StrCat("unknown value '", item,
                                       "'; valid: false, true, or both");
                     return false;
                   });
}
std::string AbslUnparseFlag(const SwitchList& v) {
  std::vector<std::string> names;
  for (const bool b : v.values) names.push_back(b ? "true" : "false");
  return absl::StrJoin(names, ",");
}

bool AbslParseFlag(absl::string_view text, Switch* out, std::string* error) {
  return ParseChoice(text, SwitchChoices(), &out->value, error);
}
std::string AbslUnparseFlag(const Switch& v) { return v.value ? "true" : "false"; }

bool AbslParseFlag(absl::string_view text, Count* out, std::string* error) {
  int64_t v = 0;
  if (!ParseWhole(text, 0, &v, error)) return false;
  out->value = static_cast<int>(v);
  return true;
}
std::string AbslUnparseFlag(const Count& v) { return absl::StrCat(v.value); }

bool AbslParseFlag(absl::string_view text, PositiveCount* out, std::string* error) {
  int64_t v = 0;
  if (!ParseWhole(text, 1, &v, error)) return false;
  out->value = static_cast<int>(v);
  return true;
}
std::string AbslUnparseFlag(const PositiveCount& v) { return absl::StrCat(v.value); }

bool AbslParseFlag(absl::string_view text, Seconds* out, std::string* error) {
  if (!NotAList(text, error)) return false;
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v) || v < 0) {
    *error = "valid: a number of seconds >= 0";
    return false;
  }
  out->value = v;
  return true;
}
std::string AbslUnparseFlag(const Seconds& v) { return absl::StrCat(v.value); }

bool AbslParseFlag(absl::string_view text, PeakFlopsValue* out, std::string* error) {
  if (text.empty()) {
    out->per_dtype.clear();
    return true;
  }
  absl::StatusOr<std::map<c10::ScalarType, double>> v = ParsePeakFlops(std::string(text));
  if (!v.ok()) {
    *error = std::string(v.status().message());
    return false;
  }
  out->per_dtype = *std::move(v);
  return true;
}
std::string AbslUnparseFlag(const PeakFlopsValue& v) {
  std::vector<std::string> pairs;
  for (const auto& [dtype, value] : v.per_dtype) {
    pairs.push_back(absl::StrCat(DtypeName(dtype), "=", value));
  }
  return absl::StrJoin(pairs, ",");
}

bool AbslParseFlag(absl::string_view text, PeakBandwidthValue* out, std::string* error) {
  if (text.empty()) {
    out->value = 0;
    return true;
  }
  absl::StatusOr<double> v = ParsePeakBandwidth(std::string(text));
  if (!v.ok()) {
    *error = std::string(v.status().message());
    return false;
  }
  out->value = *v;
  return true;
}
std::string AbslUnparseFlag(const PeakBandwidthValue& v) {
  return v.value > 0 ? absl::StrCat(v.value) : "";
}

bool AbslParseFlag(absl::string_view text, OptionalPositive* out, std::string* error) {
  if (text.empty()) {
    out->value = 0;
    return true;
  }
  return ParseWhole(text, 1, &out->value, error);
}
std::string AbslUnparseFlag(const OptionalPositive& v) {
  return v.value > 0 ? absl::StrCat(v.value) : "";
}

bool AbslParseFlag(absl::string_view text, MallocMode* out, std::string* error) {
  return ParseChoice(text, MallocChoices(), out, error);
}
std::string AbslUnparseFlag(const MallocMode& v) {
  return UnparseChoice(MallocChoices(), v);
}

bool AbslParseFlag(absl::string_view text, DataSource* out, std::string* error) {
  return ParseChoice(text, DataChoices(), out, error);
}
std::string AbslUnparseFlag(const DataSource& v) {
  return UnparseChoice(DataChoices(), v);
}

bool AbslParseFlag(absl::string_view text, CpuLinearList* out, std::string* error) {
  return ParseTwoNames(text, "linear path", "aten", "onednn", &out->packed, error);
}
std::string AbslUnparseFlag(const CpuLinearList& v) {
  return UnparseTwoNames(v.packed, "aten", "onednn");
}

bool AbslParseFlag(absl::string_view text, QuantList* out, std::string* error) {
  if (text.empty()) {  // OptionsFromFlags says a list is needed
    out->values.clear();
    return true;
  }
  return ParseList(text, &out->values, error,
                   [](const std::string& item, QuantKind* kind, std::string* e) {
                     for (size_t i = 0; i < std::size(kQuantNames); ++i) {
                       if (item == kQuantNames[i]) {
                         *kind = static_cast<QuantKind>(i);
                         return true;
                       }
                     }
                     *e = absl::StrCat("unknown quantisation '", item,
                                       "'; valid: ", absl::StrJoin(kQuantNames, ", "));
                     return false;
                   });
}
std::string AbslUnparseFlag(const QuantList& v) {
  std::vector<std::string> names;
  for (const QuantKind k : v.values) names.push_back(kQuantNames[static_cast<int>(k)]);
  return absl::StrJoin(names, ",");
}

bool AbslParseFlag(absl::string_view text, QuantGroups* out, std::string* error) {
  if (text.empty()) {
    out->values.clear();
    return true;
  }
  return ParseList(
      text, &out->values, error, [](const std::string& item, int64_t* g, std::string* e) {
        if (absl::SimpleAtoi(item, g) &&
            std::find(std::begin(kQuantGroups), std::end(kQuantGroups), *g) !=
                std::end(kQuantGroups)) {
          return true;
        }
        *e = absl::StrCat("unknown group size '", item,
                          "'; valid: ", absl::StrJoin(kQuantGroups, ", "));
        return false;
      });
}
std::string AbslUnparseFlag(const QuantGroups& v) { return absl::StrJoin(v.values, ","); }

std::vector<const absl::CommandLineFlag*> SuiteFlags() {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!DefinedByAbseil(*flag)) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return std::make_pair(a->Filename(), a->Name()) <
                     std::make_pair(b->Filename(), b->Name());
            });
  return flags;
}

namespace {

// Names carry a rate or a bound as StrCat writes a double, to six
// significant digits: a value that it rounds is refused, so that two
// settings never share a name nor a name says another value than ran.
absl::Status NamedAsGiven(absl::string_view flag, double value) {
  double named = 0;
  if (absl::SimpleAtod(absl::StrCat(value), &named) && named == value) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", absl::StrFormat("%.15g", value),
                   ": a benchmark's name holds it to six significant digits (", value,
                   "), another value; give it in six"));
}

std::string ValidFlags() {
  std::vector<std::string> names;
  for (const absl::CommandLineFlag* flag : SuiteFlags()) {
    names.push_back(absl::StrCat("--", flag->Name()));
  }
  return absl::StrJoin(names, ", ");
}

absl::CommandLineFlag* FindSuiteFlag(absl::string_view name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr || DefinedByAbseil(*flag)) return nullptr;
  return flag;
}

}  // namespace

absl::Status SetSuiteFlag(absl::string_view name, absl::string_view value) {
  absl::CommandLineFlag* flag = FindSuiteFlag(name);
  if (flag == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown flag '--", name, "'; bench flags: ", ValidFlags(),
                     "; Google Benchmark flags start with --benchmark_ (see --help)"));
  }
  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    // Abseil prefixes the type's own message with what this one says already.
    if (absl::StartsWith(error, "Illegal value")) {
      const size_t end = error.find("; ");
      if (end != std::string::npos) error.erase(0, end + 2);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("bad --", name, " value '", value, "': ", error));
  }
  return absl::OkStatus();
}

namespace {
std::set<std::string>& GivenFlags() {
  static auto* given = new std::set<std::string>;
  return *given;
}
}  // namespace

bool SuiteFlagGiven(absl::string_view name) {
  return GivenFlags().count(std::string(name)) > 0;
}

absl::Status ParseSuiteFlags(int argc, char** argv) {
  // What was given is this command line's: a second parse forgets the first's.
  GivenFlags().clear();
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", argv[i],
                                                     "'; bench flags: ", ValidFlags()));
    }
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    if (eq == absl::string_view::npos) {
      const absl::CommandLineFlag* flag = FindSuiteFlag(name);
      if (flag != nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value, as --", name, "=VALUE (default '",
                         flag->DefaultValue(), "'): ", flag->Help()));
      }
    }
    const absl::Status set =
        SetSuiteFlag(name, eq == absl::string_view::npos ? "" : arg.substr(eq + 1));
    if (!set.ok()) return set;
    GivenFlags().insert(std::string(name));
  }
  return absl::OkStatus();
}

void PrintSuiteHelp() {
  benchmark::PrintDefaultHelp();
  std::fprintf(stdout,
               "\nbench flags (lists are comma-separated and expand into a sweep):\n");
  for (const absl::CommandLineFlag* flag : SuiteFlags()) {
    std::fprintf(stdout, "  --%s=%s\n      %s\n", std::string(flag->Name()).c_str(),
                 flag->DefaultValue().c_str(), flag->Help().c_str());
  }
  std::fprintf(stdout,
               "\nWith no --benchmark_filter the default suite runs; "
               "--benchmark_filter=all runs everything.\n");
}

absl::StatusOr<SuiteOptions> OptionsFromFlags() {
  // A value reaches names, the context and messages: the JSON results hold
  // UTF-8 text alone, and one other byte would make the whole file unreadable.
  for (const absl::CommandLineFlag* flag : SuiteFlags()) {
    const std::string value = flag->CurrentValue();
    if (ValidUtf8(value) != value) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag->Name(), "=", ValidUtf8(value),
                       " is not UTF-8 text, which the JSON results cannot hold: "
                       "rename the file or folder"));
    }
  }
  // A path given empty ("--weights=$UNSET") would run as if it were left
  // out: random weights, no model files, no profile.
  for (const auto& [name, empty] :
       {std::pair<const char*, bool>{"weights", absl::GetFlag(FLAGS_weights).empty()},
        {"eval_tokens", absl::GetFlag(FLAGS_eval_tokens).empty()},
        {"compiled", absl::GetFlag(FLAGS_compiled).empty()},
        {"model", absl::GetFlag(FLAGS_model).empty()},
        {"inputs", absl::GetFlag(FLAGS_inputs).empty()},
        {"data_dir", absl::GetFlag(FLAGS_data_dir).empty()},
        {"profile", absl::GetFlag(FLAGS_profile).empty()},
        {"serve_log_dir", absl::GetFlag(FLAGS_serve_log_dir).empty()}}) {
    if (empty && SuiteFlagGiven(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "= is empty: give a path, or leave the flag out"));
    }
  }
  SuiteOptions o;
  Sweep& sweep = o.sweep;
  sweep.devices = absl::GetFlag(FLAGS_devices).values;
  sweep.batches = absl::GetFlag(FLAGS_batch).values;
  sweep.seqs = absl::GetFlag(FLAGS_seq).values;
  const std::vector<int64_t> prompts = absl::GetFlag(FLAGS_prompt).values;
  // Not given: the default (in the default suite the CPU's may be shorter).
  if (SuiteFlagGiven("prompt")) sweep.prompts = prompts;
  sweep.depths = absl::GetFlag(FLAGS_depth).values;
  const std::vector<int64_t> new_tokens = absl::GetFlag(FLAGS_new_tokens).values;
  // Not given: the default (in the default suite the CPU generates fewer).
  if (SuiteFlagGiven("new_tokens")) sweep.new_tokens = new_tokens;
  sweep.channels_last = absl::GetFlag(FLAGS_memory_format).channels_last;
  sweep.tf32 = absl::GetFlag(FLAGS_tf32).values;
  sweep.graphs = absl::GetFlag(FLAGS_cuda_graphs).values;
  sweep.dtypes = absl::GetFlag(FLAGS_dtype).values;
  o.dtypes_given = SuiteFlagGiven("dtype");
  sweep.sync = absl::GetFlag(FLAGS_sync).value;
  sweep.bucket_mb = absl::GetFlag(FLAGS_bucket_mb).value;
  sweep.pack_cpu_linears = absl::GetFlag(FLAGS_cpu_linear).packed;
  const std::vector<QuantKind> quants = absl::GetFlag(FLAGS_quant).values;
  const std::vector<int64_t> groups = absl::GetFlag(FLAGS_quant_group).values;
  sweep.quants.clear();
  for (const QuantKind kind : quants) {
    if (kind != QuantKind::kInt4) {
      sweep.quants.push_back({kind, 0});
      continue;
    }
    for (const int64_t g : groups) sweep.quants.push_back({kind, g});
  }
  sweep.compiled_dir = absl::GetFlag(FLAGS_compiled);
  sweep.weights = absl::GetFlag(FLAGS_weights);
  // Lists that default to a value must not be emptied ("--dtype=").
  for (const auto& [name, empty] :
       {std::pair<const char*, bool>{"prompt", prompts.empty()},
        {"new_tokens", new_tokens.empty()},
        {"depth", sweep.depths.empty()},
        {"memory_format", sweep.channels_last.empty()},
        {"tf32", sweep.tf32.empty()},
        {"cuda_graphs", sweep.graphs.empty()},
        {"cpu_linear", sweep.pack_cpu_linears.empty()},
        {"quant", quants.empty()},
        {"quant_group", groups.empty()},
        {"dtype", sweep.dtypes.empty()}}) {
    if (empty) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " needs at least one value"));
    }
  }

  ServeSettings& serve = sweep.serve;
  serve.phase = absl::GetFlag(FLAGS_serve_phase);
  serve.latency_bound_ms = absl::GetFlag(FLAGS_latency_bound_ms);
  if (SuiteFlagGiven("latency_bound_ms") && !BoundInNanoseconds(serve.latency_bound_ms)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--latency_bound_ms=", absl::GetFlag(FLAGS_latency_bound_ms), kBoundMustBe));
  }
  if (absl::Status named = NamedAsGiven("latency_bound_ms", serve.latency_bound_ms);
      !named.ok()) {
    return named;
  }
  serve.samples_per_query = absl::GetFlag(FLAGS_samples_per_query);
  serve.min_s = absl::GetFlag(FLAGS_serve_min_s);
  serve.min_queries = absl::GetFlag(FLAGS_serve_min_queries);
  serve.max_batch = absl::GetFlag(FLAGS_max_batch);
  serve.batch_timeout_us = absl::GetFlag(FLAGS_batch_timeout_us);
  serve.log_dir = absl::GetFlag(FLAGS_serve_log_dir);
  for (const auto& [flag, text, min, max] :
       {std::tuple{"prompt_len", absl::GetFlag(FLAGS_prompt_len), &serve.prompt_min,
                   &serve.prompt_max},
        std::tuple{"output_len", absl::GetFlag(FLAGS_output_len), &serve.output_min,
                   &serve.output_max}}) {
    if (text.empty() && !SuiteFlagGiven(flag)) continue;  // given empty: refused below
    absl::StatusOr<std::pair<int64_t, int64_t>> range =
        ParseLengthRange(flag, text, std::string(flag) == "output_len" ? 2 : 1);
    if (!range.ok()) return range.status();
    *min = range->first, *max = range->second;
    if (!SuiteFlagGiven("serve_phase")) serve.phase = "generate";
  }
  serve.ttft_bound_ms = absl::GetFlag(FLAGS_ttft_bound_ms);
  serve.tpot_bound_ms = absl::GetFlag(FLAGS_tpot_bound_ms);
  // 0 is the flags' "not given": given, it would quietly be LoadGen's 100 ms.
  for (const auto& [flag, bound] :
       {std::pair<const char*, double>{"ttft_bound_ms", serve.ttft_bound_ms},
        {"tpot_bound_ms", serve.tpot_bound_ms}}) {
    if (SuiteFlagGiven(flag) && !BoundInNanoseconds(bound)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=", bound, kBoundMustBe));
    }
    if (absl::Status named = NamedAsGiven(flag, bound); !named.ok()) return named;
  }
  serve.find_peak = absl::GetFlag(FLAGS_find_peak);
  serve.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  if (SuiteFlagGiven("prefill_chunk") && serve.phase != "generate") {
    return absl::InvalidArgumentError(
        "--prefill_chunk: prompts are chunked only in serve of generate; valid: with "
        "--serve_phase=generate, --prompt_len or --output_len");
  }
  // The settings of served generation, given beside another phase served,
  // would be left unread.
  for (const char* flag :
       {"prompt_len", "output_len", "ttft_bound_ms", "tpot_bound_ms"}) {
    if (SuiteFlagGiven(flag) && serve.phase != "generate") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " applies to serve of generate alone",
          serve.phase.empty() ? "" : absl::StrCat(", not --serve_phase=", serve.phase),
          "; valid: with --serve_phase=generate, --prompt_len or --output_len"));
    }
  }
  if (SuiteFlagGiven("latency_bound_ms") && serve.phase == "generate") {
    return absl::InvalidArgumentError(
        "--latency_bound_ms bounds a served batch's latency, which served generation "
        "does not have; valid: --ttft_bound_ms and --tpot_bound_ms");
  }
  sweep.serve_qps.clear();
  for (const std::string& item : SplitList(absl::GetFlag(FLAGS_target_qps))) {
    double qps = 0;
    if (!absl::SimpleAtod(item, &qps) || !(qps > 0) || std::isinf(qps)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--target_qps: '", item,
                       "' is not a rate; valid: numbers > 0 (queries a second), "
                       "comma-separated"));
    }
    if (absl::Status named = NamedAsGiven("target_qps", qps); !named.ok()) return named;
    if (std::find(sweep.serve_qps.begin(), sweep.serve_qps.end(), qps) ==
        sweep.serve_qps.end()) {
      sweep.serve_qps.push_back(qps);
    }
  }
  if (sweep.serve_qps.empty()) {
    return absl::InvalidArgumentError("--target_qps needs at least one value");
  }
  for (const absl::string_view scenario :
       absl::StrSplit(absl::GetFlag(FLAGS_scenario), ',', absl::SkipWhitespace())) {
    ServeSettings check = serve;
    check.scenario = std::string(absl::StripAsciiWhitespace(scenario));
    check.find_peak = serve.find_peak && check.scenario == "Server";
    for (const double qps : sweep.serve_qps) {  // Offline's query grows with each
      check.target_qps = qps;
      if (absl::Status valid = ValidateServe(check); !valid.ok()) return valid;
    }
    if (absl::Status valid = ValidateTextServe(check); !valid.ok()) return valid;
    if (std::find(sweep.serve_scenarios.begin(), sweep.serve_scenarios.end(),
                  check.scenario) == sweep.serve_scenarios.end()) {
      sweep.serve_scenarios.push_back(check.scenario);
    }
  }
  if (serve.find_peak &&
      std::find(sweep.serve_scenarios.begin(), sweep.serve_scenarios.end(), "Server") ==
          sweep.serve_scenarios.end()) {
    return absl::InvalidArgumentError(
        "--find_peak=true: LoadGen searches a peak QPS in the Server scenario only; "
        "valid: --scenario=Server (alone or among others)");
  }
  // Every served request starts from an empty slot: served generation runs
  // at depth 0, which --depth must keep.
  if (serve.phase == "generate" && !sweep.serve_scenarios.empty() &&
      std::find(sweep.depths.begin(), sweep.depths.end(), 0) == sweep.depths.end()) {
    return absl::InvalidArgumentError(
        "--depth: served generation starts every request from an empty slot, at depth "
        "0, which --depth leaves out; valid: --depth with 0 among its values, or left "
        "out");
  }
  // Without --scenario nothing serves, but a bad serve value is refused all
  // the same, as every flag's is.
  if (sweep.serve_scenarios.empty()) {
    ServeSettings check = serve;
    check.scenario = "Server";
    check.target_qps = sweep.serve_qps.front();
    check.find_peak = false;
    if (absl::Status valid = ValidateServe(check); !valid.ok()) return valid;
  }

  o.threads.intra_op = absl::GetFlag(FLAGS_threads).value;
  o.threads.inter_op = absl::GetFlag(FLAGS_interop_threads).value;
  o.malloc = absl::GetFlag(FLAGS_malloc);
  o.peak_flops = absl::GetFlag(FLAGS_peak_flops).per_dtype;
  o.peak_bandwidth = absl::GetFlag(FLAGS_peak_bandwidth).value;
  o.peak_cache = absl::GetFlag(FLAGS_peak_cache);
  if (o.peak_cache.empty()) o.peak_cache = DefaultPeakCachePath();
  if (o.peak_cache != "off") {
    std::error_code ec;
    if (std::filesystem::is_directory(o.peak_cache, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--peak_cache=", o.peak_cache,
          " is a directory; valid: a file to keep the peaks in (made if missing), "
          "or off"));
    }
  }

  RunOptions& run = o.run;
  run.warmup_seconds = absl::GetFlag(FLAGS_warmup_s).value;
  run.warmup_steps = absl::GetFlag(FLAGS_warmup_steps).value;
  run.warmup_epochs = absl::GetFlag(FLAGS_warmup_epochs).value;
  run.profile_dir = absl::GetFlag(FLAGS_profile);
  run.profile_steps = absl::GetFlag(FLAGS_profile_steps).value;
  run.print_tokens = absl::GetFlag(FLAGS_print_tokens).value;
  run.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed).value);
  run.memory_guard = absl::GetFlag(FLAGS_memory_guard).value;
  run.eval_tokens = absl::GetFlag(FLAGS_eval_tokens);
  if (!run.eval_tokens.empty()) {
    if (absl::Status read = ReadEvalTokens(run.eval_tokens).status(); !read.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--eval_tokens: ", read.message()));
    }
  }

  EpochSettings& epochs = o.epochs;
  epochs.dataset_samples = absl::GetFlag(FLAGS_dataset_samples).value;
  epochs.shard_mb = absl::GetFlag(FLAGS_shard_mb).value;
  epochs.regenerate = absl::GetFlag(FLAGS_regenerate).value;
  epochs.data_dir = absl::GetFlag(FLAGS_data_dir);
  const bool disk =
      absl::GetFlag(FLAGS_data) == DataSource::kDisk || !epochs.data_dir.empty();
  epochs.data = disk ? "disk" : "memory";
  if (disk && epochs.data_dir.empty()) epochs.data_dir = UserCacheDir() + "/data";
  epochs.seed = run.seed;
  o.measured_epochs = absl::GetFlag(FLAGS_epochs).value;
  o.steps = static_cast<int>(absl::GetFlag(FLAGS_steps).value);
  o.dist_timeout_s = absl::GetFlag(FLAGS_dist_timeout_s).value;
  o.force_process_group = absl::GetFlag(FLAGS_force_process_group).value;
  o.list_families = absl::GetFlag(FLAGS_list_families).value;
  for (absl::string_view member :
       absl::StrSplit(absl::GetFlag(FLAGS_suite_skip), ',', absl::SkipEmpty())) {
    o.suite_skip.emplace_back(member);
  }

  FamilyOptions& families = o.families;
  // A model file's settings without a model file would be dropped unsaid.
  for (const char* flag : {"inputs", "flops_per_step"}) {
    if (SuiteFlagGiven(flag) && absl::GetFlag(FLAGS_model).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag,
                       " sets what a --model file runs, and no --model is "
                       "given: give the model files, or leave --",
                       flag, " out"));
    }
  }
  families.model_files = absl::GetFlag(FLAGS_model);
  families.model_inputs = absl::GetFlag(FLAGS_inputs);
  families.model_flops_per_step = absl::GetFlag(FLAGS_flops_per_step);
  families.d_model = absl::GetFlag(FLAGS_d_model).value;
  families.heads = absl::GetFlag(FLAGS_nhead).value;
  families.encoder_layers = absl::GetFlag(FLAGS_num_encoder_layers).value;
  families.decoder_layers = absl::GetFlag(FLAGS_num_decoder_layers).value;
  families.d_ff = absl::GetFlag(FLAGS_dim_feedforward).value;
  // One forward's FLOPs hold at one batch: given to a sweep, every batch but
  // one would divide the wrong count by its time.
  if (!families.model_flops_per_step.empty() && sweep.batches.size() > 1) {
    return absl::InvalidArgumentError(
        "--flops_per_step gives the FLOPs of one forward at one batch: give one --batch "
        "with it, or leave it out to have each batch's FLOPs counted");
  }
  return o;
}

}  // namespace ltb
