// A benchmark family: the sizes and phases it offers, what one benchmark of
// it will cost (planned before anything is allocated), and how to build the
// workload whose Step() the harness times. A family is registered with
// LTB_REGISTER_FAMILY (family/registry.h) in its own model file.
#pragma once

#include <ATen/core/Tensor.h>
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "family/spec.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace ltb {

// Generation's decoder as continuous batching drives it: `slots()` sequence
// slots, each a region of one key/value cache of `context()` positions,
// whose active ones are rows [0, S); each slot at a position of its own.
class SlotDecoder {
 public:
  virtual ~SlotDecoder() = default;
  virtual int64_t slots() const = 0;
  virtual int64_t context() const = 0;
  virtual int64_t vocab() const = 0;
  // Runs `tokens` (B, T) into slots [slot, slot + B) from `position` (whole
  // prompts of one length from 0, or a chunk of one prompt from where the
  // last one ended); the token after each row's (B, 1).
  virtual at::Tensor Prefill(const at::Tensor& tokens, int64_t slot,
                             int64_t position) = 0;
  // One decode step of slots [0, S): tokens (S, 1), row b fed at
  // positions[b]; the next tokens (S, 1).
  virtual at::Tensor Decode(const at::Tensor& tokens,
                            const std::vector<int64_t>& positions) = 0;
  // The same step in static shapes, which a graph can capture: positions
  // (S) on the device, every row attending over the first `keys` cached
  // positions (more than any row's position) under its own mask; nothing
  // in it waits for the device. The same tokens as Decode.
  virtual at::Tensor DecodeOver(const at::Tensor& tokens, const at::Tensor& positions,
                                int64_t keys) = 0;
  // Moves a sequence from slot `from` to `to` (its first `length` positions).
  virtual void Move(int64_t from, int64_t to, int64_t length) = 0;
  // Zeroes the cache, so that no slot reads what was never written.
  virtual void Clear() = 0;
};

// One timed unit of work with its inputs already on the device.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual void Step() = 0;
  // Workloads that time parts of a step (prefill, decode) accumulate them
  // from ResetStats() on and report them as named counter values.
  virtual void ResetStats() {}
  virtual std::vector<std::pair<std::string, double>> Counters() const { return {}; }
  // Called just before the first and just after the last timed step, outside
  // the clock: workloads that sample something during the measured steps
  // (GPU utilisation) start and stop it here.
  virtual void BeginMeasurement() {}
  virtual void EndMeasurement() {}
  // Runs one step outside the timed ones and returns what it computed: the
  // model's output, or the generated token ids. Undefined where a workload
  // has no single output. Compares a precision's results with fp32's.
  virtual at::Tensor Evaluate() { return {}; }
  // Generation: the prompt's token ids (B, P) Evaluate() continues, so that
  // --print_tokens shows what anyone needs to check the tokens; else undefined.
  virtual at::Tensor Prompt() const { return {}; }
  // Generation: the logits of the prompt's positions (B, P, V), computed
  // once outside the timed steps, so that quantised weights are checked on
  // their predictions as well as on their tokens; else undefined.
  virtual at::Tensor Logits() { return {}; }
  // Generation: the logits (B, T, V) of every position of `tokens` (B, T),
  // fed from position 0 in one plain forward, so that two runs' next-token
  // distributions are compared over the same tokens (teacher-forced);
  // else undefined.
  virtual at::Tensor Score(const at::Tensor& tokens) { return {}; }
  // Evaluate() returns next-token logits (..., V) (a language model's
  // forward): compared as distributions, not only as values.
  virtual bool EvaluatesLogits() const { return false; }
  // The tensors the workload computes with (parameters, buffers, caches),
  // by name, so that tests can check their dtypes.
  virtual std::vector<std::pair<std::string, at::Tensor>> Tensors() const { return {}; }
  // FLOPs of one step where the plan could not know them (a model file:
  // counted by LibTorch's profiler when built); 0: unknown.
  virtual double FlopsPerStep() const { return 0; }
  // Why FlopsPerStep() is 0 though a step computes (operators whose FLOPs
  // could not be counted), as the result's label says it; "": no reason.
  virtual std::string FlopsLeftOut() const { return {}; }
  // Bytes the workload holds outside LibTorch's allocators, which peak_mem
  // adds: an AOTInductor package's weights live in the package's own memory.
  virtual int64_t UntrackedBytes() const { return 0; }
  // What the result's label must say about how the measured steps ran where
  // it is not what the benchmark's name and the run's context promise (an
  // epoch's shards read from memory though dropped from the page cache);
  // "" when nothing.
  virtual std::string Caveat() const { return {}; }
  // Whether the workload replays graphs itself under spec.graph (generation
  // graphs its decode steps); otherwise the harness captures whole steps.
  virtual bool ReplaysItsOwnGraphs() const { return false; }
  // serve: the inputs of one step, batch first (B, ...), which the served
  // samples are made like; undefined where the workload cannot run a batch
  // it is given.
  virtual at::Tensor BatchInputs() const { return {}; }
  // serve: the model's output on `batch`, inputs like BatchInputs() of any
  // batch size, in inference mode.
  virtual at::Tensor RunBatch(const at::Tensor& batch) { return {}; }
  // serve of generation: the decoder in slots over the workload's cache
  // (spec.batch slots of prompt + new tokens positions); null elsewhere.
  virtual SlotDecoder* Slots() { return nullptr; }
};

