// What one benchmark measures (family, size, device, phase and settings) and
// the stable name tools and compare.py match results by.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"

namespace ltb {

// Inference phases run in eval mode without autograd, with weights, inputs
// and caches in the benchmark's dtype; training phases keep fp32 weights and
// run under autocast to the dtype.
enum class PhaseKind { kInference, kTraining };

// How Google Benchmark decides a benchmark's iterations.
enum class Iterations {
  kTimed,   // as many steps as --benchmark_min_time needs
  kEpochs,  // --epochs, one epoch an iteration (warm-up: --warmup_epochs)
};

// Linear layers' weights quantised for inference (--quant): none; int8 per
// output channel, symmetric (LibTorch's _weight_int8pack_mm); int4 in groups
// of `group` input elements with a scale and a zero each, as torchao's int4
// weight-only (_weight_int4pack_mm); int8 weights with activations quantised
// at run time (FBGEMM's quantized::linear_dynamic, what quantize_dynamic
// runs on x86).
enum class QuantKind { kNone, kInt8, kInt4, kInt8Dyn };

struct Quant {
  QuantKind kind = QuantKind::kNone;
  int64_t group = 0;  // int4: input elements sharing a scale and a zero

  bool none() const { return kind == QuantKind::kNone; }
  // "none", "int8", "int4:g32", "int8dyn": the flag's value and the name's part.
  std::string Name() const;
  bool operator==(const Quant& o) const { return kind == o.kind && group == o.group; }
  bool operator!=(const Quant& o) const { return !(*this == o); }
};

// The --quant names, in the flag's order.
inline constexpr const char* kQuantNames[] = {"none", "int8", "int4", "int8dyn"};
// The int4 group sizes --quant_group takes (Q4_0's blocks are 32).
inline constexpr int64_t kQuantGroups[] = {32, 64, 128};

// How train_epoch gets its data (--data, --data_dir, --dataset_samples, ...),
// the same for every benchmark of a run. What an epoch does is in its name
// where it is not the default: /dataset_samples:N (an epoch's steps),
// /data:disk (its batches read from storage) and, from storage,
// /shard_mb:N (the files they are read from).
inline constexpr int64_t kDefaultDatasetSamples = 128;
inline constexpr int64_t kDefaultShardMb = 128;
struct EpochSettings {
  std::string data = "memory";  // memory or disk
  std::string data_dir;         // disk: where the shards live
  int64_t dataset_samples = kDefaultDatasetSamples;
  int64_t shard_mb = kDefaultShardMb;
  bool regenerate = false;
  bool drop_page_cache = true;  // read shards from storage every epoch
  int prefetch_batches = 4;
  uint64_t seed = 0;
};

// The serve phase: another inference phase (serve_phase) run under MLPerf
// LoadGen's load in one of its scenarios, through a dynamic batcher
// (measure/serve.h). In the name: the scenario, Server's QPS, the largest
// batch, and where they are not the defaults MultiStream's samples a query,
// the batcher's wait (what the batches hold) and Server's p99 bounds.
inline constexpr int64_t kLoadGenSamplesPerQuery = 8;
inline constexpr int64_t kDefaultBatchTimeoutUs = 2000;
// LoadGen's p99 bounds in Server, where --latency_bound_ms,
// --ttft_bound_ms and --tpot_bound_ms are not given.
inline constexpr double kLoadGenBoundMs = 100;
// --target_qps's default: Server's arrival rate and Offline's expected one.
inline constexpr double kDefaultTargetQps = 10;

struct ServeSettings {
  std::string scenario;                   // SingleStream, MultiStream, Server, Offline
  std::string phase;                      // the inference phase served; "": each family's
  double target_qps = kDefaultTargetQps;  // Server: the arrival rate; Offline: expected
  double latency_bound_ms = 0;            // Server: p99 bound; 0: LoadGen's (100 ms)
  int64_t samples_per_query = 0;          // MultiStream; 0: LoadGen's (8)
  double min_s = 1;                       // LoadGen's min_duration
  int64_t min_queries = 32;               // LoadGen's min_query_count
  int64_t max_batch = 8;                  // the batcher's largest batch
  int64_t batch_timeout_us = kDefaultBatchTimeoutUs;  // how long a batch waits to fill
  std::string log_dir;  // LoadGen's logs, one folder a benchmark
  // generate: each request's prompt and output lengths, drawn uniformly
  // from [min, max] (seeded); the maxima are spec.prompt and
  // spec.new_tokens, which size every slot's cache. 0: fixed at the maxima.
  int64_t prompt_min = 0;
  int64_t output_min = 0;
  // --prompt_len's and --output_len's maxima, which the sweep makes
  // spec.prompt and spec.new_tokens; 0: --prompt's, --new_tokens'.
  int64_t prompt_max = 0;
  int64_t output_max = 0;
  double ttft_bound_ms = 0;  // Server: time to first token, p99; 0: LoadGen's
  double tpot_bound_ms = 0;  // Server: time per output token, p99; 0: LoadGen's
  bool find_peak = false;    // Server: LoadGen's FindPeakPerformance from target_qps
  // Prompt tokens prefilled between two decode steps at most (a prompt in
  // chunks); 0: every waiting request's whole prompt, one after another.
  int64_t prefill_chunk = 0;
};

// The samples of Offline's one query, as LoadGen sizes it
// (test_settings_internal.cc): the minimum query count, or 1.1 times the
// expected rate times the minimum duration (in whole milliseconds),
// whichever is more. What the query holds sets every latency: Offline's
// names carry it (/samples:N) where it is not the defaults'.
int64_t OfflineQuerySamples(const ServeSettings& serve);

// The scenarios --scenario takes, in LoadGen's order.
inline constexpr const char* kServeScenarios[] = {"SingleStream", "MultiStream", "Server",
                                                  "Offline"};
// The phase name of served benchmarks.
inline constexpr char kServe[] = "serve";

struct BenchSpec {
  std::string family;                          // "Transformer"
  std::string size;                            // "small"; for Ops, the operation
  std::string phase;                           // "forward"; for Ops, the shape
  PhaseKind kind = PhaseKind::kInference;      // the phase's, from its Case
  bool data_parallel = false;                  // the phase's, from its Case
  Iterations iterations = Iterations::kTimed;  // the phase's, from its Case
  bool phase_before_device = false;            // the family's naming
  // A compiled model runs instead of the eager one: "aoti" or "torchscript",
  // appended to the name; model_file is the file (suite families under
  // --compiled; the Model family knows its own files).
  std::string backend;
  std::string model_file;
  // --model's --inputs (their shapes, dtypes and ranges), as given;
  // empty: the file's own example inputs.
  std::string inputs;
  c10::Device device = c10::Device(c10::kCPU);
  c10::ScalarType dtype = c10::kFloat;
  int64_t batch = 0;       // 0: the family has no batch setting
  int64_t seq = 0;         // 0: the family has no sequence setting
  int64_t prompt = 0;      // generate: prompt tokens per sequence
  int64_t new_tokens = 0;  // generate: tokens generated per sequence
  // generate: tokens already in the key/value cache when the prompt starts
  // (filled once, outside the timed steps), as llama-bench's --n-depth.
  int64_t depth = 0;
  bool sync = true;
  bool channels_last = false;  // convolution models' input and weights
  // CPU inference phases run linear layers through oneDNN with packed
  // weights (families that support it); false: LibTorch's default path.
  bool pack_cpu_linears = false;
  // Inference phases of the language models: their linear layers' weights
  // quantised once, outside the timed steps (--quant).
  Quant quant;
  // fp32 matmuls and convolutions run as TF32 (devices with TF32 only).
  bool tf32 = false;
  // Steps replayed from CUDA graphs captured once (--cuda_graphs): a forward
  // phase's whole step, generation's decode steps.
  bool graph = false;
  // Data-parallel training phases: the gradient bucket cap, in MB, the
  // ranks of the process group (each runs --batch: the step's work grows
  // with them), and whether there is one (several ranks, or one forced).
  int64_t bucket_mb = 25;
  int world_size = 1;
  bool process_group = false;
  // --weights: a safetensors checkpoint (a file, a folder or its index)
  // loaded into the model instead of random weights; empty: random.
  std::string weights;
  // train_epoch: its dataset and how it is read (not in the name).
  EpochSettings epochs;
  // serve: the scenario and batcher (scenario empty: not a serve benchmark).
  ServeSettings serve;

