// One interface for every device kind. Each kind the suite runs on (the CPU,
// CUDA GPUs, Apple's MPS) is one DeviceBackend in this folder, and the rest
// of the suite asks the backend of a benchmark's device instead of switching
// on its type: how to name it, whether it is there, how to synchronise and
// time it, its memory, its profiler activity, its peaks, its collectives and
// what it can do. Tests may register a backend of their own.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/torch_compat.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace ltb {

struct DatasheetPeaks;

// What a device kind can do, for the parts of the suite that differ by it.
struct Capabilities {
  // The host itself: tensors share the machine's memory with the model's
  // construction, and the families' small CPU shapes apply.
  bool host = false;
  // oneDNN's packed linear layers (--cpu_linear=onednn).
  bool packed_linears = false;
  // Quantised linear layers (--quant): the activation dtypes LibTorch's
  // weight-only kernels take on this device (int8: _weight_int8pack_mm; int4:
  // _weight_int4pack_mm, or its _for_cpu twin); empty: no such kernel.
  std::vector<c10::ScalarType> int8_weight_dtypes;
  std::vector<c10::ScalarType> int4_weight_dtypes;
  // How int4 weights are packed: the CPU kernel's (int32 values 0..15, N x K)
  // or the GPUs' (two values a byte, N x K/2, in tiles).
  bool int4_cpu_packing = false;
  // FBGEMM's dynamic int8 linear (quantized::linear_dynamic): fp32
  // activations quantised at run time (x86 CPUs).
  bool dynamic_int8_linear = false;
  // Host <-> device copies cross a link (the Ops transfer benchmarks).
  bool host_transfers = false;
  // Step capture and replay as a graph.
  bool graphs = false;
  // Batches staged in page-locked host memory copy to the device faster.
  bool pinned_host_memory = false;
  // LibTorch's profiler records this device's kernels and copies.
  bool profiled_kernels = false;
  // Python PyTorch's optimizers default to multi-tensor (foreach) kernels
  // on this device (its _get_foreach_kernels_supported_devices).
  bool foreach_optimizers = false;
  // fp32 matmuls and convolutions can run as TF32 (SetTf32).
  bool tf32 = false;
};

// How the matmul peak of a device without a datasheet row is measured.
enum class PeakMethod {
  kMatmul,    // the fastest step of the Ops matmul shapes
  kCpuLimit,  // the highest of a register-resident loop and the GEMM paths
};

// Marks on one device's timeline; Intervals() waits for the last mark and
// returns the seconds between consecutive ones.
class StepClock {
 public:
  virtual ~StepClock() = default;
  virtual void Clear() = 0;
  virtual void Mark() = 0;
  virtual std::vector<double> Intervals() = 0;
};

// Samples a device's utilisation (and energy, where the device reports it)
// on a thread of its own while running.
class UtilSampler {
 public:
  virtual ~UtilSampler() = default;
  virtual void Start() = 0;
  virtual void Stop() = 0;
  virtual void Reset() = 0;
  // Mean utilisation in percent over the samples since Reset(), or -1.
  virtual double Mean() const = 0;
  // Samples taken since Reset().
  virtual long Samples() const = 0;
};

// A device's cumulative energy counter (NVML's total energy on a GPU, RAPL's
// package counters on a CPU).
class EnergyMeter {
 public:
  virtual ~EnergyMeter() = default;
  // Joules counted since the meter was made (wrap-arounds handled), or a
  // negative number when the counter could not be read.
  virtual double Joules() = 0;
  // Measurements shorter than this are too coarse for the counter's
  // update interval: no energy is reported for them.
  virtual double MinSeconds() const = 0;
  // Longer ones may have wrapped the counter more than once between two
  // readings: no energy either.
  virtual double MaxSeconds() const = 0;
  // What the counter covers, for the run's context.
  virtual std::string Covers() const = 0;
  // Which counter of its machine it reads: two meters of one machine with
  // the same source (RAPL's packages, one GPU two ranks share) read the same
  // joules.
  virtual std::string Source() const = 0;
};

// Steps captured as graphs on one device, sharing one memory pool, and
// replayed on the device's current stream: a whole step queued at the cost
// of one launch.
class StepGraphs {
 public:
  virtual ~StepGraphs() = default;
  // Captures what `step` queues as a new graph and returns its index. The
  // step must have run eagerly before (lazy initialisation cannot be
  // captured), must not wait on the device, and reads and writes the same
  // tensors at every replay.
  virtual size_t Capture(const std::function<void()>& step) = 0;
  virtual void Replay(size_t graph) = 0;
  // Bytes the graphs' memory pool holds beyond the live tensors in it: what
  // the replays write, which peak memory must count.
  virtual int64_t PoolBytes() const { return 0; }
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // Whether `device` belongs to this backend.
  virtual bool Owns(const c10::Device& device) const = 0;
  // The device `text` names when it is this backend's ("cuda:1"), an error
  // when it is this backend's kind with a bad index, nullopt when it is not
  // this backend's at all.
  virtual std::optional<absl::StatusOr<c10::Device>> Parse(
      const std::string& text) const = 0;
  // The accepted forms, for error messages: "cuda, cuda:N (N = 0, 1, ...)".
  virtual std::string Forms() const = 0;
  // The name in benchmark names: "cpu", "cuda", "cuda:1", "mps".
  virtual std::string Name(const c10::Device& device) const = 0;
  // "AMD EPYC 7B13", "NVIDIA H100 80GB HBM3".
  virtual std::string DisplayName(const c10::Device& device) const = 0;