// How far `out` is from `ref` (same shape, any devices): the largest absolute
// difference over the largest absolute value of `ref`.
double RelativeError(const at::Tensor& out, const at::Tensor& ref);

// A module's parameters and buffers, named "param:<name>" and "buffer:<name>".
std::vector<std::pair<std::string, at::Tensor>> ModuleTensors(
    const torch::nn::Module& module);

// What a benchmark needs, by kind, in bytes.
struct MemoryEstimate {
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t activations = 0;
  // Resident memory beyond the tensors counted above, where a family has
  // measured it: malloc's heap keeps blocks that freed tensors leave (bench
  // turns mmap off, --malloc=tuned), and kernels' own buffers are not
  // tensors. 0: not measured.
  int64_t overhead = 0;
  // Host memory to build the model before it is converted or moved: a
  // LibTorch module starts as fp32 tensors on the CPU (0: params x 4), a
  // decoder built for a checkpoint as its weights in the dtype they load in;
  // a transfer between host and device, its host copy.
  int64_t host_build = 0;
  int64_t Total() const {
    return weights + gradients + optimizer + activations + overhead;
  }
};

// What training holds of `params` parameters beside the activations: fp32
// weights (and their copies in the half dtype that autocast computes in),
// fp32 gradients, and `optimizer_states` fp32 tensors of the optimizer a
// parameter (AdamW's moments 2, SGD's momentum 1, none for forward_backward).
inline MemoryEstimate TrainingState(int64_t params, c10::ScalarType dtype,
                                    int64_t optimizer_states) {
  MemoryEstimate m;
  m.weights = params * 4 + (dtype == c10::kFloat ? 0 : params * 2);
  m.gradients = params * 4;
  m.optimizer = optimizer_states * params * 4;
  return m;
}

// AdamW's step holds temporaries beside its state: each parameter's
// denominator, sqrt(v) then its quotient by the bias correction. Stepped
// parameter by parameter (the CPU) two tensors of the largest parameter's
// size live at once; stepped with foreach kernels (CUDA), one fp32 tensor a
// parameter. They come once the backward has freed the activations, so a
// step needs the larger of the two (GPT2/small's train_step on the CPU held
// exactly 4 fp32 copies of its weights plus two of its embedding).
inline int64_t AdamWStepBytes(int64_t params, int64_t largest_param, bool foreach) {
  return foreach ? params * 4 : 2 * largest_param * 4;
}

// The overhead of a training step over the tensors it counts: half of them.
// Encoder/default's forward_backward on the CPU grew the resident set by 1.21
// to 1.32 times its counted tensors (batch 1 to 4, length 256 to 2048, fp32
// and bf16), the ratio rising with the length.
inline int64_t TrainingOverhead(const MemoryEstimate& counted) {
  return counted.Total() / 2;
}

// Plan::count_beyond_arithmetic's reasons. Convolutions: a kernel that skips
// the padding, or a Winograd or FFT algorithm (cuDNN's choice for some fp32
// shapes), does fewer products than a direct convolution. Causal attention:
// counted over every key, as the usual mfu formulas count it, where a fused
// causal kernel (LibTorch's scaled_dot_product_attention with is_causal)
// skips the masked half.
inline constexpr char kDirectConvolutionCount[] =
    "its FLOPs are counted as a direct convolution does them, over the padding too, "
    "and a kernel that skips the padding, or a Winograd or FFT algorithm (which cuDNN "
    "picks for some fp32 shapes), does fewer";
