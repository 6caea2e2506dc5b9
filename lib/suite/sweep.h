// Expands the families and the sweep flags into the list of benchmarks to
// register, in an order that keeps one model's cases together, and builds
// the filter of the default suite.
#pragma once

#include <string>
#include <vector>

#include "family/family.h"

namespace ltb {

// Tokens generated per sequence without --new_tokens (and, in the default
// suite on the CPU, no suite_cpu_new_tokens).
constexpr int64_t kDefaultNewTokens = 100;
// Prompt tokens per sequence without --prompt (and, in the default suite on
// the CPU, no suite_cpu_prompt).
constexpr int64_t kDefaultPrompt = 32;

// The default suite's --benchmark_min_time (seconds) unless one is given:
// long enough that Google Benchmark measures at least three steps of every
// benchmark whose step takes up to about 3.3 s (the CPU's default shapes are
// chosen so), which it would otherwise measure once. Google Benchmark's
// second run takes lround(1.4 x min_time / first step) steps: three for a
// step up to 0.56 x min_time. At 5 s, Llama/1B's 2.74 s CPU step on a 2-core
// AVX2 EPYC was 2% under the line of two.
constexpr double kDefaultSuiteMinTime = 6;

struct Sweep {
  std::vector<c10::Device> devices;
  std::vector<int64_t> batches;       // empty: each family's default
  std::vector<int64_t> seqs;          // empty: each family's default
  std::vector<int64_t> prompts;       // empty: kDefaultPrompt, or the suite's CPU one
  std::vector<int64_t> new_tokens;    // empty: kDefaultNewTokens, or the suite's CPU one
  std::vector<int64_t> depths = {0};  // --depth: families that generate at a depth
  std::vector<c10::ScalarType> dtypes = {c10::kFloat};
  bool sync = true;
  int64_t bucket_mb = 25;      // --bucket_mb: data-parallel gradient buckets
  int world_size = 1;          // the process group's ranks (WORLD_SIZE)
  bool process_group = false;  // joined: several ranks, or --force_process_group
  std::vector<bool> pack_cpu_linears = {false};  // --cpu_linear: aten, onednn
  std::vector<Quant> quants = {Quant{}};         // --quant x --quant_group
  std::vector<bool> channels_last = {false};     // --memory_format
  std::vector<bool> tf32 = {false};              // --tf32: fp32 on devices with TF32
  std::vector<bool> graphs = {false};            // --cuda_graphs: devices with graphs
  std::string compiled_dir;                      // --compiled: tools/export's files
  std::string weights;                           // --weights: a checkpoint
  EpochSettings epochs;                          // train_epoch's data
  // --scenario: serve benchmarks of the serving families' forward cases, one
  // a scenario (and, for Server, a --target_qps); empty: none registered.
  std::vector<std::string> serve_scenarios;
  std::vector<double> serve_qps = {kDefaultTargetQps};
  ServeSettings serve;  // the batcher's and LoadGen's settings
  // The default suite: the CPU runs each family's smaller suite shapes, and
  // the other devices measure those too beside their own (when the run
  // includes the CPU), so that the speedup summary compares the same work.
  // Otherwise every device runs the families' defaults.
  bool default_suite = false;
};

struct Registration {
  const Family* family;
  BenchSpec spec;
  benchmark::TimeUnit unit = benchmark::kMillisecond;  // the case's
};

std::vector<Registration> ExpandSweep(const std::vector<Family>& families,
                                      const Sweep& sweep);

// Regex selecting each family's suite: what runs with no filter.
std::string DefaultSuiteFilter(const std::vector<Family>& families);

// The default suite's filter without the members `skip` names (Family/size,
// as --suite_skip takes them); an error naming the suite's members when one
// of `skip` is none of them.
absl::StatusOr<std::string> DefaultSuiteFilter(const std::vector<Family>& families,
                                               const std::vector<std::string>& skip);

// Whether Google Benchmark's --benchmark_filter selects a benchmark's full
// name: "all" or "." select everything, a leading '-' negates, otherwise an
// extended regular expression searched in the name.
bool FilterSelects(const std::string& filter, const std::string& full_name);

// Devices a --benchmark_filter names explicitly ("cuda", "cuda:1", "mps"),
// so that benchmarks on them are registered and report why they cannot run.
std::vector<c10::Device> DevicesNamedIn(const std::string& filter);

// Dtypes a --benchmark_filter names as a part of a name ("/bf16", "fp16/"),
// in the order fp32, bf16, fp16.
std::vector<c10::ScalarType> DtypesNamedIn(const std::string& filter);

}  // namespace ltb
