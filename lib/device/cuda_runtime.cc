// CUDA runtime queries for the harness; compiled only when LibTorch has CUDA.
#include "device/cuda_runtime.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/detail/CUDAHooksInterface.h>

// The wheel's LibTorch is built with NCCL; its header declares the process
// group only under this macro.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "absl/strings/str_cat.h"
#include "device/graph_capture.h"

namespace ltb::cuda {
namespace {

std::string VersionString(long v, long major_div, long minor_div) {
  if (v <= 0) return "";
  return absl::StrCat(v / major_div, ".", (v % major_div) / minor_div);
}

}  // namespace

bool Compiled() { return true; }

std::string BuildNote() {
#ifdef LTB_CUDA_BUILD_NOTE
  return LTB_CUDA_BUILD_NOTE;
#else
  return "unknown (built outside lib/)";
#endif
}

std::string RuntimeVersion() {
  // The runtime LibTorch was built with, 1000 * major + 10 * minor; it may
  // differ from the toolkit this file was compiled with.
  return VersionString(at::detail::getCUDAHooks().versionCUDART(), 1000, 10);
}

std::string CudnnVersion() {
  if (!at::detail::getCUDAHooks().compiledWithCuDNN()) return "";
  const long v = at::detail::getCUDAHooks().versionCuDNN();
  // cuDNN 9 encodes major * 10000 + minor * 100 + patch.
  if (v <= 0) return "";
  return absl::StrCat(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

int DeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why != nullptr) *why = cudaGetErrorString(err);
    (void)cudaGetLastError();  // clear the sticky error for later queries
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "no CUDA-capable device is detected";
  return count;
}

std::string DeviceName(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "unknown";
  return prop.name;
}

std::pair<int, int> ComputeCapability(int index) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return {0, 0};
  }
  return {major, minor};
}

int64_t L2CacheBytes(int index) {
  int bytes = 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, index) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return bytes;
}

std::string PciBusId(int index) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof(id), index) != cudaSuccess) return "";
  return id;
}

namespace {

// at::Context::lazyInitDevice where this LibTorch has it (2.6 and later,
// which deprecate lazyInitCUDA), else lazyInitCUDA.
template <typename Context>
auto LazyInitCuda(Context& context, int) -> decltype(context.lazyInitDevice(c10::kCUDA)) {
  return context.lazyInitDevice(c10::kCUDA);
}
template <typename Context>
void LazyInitCuda(Context& context, long) {
  context.lazyInitCUDA();
}

}  // namespace

void Initialize() { LazyInitCuda(at::globalContext(), 0); }

int64_t AvailableBytes(int index) {
  Initialize();
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return -1;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
      static_cast<c10::DeviceIndex>(index));
  constexpr size_t agg = 0;  // StatType::AGGREGATE, in every LibTorch version
  const int64_t cached_unused =
      stats.reserved_bytes[agg].current - stats.allocated_bytes[agg].current;
  return static_cast<int64_t>(free_bytes) + cached_unused;
}

void ResetPeakAllocated(int index) {
  Initialize();
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

int64_t PeakAllocated(int index) {
  Initialize();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
      static_cast<c10::DeviceIndex>(index));
  constexpr size_t agg = 0;  // StatType::AGGREGATE, in every LibTorch version
  return stats.allocated_bytes[agg].peak;
}

void EmptyCache() { c10::cuda::CUDACachingAllocator::emptyCache(); }

void SetDevice(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

int64_t TotalBytes(int index) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return -1;
  return static_cast<int64_t>(total);
}

namespace {

// Raw CUDA events rather than LibTorch's wrapper, whose header and namespace
// moved between LibTorch versions.
class CudaEventTimeline : public StepClock {
 public:
  explicit CudaEventTimeline(int index) : index_(static_cast<c10::DeviceIndex>(index)) {}
  ~CudaEventTimeline() override {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }

  void Clear() override { used_ = 0; }

  void Mark() override {
    c10::cuda::CUDAGuard guard(index_);
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      C10_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    C10_CUDA_CHECK(cudaEventRecord(events_[used_++],
                                   c10::cuda::getCurrentCUDAStream(index_).stream()));
  }