inline constexpr char kCausalAttentionCount[] =
    "its FLOPs count causal attention over every key, as the usual mfu formulas do, "
    "and a fused causal kernel skips the masked half";

// What a benchmark will do per step, known before it is built.
struct Plan {
  int64_t params = 0;
  double flops_per_step = 0;  // analytic; 0 when not meaningful
  double bytes_per_step = 0;  // memory traffic: the least a step moves
  // bytes_per_step crosses the host <-> device link (transfers): no mbu
  // against the device memory's bandwidth.
  bool bytes_cross_host_link = false;
  int64_t tokens_per_step = 0;
  int64_t samples_per_step = 0;
  double audio_seconds_per_step = 0;  // speech: audio_s/s and rtf
  // The workload reports weight_GB/s (decoding), so mbu needs the device's
  // bandwidth peak.
  bool reports_weight_bandwidth = false;
  // flops_per_step is 0 but the workload counts them when built
  // (Workload::FlopsPerStep): mfu needs the device's FLOP/s peak.
  bool counts_flops_when_built = false;
  // Why flops_per_step may exceed the arithmetic the kernels do (empty: it
  // does not), as a clause: kDirectConvolutionCount, kCausalAttentionCount.
  // Such a count never raises a measured peak, and a result whose mfu is
  // left out for passing the peak says this.
  std::string count_beyond_arithmetic;
  // Inference: the bytes of weights a step reads (a decode step, in
  // generation), in the run's dtype, before --quant, which the build
  // replaces by the quantised bytes it made; 0: not known. The workload
  // writes the bytes it reads into the result (weight_bytes), which the
  // tools' rooflines read rather than deriving them.
  double weight_bytes = 0;
  // Why the result has no mfu although it has FLOPs (a kernel whose peak
  // the suite does not measure); empty: mfu applies.
  std::string mfu_left_out;
  MemoryEstimate memory;

  // Moves bytes and does no counted arithmetic: its bytes/s is measured
  // against the bandwidth peak (mbu). A step with FLOPs counts its bytes for
  // its arithmetic intensity only: its operands can come from cache faster
  // than memory delivers them.
  bool MemoryBound() const { return bytes_per_step > 0 && flops_per_step <= 0; }
};

// Which settings a case's benchmark names and sweeps carry.
enum class Shape {
  kNone,      // Ops: no batch or sequence
  kBatch,     // batch only (images, a fixed audio window)
  kSequence,  // batch and seq
  kGenerate,  // batch, prompt and new tokens
};

// A phase: its name, whether it is inference or training (which decides
// grad mode, eval or train mode, and whether weights are converted to the
// dtype or kept in fp32 under autocast), the settings its names carry, and
// its iteration policy. workloads/phases.h has the phases families share.
struct Phase {
  std::string name;
  PhaseKind kind = PhaseKind::kInference;
  Shape shape = Shape::kSequence;
  Iterations iterations = Iterations::kTimed;
  // Under torchrun every rank takes this phase's steps together: fixed step
  // counts (--steps), one memory verdict for all ranks, throughput summed
  // over ranks, and a failure stops the run.
  bool data_parallel = false;
};

// One (size, phase) pair a family registers.
struct Case {
  Case() = default;
  Case(std::string size_, Phase phase_)
      : size(std::move(size_)), phase(std::move(phase_)) {}

  std::string size;
  Phase phase;
  bool sweeps_dtype = true;  // false: fp32 only
  // Runs fp32 matmuls or convolutions, which TF32 changes: swept over --tf32
  // on devices with TF32 (copies, transfers and elementwise ops are not).
  bool tf32 = true;
  // Inference whose step (or, in generation, whose decode step) can be
  // captured as a graph: swept over --cuda_graphs on devices with graphs.
  bool graphs = true;
  // Registered only on devices whose backend has host transfers (GPUs).
  bool needs_host_transfers = false;
  // Served where its family serves its phase (--scenario); false: its
  // inputs cannot be gathered into batches (a --model file of several).
  bool serves = true;
  int64_t fixed_prompt = 0;   // kGenerate: a prompt the model fixes (not --prompt)
  int64_t default_batch = 0;  // without --batch; 0: the family's
  std::optional<c10::ScalarType> dtype;  // the one dtype its model runs in
  std::string backend;                   // a compiled model's: "aoti", "torchscript"
  std::string inputs;  // --model's --inputs, as given; empty: the file's own
  benchmark::TimeUnit unit = benchmark::kMillisecond;
};

