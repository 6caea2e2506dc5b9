// CUDA GPUs: named cuda, cuda:1, ...; timed by CUDA events; memory from the
// caching allocator; NCCL collectives; datasheet peaks. Everything that
// needs the CUDA runtime goes through cuda_runtime.h, which is a stub when
// LibTorch has no CUDA, so this file compiles everywhere.
#include <ATen/Context.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/torch_compat.h"
#include "device/backend.h"
#if LTB_HAS_C10D_BACKEND
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include "device/cuda_runtime.h"
#include "device/datasheets.h"
#include "device/telemetry.h"

namespace ltb {
namespace {

int Index(const c10::Device& device) { return device.has_index() ? device.index() : 0; }

class CudaBackend final : public DeviceBackend {
 public:
  // fp32 means fp32: LibTorch lets cuDNN run fp32 convolutions as TF32 by
  // default (and cuBLAS matmuls when asked), which would make fp32's mfu,
  // against the fp32 peak, exceed 1.
  CudaBackend() {
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
  }

  bool Owns(const c10::Device& device) const override {
    return device.type() == c10::kCUDA;
  }
  std::optional<absl::StatusOr<c10::Device>> Parse(
      const std::string& text) const override {
    if (text == "cuda") return absl::StatusOr<c10::Device>(c10::Device(c10::kCUDA, 0));
    absl::string_view rest = text;
    if (!absl::ConsumePrefix(&rest, "cuda:")) return std::nullopt;
    int index = -1;
    if (absl::SimpleAtoi(rest, &index) && index >= 0 && index < 64 &&
        absl::StrCat(index) == rest) {
      return absl::StatusOr<c10::Device>(
          c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)));
    }
    return absl::StatusOr<c10::Device>(
        absl::InvalidArgumentError(absl::StrCat("bad GPU index in '", text, "'")));
  }
  std::string Forms() const override { return "cuda, cuda:N (N = 0, 1, ...)"; }
  std::string Name(const c10::Device& device) const override {
    return device.index() <= 0 ? "cuda" : absl::StrCat("cuda:", device.index());
  }
  std::string DisplayName(const c10::Device& device) const override {
    return cuda::DeviceName(Index(device));
  }

  bool Available(const c10::Device& device, std::string* why_not) const override {
    if (!cuda::Compiled()) {
      *why_not =
          cuda::BuildNote().empty()
              ? "no CUDA device: this LibTorch was built without CUDA"
              : "no CUDA device: bench was built without its CUDA code (LTB_CUDA=OFF)";
      return false;
    }
    std::string why;
    const int count = cuda::DeviceCount(&why);
    if (count == 0 || !torch::cuda::is_available()) {
      *why_not =
          absl::StrCat("no CUDA device: LibTorch has CUDA ", cuda::RuntimeVersion(),
                       " but no GPU or driver was found (", why, ")");
      return false;
    }
    if (Index(device) >= count) {
      *why_not = absl::StrCat("no device ", Name(device), ": ", count,
                              " GPU(s) visible, cuda:0 to cuda:", count - 1);
      return false;
    }
    return true;
  }
  std::vector<c10::Device> Enumerate() const override {
    std::vector<c10::Device> out;
    if (!cuda::Compiled() || !torch::cuda::is_available()) return out;
    const int count = cuda::DeviceCount(nullptr);
    for (int i = 0; i < count; ++i) {
      out.emplace_back(c10::kCUDA, static_cast<c10::DeviceIndex>(i));
    }
    return out;
  }
  std::string Summary() const override {
    std::string why;
    if (!Available(c10::Device(c10::kCUDA, 0), &why)) {
      return absl::StrCat("cuda: ", why, "; CUDA benchmarks are not run\n");
    }
    std::string out;
    const int count = cuda::DeviceCount(nullptr);
    for (int i = 0; i < count; ++i) {
      absl::StrAppend(&out, "cuda:", i, ": ", cuda::DeviceName(i), "\n");
    }
    return out;
  }
  std::vector<std::pair<std::string, std::string>> Context() const override {
    if (!cuda::Compiled()) {
      const std::string note = cuda::BuildNote();
      return {
          {"cuda_runtime", note.empty() ? "none (LibTorch built without CUDA)" : note}};
    }
    std::string why;
    const int count = cuda::DeviceCount(&why);
    std::vector<std::string> gpus;
    for (int i = 0; i < count; ++i) gpus.push_back(cuda::DeviceName(i));
    const at::Context& ctx = at::globalContext();
    std::string energy = "none (no GPU)";
    if (count > 0) {
      absl::StatusOr<std::unique_ptr<EnergyMeter>> meter =
          MakeEnergyMeter(c10::Device(c10::kCUDA, 0));
      energy = meter.ok() ? (*meter)->Covers()
                          : absl::StrCat("none (", meter.status().message(), ")");
    }
    return {{"cuda_runtime", cuda::RuntimeVersion()},
            {"cuda_build", cuda::BuildNote()},
            {"gpu_energy", energy},
            {"cudnn", cuda::CudnnVersion()},
            {"cuda_tf32",
             absl::StrCat("matmul ", ctx.allowTF32CuBLAS() ? "on" : "off",
                          ", convolution ", ctx.allowTF32CuDNN() ? "on" : "off")},
            {"cudnn_benchmark", ctx.benchmarkCuDNN() ? "on" : "off"},
            {"gpus",
             count > 0 ? absl::StrJoin(gpus, "; ") : absl::StrCat("none (", why, ")")}};
  }