  std::vector<double> Intervals() override {
    std::vector<double> out;
    if (used_ < 2) return out;
    C10_CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
    for (size_t i = 1; i < used_; ++i) {
      float ms = 0;
      C10_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]));
      out.push_back(static_cast<double>(ms) / 1e3);
    }
    return out;
  }

 private:
  c10::DeviceIndex index_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

}  // namespace

c10::intrusive_ptr<CommBackend> MakeNcclBackend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
    std::chrono::milliseconds timeout) {
  // Built by the wheel's own nccl.h (the build puts it first): Options
  // holds an ncclConfig_t whose layout must be that LibTorch's.
  c10::intrusive_ptr<c10d::ProcessGroupNCCL::Options> options =
      c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

std::string StickyError(int index) {
  // A sticky error is returned by every later call, synchronisation
  // included; an ordinary one (a bad launch) is cleared by reading it.
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) current = index;
  cudaError_t error = cudaSetDevice(index);
  if (error == cudaSuccess) error = cudaDeviceSynchronize();
  if (error == cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaSetDevice(current);
    return "";
  }
  return absl::StrCat(cudaGetErrorName(error), ": ", cudaGetErrorString(error));
}

std::unique_ptr<StepClock> MakeEventClock(int index) {
  return std::make_unique<CudaEventTimeline>(index);
}

namespace {

// at::cuda::CUDAGraph behind GraphApi: captured on a side stream of the
// device, every graph into one pool from at::cuda::graph_pool_handle().
class CudaGraphApi final : public GraphApi {
 public:
  explicit CudaGraphApi(int index)
      : index_(static_cast<c10::DeviceIndex>(index)),
        capture_stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index_)),
        previous_(c10::cuda::getCurrentCUDAStream(index_)) {}

  void Synchronize() override {
    c10::cuda::CUDAGuard device(index_);
    c10::cuda::device_synchronize();
  }

  void UseCaptureStream(bool on) override {
    if (on) {
      previous_ = c10::cuda::getCurrentCUDAStream(index_);
      c10::cuda::setCurrentCUDAStream(capture_stream_);
    } else {
      // Also on the way out of an error: an error of its own is left for
      // the next synchronisation to report.
      (void)cudaStreamSynchronize(capture_stream_.stream());
      c10::cuda::setCurrentCUDAStream(previous_);
    }
  }

  void NewPool() override { pool_ = at::cuda::graph_pool_handle(); }

  void BeginCapture() override {
    c10::cuda::CUDAGuard device(index_);
    pending_ = std::make_unique<at::cuda::CUDAGraph>();
    pending_->capture_begin(pool_);
  }

  void Record(const std::function<void()>& step) override { step(); }

  void EndCapture() override {
    pending_->capture_end();
    graphs_.push_back(std::move(pending_));
  }

  void AbortCapture() override {
    // CUDAGraph::reset() releases the pool but does not end the stream's
    // capture: a capture left open makes every later synchronisation fail.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(capture_stream_.stream(), &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      cudaGraph_t graph = nullptr;
      (void)cudaStreamEndCapture(capture_stream_.stream(), &graph);
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
    }
    (void)cudaGetLastError();  // the capture's error, now dealt with
    pending_.reset();
  }

  void Replay(size_t graph) override { graphs_.at(graph)->replay(); }

  int64_t PoolBytes() const override {
    int64_t held = 0;
    for (const auto& segment : c10::cuda::CUDACachingAllocator::snapshot().segments) {
      if (segment.device == index_ && segment.owner_private_pool_id == pool_) {
        held += static_cast<int64_t>(segment.total_size - segment.allocated_size);
      }
    }
    return held;
  }

 private:
  c10::DeviceIndex index_;
  c10::cuda::CUDAStream capture_stream_;
  c10::cuda::CUDAStream previous_;
  at::cuda::MempoolId_t pool_{0, 0};
  std::unique_ptr<at::cuda::CUDAGraph> pending_;
  std::vector<std::unique_ptr<at::cuda::CUDAGraph>> graphs_;
};

}  // namespace

std::unique_ptr<StepGraphs> MakeGraphs(int index) {
  return std::make_unique<CapturedSteps>(std::make_unique<CudaGraphApi>(index));
}

}  // namespace ltb::cuda
