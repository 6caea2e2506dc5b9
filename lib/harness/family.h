// A benchmark family: the sizes and phases it offers, what one benchmark of
// it will cost (planned before anything is allocated), and how to build the
// workload whose Step() the harness times.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "harness/memory.h"
#include "harness/spec.h"

namespace ltb {

// One timed unit of work with its inputs already on the device.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual void Step() = 0;
  // Workloads that time parts of a step (prefill, decode) accumulate them
  // from ResetStats() on and report them as named counter values.
  virtual void ResetStats() {}
  virtual std::vector<std::pair<std::string, double>> Counters() const { return {}; }
};

// What a benchmark will do per step, known before it is built.
struct Plan {
  int64_t params = 0;
  double flops_per_step = 0;  // analytic; 0 when not meaningful
  double bytes_per_step = 0;  // memory traffic, for bandwidth-bound ops
  int64_t tokens_per_step = 0;
  int64_t samples_per_step = 0;
  double audio_seconds_per_step = 0;  // speech: audio_s/s and rtf
  MemoryEstimate memory;
};

// One (size, phase) pair a family registers.
// Which settings a case's benchmark names and sweeps carry.
enum class Shape {
  kNone,      // Ops: no batch or sequence
  kBatch,     // batch only (images, a fixed audio window)
  kSequence,  // batch and seq
  kGenerate,  // batch, prompt and new tokens
};

struct Case {
  std::string size;
  std::string phase;
  bool sweeps_dtype = true;  // false: fp32 only
  Shape shape = Shape::kSequence;
  bool cuda_only = false;    // registered for CUDA devices only
  int64_t fixed_prompt = 0;  // kGenerate: a prompt the model fixes (not --prompt)
};

struct Family {
  std::string name;
  std::vector<std::string> sizes;
  std::vector<std::string> phases;
  // When set, registered instead of every size x phase.
  std::vector<Case> cases;
  // What the default suite runs: regular expressions for the part of the
  // name after "Family/" ("small/", "matmul/2048x2048/").
  std::vector<std::string> suite;
  int64_t default_batch = 0;          // 0: no batch setting
  std::vector<int64_t> default_seqs;  // without --seq; empty: no sequence setting
  bool sweeps_memory_format = false;  // convolution models: --memory_format
  // Validates the spec and says what it will cost.
  std::function<absl::StatusOr<Plan>(const BenchSpec&)> plan;
  // Builds the model and inputs on spec.device; may throw c10::Error.
  std::function<std::unique_ptr<Workload>(const BenchSpec&)> build;

  // `cases` if set, else every size with every phase.
  std::vector<Case> Cases() const {
    if (!cases.empty()) return cases;
    std::vector<Case> all;
    for (const std::string& size : sizes) {
      for (const std::string& phase : phases) {
        all.push_back({size, phase, true,
                       phase == "generate" ? Shape::kGenerate : Shape::kSequence});
      }
    }
    return all;
  }
};

}  // namespace ltb