  Capabilities Caps() const override {
    Capabilities c;
    c.host_transfers = true;
    c.graphs = true;
    c.pinned_host_memory = true;
    c.profiled_kernels = true;
    c.foreach_optimizers = true;
    c.tf32 = true;
    // The int4 kernel (tinygemm) takes bf16 activations, on sm80 and later.
    c.int8_weight_dtypes = {c10::kFloat, c10::kBFloat16, c10::kHalf};
    c.int4_weight_dtypes = {c10::kBFloat16};
    return c;
  }

  void SetTf32(bool on) const override {
    at::globalContext().setAllowTF32CuBLAS(on);
    at::globalContext().setAllowTF32CuDNN(on);
  }

  std::unique_ptr<StepGraphs> MakeGraphs(const c10::Device& device) const override {
    return cuda::MakeGraphs(Index(device));
  }

  bool Usable(const c10::Device& device, std::string* why) const override {
    const std::string error = cuda::StickyError(Index(device));
    if (error.empty()) return true;
    if (why != nullptr) *why = error;
    return false;
  }

  void Initialize(const c10::Device&) const override { cuda::Initialize(); }
  void Synchronize(const c10::Device& device) const override {
    torch::cuda::synchronize(Index(device));
  }
  std::unique_ptr<StepClock> MakeClock(const c10::Device& device,
                                       bool sync) const override {
    if (!sync) return HostClock(*this, device, false);
    return cuda::MakeEventClock(Index(device));
  }

  int64_t AvailableBytes(const c10::Device& device) const override {
    return cuda::AvailableBytes(Index(device));
  }
  int64_t TotalBytes(const c10::Device& device) const override {
    return cuda::TotalBytes(Index(device));
  }
  int64_t CacheBytes(const c10::Device& device) const override {
    return cuda::L2CacheBytes(Index(device));
  }
  void ResetPeakMemory(const c10::Device& device) const override {
    cuda::ResetPeakAllocated(Index(device));
  }
  int64_t PeakMemory(const c10::Device& device) const override {
    return cuda::PeakAllocated(Index(device));
  }
  void ReleaseCache(const c10::Device&) const override { cuda::EmptyCache(); }

