// Stand-in for cuda_runtime.cc when LibTorch was built without CUDA.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "base/torch_compat.h"
#if LTB_HAS_C10D_BACKEND
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <stdexcept>

#include "device/cuda_runtime.h"

namespace ltb::cuda {

bool Compiled() { return false; }
std::string RuntimeVersion() { return ""; }
std::string BuildNote() {
#ifdef LTB_CUDA_BUILD_NOTE
  return LTB_CUDA_BUILD_NOTE;  // "none (LTB_CUDA=OFF ...)" where LibTorch has CUDA
#else
  return "";
#endif
}
std::string CudnnVersion() { return ""; }
int DeviceCount(std::string* why) {
  if (why != nullptr) {
    *why = BuildNote().empty() ? "this LibTorch was built without CUDA"
                               : "bench was built without its CUDA code (LTB_CUDA=OFF)";
  }
  return 0;
}
std::string DeviceName(int) { return ""; }
std::string PciBusId(int) { return ""; }
void Initialize() {}
int64_t AvailableBytes(int) { return -1; }
void ResetPeakAllocated(int) {}
int64_t PeakAllocated(int) { return -1; }
void EmptyCache() {}
std::unique_ptr<StepClock> MakeEventClock(int) { return nullptr; }
std::unique_ptr<StepGraphs> MakeGraphs(int) {
  throw std::runtime_error("this build's LibTorch has no CUDA graphs");
}
void SetDevice(int) {}
std::string StickyError(int) { return ""; }
int64_t TotalBytes(int) { return -1; }
std::pair<int, int> ComputeCapability(int) { return {0, 0}; }
int64_t L2CacheBytes(int) { return 0; }
c10::intrusive_ptr<CommBackend> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>&,
                                                int, int, std::chrono::milliseconds) {
  return {};
}

}  // namespace ltb::cuda