  // Whether LibTorch can run on `device` now; when not, *why_not says why in
  // a sentence a user can act on.
  virtual bool Available(const c10::Device& device, std::string* why_not) const = 0;
  // This kind's devices present here, in order.
  virtual std::vector<c10::Device> Enumerate() const = 0;
  // Console lines (each ending in a newline) saying what is there or why not.
  virtual std::string Summary() const = 0;
  // Entries of the run's context ("cuda_runtime", "gpus", ...).
  virtual std::vector<std::pair<std::string, std::string>> Context() const { return {}; }

  virtual Capabilities Caps() const = 0;

  // Makes LibTorch ready to use `device`, as its first tensor there would
  // (CUDA's lazy initialisation: the runtime and the caching allocator), so
  // that its memory can be asked about before anything has run on it.
  // Idempotent; every benchmark calls it before its memory guard.
  virtual void Initialize(const c10::Device& device) const {}

  // Blocks until the work queued on `device` has finished.
  virtual void Synchronize(const c10::Device& device) const = 0;
  // Lets fp32 matmuls and convolutions run as TF32, or not (the default:
  // fp32 is fp32). Devices without TF32 ignore it.
  virtual void SetTf32(bool on) const {}
  // Whether `device` still runs work after a benchmark on it failed, or the
  // error that will fail everything on it from now on (a CUDA device-side
  // fault is sticky: the process cannot use the GPU again).
  virtual bool Usable(const c10::Device& device, std::string* why) const { return true; }
  // A clock for steps: with sync on, marks that measure the device's work
  // (events on a GPU, the host clock after a synchronisation elsewhere);
  // with sync off, the host clock as soon as the work is queued.
  virtual std::unique_ptr<StepClock> MakeClock(const c10::Device& device,
                                               bool sync) const;

  // Memory: what a new benchmark can still use and what the device has, in
  // bytes (-1: unknown); the peak of tensor memory since ResetPeakMemory (-1:
  // unknown); and giving cached memory back between benchmarks.
  virtual int64_t AvailableBytes(const c10::Device& device) const { return -1; }
  // What AvailableBytes cannot see, for the memory guard's refusal: "" when
  // it is the whole story, else a sentence (a VM whose memory grows as it
  // is used has more to give than it has now).
  virtual std::string AvailableNote(const c10::Device& device) const { return ""; }
  virtual int64_t TotalBytes(const c10::Device& device) const { return -1; }
  // The largest cache that keeps a step's data from one step to the next (a
  // CPU's last-level cache, a GPU's L2), in bytes; 0: unknown. A step that
  // works over less reads from it, not from memory: no mbu.
  virtual int64_t CacheBytes(const c10::Device& device) const { return 0; }
  virtual void ResetPeakMemory(const c10::Device& device) const {}
  virtual int64_t PeakMemory(const c10::Device& device) const { return -1; }
  virtual void ReleaseCache(const c10::Device& device) const {}

  // Whether a LibTorch profiler activity (libkineto's ActivityType number)
  // is this device being busy: kernels, copies and fills on a GPU.
  virtual bool BusyActivity(int kineto_activity) const { return false; }

  // Why `device` has no arithmetic of its own for `dtype` (fp32 as TF32
  // when `tf32`), or "" where it has: no mfu is then reported for it, and a
  // TF32 run is refused.
  virtual std::string ArithmeticGap(const c10::Device& device, c10::ScalarType dtype,
                                    bool tf32) const {
    return "";
  }
  // The datasheet row of `device`, or nullptr to measure its peaks.
  virtual const DatasheetPeaks* Datasheet(const c10::Device& device) const {
    return nullptr;
  }
  virtual PeakMethod FlopsPeakMethod() const { return PeakMethod::kMatmul; }

  // The device a data-parallel rank uses (binding the process to it), and
  // the collective backend of the ranks' process group, or an error saying
  // why there is none.
  virtual absl::StatusOr<c10::Device> BindRank(int local_rank) const = 0;
  // `timeout`: how long a collective waits for the other ranks.
  virtual absl::StatusOr<c10::intrusive_ptr<CommBackend>> MakeCollectives(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
      const std::string& host, std::chrono::milliseconds timeout) const = 0;
  // The collective backend's name for the context ("gloo", "nccl").
  virtual std::string CollectivesName() const = 0;

  // The device type autocast is switched on for.
  virtual c10::DeviceType AutocastType(const c10::Device& device) const {
    return device.type();
  }

  // An empty set of step graphs on `device` (Caps().graphs); throws where
  // the device has none.
  virtual std::unique_ptr<StepGraphs> MakeGraphs(const c10::Device& device) const;

  // The energy counter of `device`, or why there is none (a sentence).
  virtual absl::StatusOr<std::unique_ptr<EnergyMeter>> MakeEnergyMeter(
      const c10::Device& device) const {
    return absl::UnimplementedError("this device reports no energy");
  }

  // Utilisation sampler for `device`; nullptr when the device reports none.
  virtual std::unique_ptr<UtilSampler> MakeUtilSampler(const c10::Device& device) const {
    return nullptr;
  }
};

// The backend that owns `device`. Every device a user can name has one.
const DeviceBackend& BackendOf(const c10::Device& device);
// Every backend, in order: cpu, cuda, mps, then any a test registered.
std::vector<const DeviceBackend*> Backends();
// Registers a backend for tests; it is asked before the built-in ones and
// stays until the returned handle is destroyed.
class BackendRegistration {
 public:
  explicit BackendRegistration(std::unique_ptr<DeviceBackend> backend);
  ~BackendRegistration();
  BackendRegistration(const BackendRegistration&) = delete;
  BackendRegistration& operator=(const BackendRegistration&) = delete;

 private:
  const DeviceBackend* backend_;
};

// The host clock: with sync, `backend` synchronises before each mark.
std::unique_ptr<StepClock> HostClock(const DeviceBackend& backend,
                                     const c10::Device& device, bool sync);

}  // namespace ltb