// Matmul shapes (m, k, n).
using MatmulShape = std::array<int64_t, 3>;

struct Family {
  std::string name;
  std::vector<std::string> sizes;
  std::vector<Phase> phases;
  // When set, registered instead of every size x phase.
  std::vector<Case> cases;
  // What the default suite runs: regular expressions for the part of the
  // name after "Family/" ("small/", "matmul/2048x2048/").
  std::vector<std::string> suite;
  // When registered, its suite is the whole default run (Model: the files
  // --model names are what the user asked to measure).
  bool replaces_default_suite = false;
  int64_t default_batch = 0;          // 0: no batch setting
  std::vector<int64_t> default_seqs;  // without --seq; empty: no sequence setting
  // The default suite's shapes on the CPU (0 or empty: the above): smaller,
  // so that it measures several steps of each benchmark on a few cores. A
  // filter or a sweep gets the defaults above on every device.
  int64_t suite_cpu_batch = 0;
  std::vector<int64_t> suite_cpu_seqs;
  int64_t suite_cpu_new_tokens = 0;  // generation, without --new_tokens
  int64_t suite_cpu_prompt = 0;      // generation, without --prompt
  // Its generate phase can start with tokens already in the cache: swept
  // over --depth (others run at depth 0 only).
  bool generates_at_depth = false;
  // Its models load a checkpoint's tensors by name (--weights); others
  // refuse a spec with weights.
  bool loads_weights = false;
  bool sweeps_memory_format = false;  // convolution models: --memory_format
  // Its models build their linear layers as PackableLinear: CPU inference
  // phases sweep --cpu_linear.
  bool packs_cpu_linears = false;
  // Its models' linear layers (PackableLinear) and output head can be
  // quantised: its phases sweep --quant (inference ones run it).
  bool quantizes = false;
  // Matmuls whose fastest step the measured FLOP/s peak of a device is at
  // least (Ops: every matmul it registers, so none of them exceeds the peak).
  std::vector<MatmulShape> peak_matmul_shapes;
  // Names read Family/size/phase/device/... (Ops/matmul/2048x2048/cpu/...).
  bool phase_before_device = false;
  // --scenario registers serve benchmarks of the cases of the phases it
  // serves (the first unless --serve_phase names another of them): a batch
  // phase's workload runs the batches it is given (Workload::RunBatch), a
  // generate phase's serves by continuous batching (Workload::Slots). A
  // family whose batch workload cannot builds a serving one with
  // `build_served`.
  bool serves = false;
  std::vector<std::string> serve_phases = {"forward"};
  std::function<std::unique_ptr<Workload>(const BenchSpec&)> build_served;
  // Numbers its runs depend on beyond the size cards and the shapes (a
  // decoder's context and depth chunk, an image's side, a learning rate,
  // an audio window's seconds), by name: `bench --list_families` prints
  // them, and the Python twin takes them from there rather than a copy.
  std::vector<std::pair<std::string, double>> constants;
  // Its size table as JSON text (each size's name, card parameter count and
  // every option of its model), for `bench --list_families`; unset: none.
  std::function<std::string()> size_cards;
  // Validates the spec and says what it will cost. flops_per_step 0 with
  // the workload's FlopsPerStep() > 0: counted when built.
  std::function<absl::StatusOr<Plan>(const BenchSpec&)> plan;
  // Builds the model and inputs on spec.device; may throw c10::Error.
  std::function<std::unique_ptr<Workload>(const BenchSpec&)> build;

  // `cases` if set, else every size with every phase.
  std::vector<Case> Cases() const;
  // The case of a size and phase; an error naming the valid ones.
  absl::StatusOr<Case> FindCase(const std::string& size, const std::string& phase) const;
  // `plan` for a spec of one of the family's cases; an error naming the
  // valid cases for any other.
  absl::StatusOr<Plan> PlanFor(const BenchSpec& spec) const;
};

// Copies what a phase decides (name, kind, iterations) into a spec.
void SetPhase(const Phase& phase, BenchSpec* spec);

}  // namespace ltb
