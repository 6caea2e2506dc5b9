// Apple's MPS: one device, named mps, where LibTorch is built for macOS on
// Apple silicon; timed by the host clock after a synchronisation.

#include <string>

#include "base/torch_compat.h"
#if LTB_HAS_MPS_API
#include <torch/mps.h>
#endif

#include "absl/strings/str_cat.h"
#include "device/backend.h"
#if LTB_HAS_C10D_BACKEND
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace ltb {
namespace {

class MpsBackend final : public DeviceBackend {
 public:
  bool Owns(const c10::Device& device) const override {
    return device.type() == c10::kMPS;
  }
  std::optional<absl::StatusOr<c10::Device>> Parse(
      const std::string& text) const override {
    if (text == "mps") return absl::StatusOr<c10::Device>(c10::Device(c10::kMPS));
    return std::nullopt;
  }
  std::string Forms() const override { return "mps"; }
  std::string Name(const c10::Device&) const override { return "mps"; }
  std::string DisplayName(const c10::Device&) const override { return "Apple MPS"; }

  bool Available(const c10::Device&, std::string* why_not) const override {
#if !LTB_HAS_MPS_API
    *why_not = "no MPS device: LibTorch " TORCH_VERSION
               " has no C++ API to synchronise MPS (torch/mps.h, LibTorch 2.1)";
    return false;
#else
    if (!torch::mps::is_available()) {
      *why_not =
          "no MPS device: LibTorch reports MPS unavailable (MPS needs an "
          "Apple-silicon Mac and a LibTorch built for macOS)";
      return false;
    }
    return true;
#endif
  }
  std::vector<c10::Device> Enumerate() const override {
#if LTB_HAS_MPS_API
    if (torch::mps::is_available()) return {c10::Device(c10::kMPS)};
#endif
    return {};
  }
  std::string Summary() const override {
    std::string why;
    if (Available(c10::Device(c10::kMPS), &why)) return "mps: available\n";
    return absl::StrCat("mps: ", why, "\n");
  }
  // Where MPS runs, its results lack peak_mem and the memory guard checks
  // the host alone: the context says why, as gpu_energy does for NVML.
  std::vector<std::pair<std::string, std::string>> Context() const override {
    std::string why;
    if (!Available(c10::Device(c10::kMPS), &why)) return {};
    return {{"mps_memory",
             "no peak_mem, and the memory guard checks only the model's build in host "
             "memory: LibTorch's C++ API for MPS (torch/mps.h) reports no memory, and "
             "the Metal driver's allocated memory is the allocator's reserved pool, not "
             "the peak of tensor memory that peak_mem is on the CPU and CUDA"}};
  }
  Capabilities Caps() const override {
    Capabilities c;
    c.int8_weight_dtypes = {c10::kFloat, c10::kBFloat16, c10::kHalf};
    c.int4_weight_dtypes = {c10::kBFloat16, c10::kHalf};
    return c;
  }
  void Synchronize(const c10::Device&) const override {
#if LTB_HAS_MPS_API
    torch::mps::synchronize();
#endif
  }
  absl::StatusOr<c10::Device> BindRank(int) const override {
    return absl::UnimplementedError(
        "data-parallel runs on CPUs (Gloo) or CUDA GPUs (NCCL); LibTorch has no "
        "collective backend for MPS: pass --devices=cpu");
  }
  absl::StatusOr<c10::intrusive_ptr<CommBackend>> MakeCollectives(
      const c10::intrusive_ptr<c10d::Store>&, int, int, const std::string&,
      std::chrono::milliseconds) const override {
    return absl::UnimplementedError("LibTorch has no collective backend for MPS");
  }
  std::string CollectivesName() const override { return "none"; }
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeMpsBackend() { return std::make_unique<MpsBackend>(); }

}  // namespace ltb