  // libkineto's GPU_MEMCPY (3), GPU_MEMSET (4) and CONCURRENT_KERNEL (5):
  // copies and fills keep the GPU as busy as kernels do.
  bool BusyActivity(int kineto_activity) const override {
    return kineto_activity == 3 || kineto_activity == 4 || kineto_activity == 5;
  }

  std::string ArithmeticGap(const c10::Device& device, c10::ScalarType dtype,
                            bool tf32) const override {
    const auto [major, minor] = cuda::ComputeCapability(Index(device));
    return CudaArithmeticGap(major, minor, dtype == c10::kBFloat16,
                             tf32 && dtype == c10::kFloat);
  }
  const DatasheetPeaks* Datasheet(const c10::Device& device) const override {
    return LookupDatasheet(DisplayName(device));
  }

  // A rank that sees one GPU (CUDA_VISIBLE_DEVICES set per process) uses it;
  // with several, LOCAL_RANK picks one.
  absl::StatusOr<c10::Device> BindRank(int local_rank) const override {
    std::string why;
    const int count = cuda::DeviceCount(&why);
    if (count == 0) {
      return absl::UnavailableError(
          absl::StrCat("data-parallel on CUDA: no GPU is visible (", why, ")"));
    }
    // Several ranks of a node that all see the same one GPU would all bind
    // it, and NCCL fails at the first collective ("Duplicate GPU"). One GPU
    // a rank through CUDA_VISIBLE_DEVICES (tools/launch sets it) is fine.
    int local_world = 1;
    if (const char* v = std::getenv("LOCAL_WORLD_SIZE"))
      (void)absl::SimpleAtoi(v, &local_world);
    if (count == 1 && local_world > 1 && std::getenv("CUDA_VISIBLE_DEVICES") == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data-parallel on CUDA: LOCAL_WORLD_SIZE=", local_world,
          " ranks on this node, but 1 GPU is visible to each; NCCL cannot run two ranks "
          "on one GPU: run one rank a GPU (--nproc_per_node=1 here), or give each rank "
          "its own GPU with CUDA_VISIBLE_DEVICES"));
    }
    const int index = count == 1 ? 0 : local_rank;
    if (index >= count) {
      return absl::InvalidArgumentError(
          absl::StrCat("data-parallel on CUDA: LOCAL_RANK=", local_rank, " but ", count,
                       " GPUs are visible (cuda:0 to cuda:", count - 1, "); run at most ",
                       count, " ranks a node, or one GPU a rank"));
    }
    cuda::SetDevice(index);
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  absl::StatusOr<c10::intrusive_ptr<CommBackend>> MakeCollectives(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
      const std::string&, std::chrono::milliseconds timeout) const override {
    c10::intrusive_ptr<CommBackend> nccl =
        cuda::MakeNcclBackend(store, rank, world_size, timeout);
    if (!nccl) {
      return absl::UnavailableError("this LibTorch has no NCCL backend for CUDA ranks");
    }
    return nccl;
  }
  std::string CollectivesName() const override { return "nccl"; }

  // A MIG instance shares its board's NVML counters with the other
  // instances: their work would count as its own.
  absl::StatusOr<std::unique_ptr<EnergyMeter>> MakeEnergyMeter(
      const c10::Device& device) const override {
    if (const std::string name = DisplayName(device); IsMigInstance(name)) {
      return absl::UnavailableError(absl::StrCat(
          name,
          " is a MIG instance: NVML's energy counter is the whole board's, every "
          "instance's work included"));
    }
    return GpuEnergyMeter::Create(cuda::PciBusId(Index(device)));
  }

  std::unique_ptr<UtilSampler> MakeUtilSampler(const c10::Device& device) const override {
    if (IsMigInstance(DisplayName(device))) return nullptr;
    return GpuUtilSampler::Create(cuda::PciBusId(Index(device)));
  }
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeCudaBackend() {
  return std::make_unique<CudaBackend>();
}

}  // namespace ltb