  // Model families: Family/size/device/phase/batch:B/seq:T/dtype[/nosync];
  // TF32 (fp32 as TF32): .../fp32/tf32[...];
  // replayed graphs (--cuda_graphs): ...[/backend]/graph[/nosync];
  // data-parallel buckets other than 25 MB: .../bucket_mb:N[/nosync];
  // data-parallel phases over more than one rank: ...[/nosync]/ranks:N;
  // a checkpoint's weights (--weights): .../weights:NAME[/nosync], NAME the
  // file's name without .safetensors, or the folder's;
  // generation: .../batch:B/prompt:P/new:N[/depth:D]/dtype[/nosync];
  // convolution models in channels_last: .../dtype/channels_last[/nosync];
  // quantised weights (--quant): .../dtype/int8, .../dtype/int4:g32,
  // .../dtype/int8dyn;
  // packed oneDNN linears (--cpu_linear=onednn): .../dtype[/channels_last]/onednn;
  // compiled models: .../dtype/aoti or .../dtype/torchscript;
  // model files run on --inputs: .../aoti/inputs:SPEC, SPEC as given.
  // serve: Family/size/device/serve/scenario:S[/qps:Q]/max_batch:B[/seq:T]/dtype,
  // Q (Server only) the target QPS, B the batcher's largest batch; Server's
  // peak search (--find_peak): .../scenario:Server/find_peak_from:Q/...;
  // Server's p99 bounds where given and not LoadGen's 100 ms, after the
  // lengths: .../latency_bound_ms:M/dtype, generate's
  // .../ttft_bound_ms:M/tpot_bound_ms:M/dtype;
  // serve of generate: .../max_batch:B/prompt:P/output:N/dtype, P and N a
  // length or min:max, B the slots.
  // Families that name the phase first (Ops, whose phase is the shape):
  // Ops/op/shape/device/dtype[/nosync].
  std::string Name() const;
  bool training() const { return kind == PhaseKind::kTraining; }
  bool serving() const { return !serve.scenario.empty(); }
};

// The short name of a --weights path for benchmark names: the file's name
// without .safetensors, or the folder's name (of a folder, or of the index
// file or model.safetensors in it).
std::string WeightsName(const std::string& path);

}  // namespace ltb
