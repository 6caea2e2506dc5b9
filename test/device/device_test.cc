#include "device/device.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "device/backend.h"
#include "device/cuda_runtime.h"
#include "device/telemetry.h"
#include "scoped_env.h"

namespace ltb {
namespace {

TEST(ParseDevice, AcceptsEveryForm) {
  EXPECT_EQ(ParseDevice("cpu").value(), c10::Device(c10::kCPU));
  EXPECT_EQ(ParseDevice("cuda").value(), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(ParseDevice("cuda:0").value(), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(ParseDevice("cuda:1").value(), c10::Device(c10::kCUDA, 1));
  EXPECT_EQ(ParseDevice("cuda:12").value(), c10::Device(c10::kCUDA, 12));
  EXPECT_EQ(ParseDevice("mps").value(), c10::Device(c10::kMPS));
}

TEST(ParseDevice, RejectsBadFormsNamingTheValidOnes) {
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:x", "cuda:1x",
                          "cuda:01", "cuda1", "mps:0", " cpu"}) {
    absl::StatusOr<c10::Device> d = ParseDevice(bad);
    ASSERT_FALSE(d.ok()) << "accepted '" << bad << "'";
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find("valid: cpu, cuda, cuda:N"), std::string::npos)
        << d.status().message();
  }
}

TEST(DeviceName, IsCanonical) {
  EXPECT_EQ(DeviceName(ParseDevice("cpu").value()), "cpu");
  EXPECT_EQ(DeviceName(ParseDevice("cuda:0").value()), "cuda");
  EXPECT_EQ(DeviceName(ParseDevice("cuda:3").value()), "cuda:3");
  EXPECT_EQ(DeviceName(ParseDevice("mps").value()), "mps");
}

TEST(DeviceAvailable, CpuAlwaysAndCudaWithAReason) {
  std::string why;
  EXPECT_TRUE(DeviceAvailable(c10::Device(c10::kCPU), &why));
  const bool cuda = DeviceAvailable(c10::Device(c10::kCUDA, 0), &why);
  EXPECT_EQ(cuda, torch::cuda::is_available());
  if (!cuda) EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
  // A GPU index beyond what the machine has is never available.
  why.clear();
  EXPECT_FALSE(DeviceAvailable(c10::Device(c10::kCUDA, 63), &why));
  EXPECT_FALSE(why.empty());
}

TEST(AvailableDevices, StartsWithCpuAndListsOnlyUsableDevices) {
  const std::vector<c10::Device> devices = AvailableDevices();
  ASSERT_FALSE(devices.empty());
  EXPECT_EQ(devices.front(), c10::Device(c10::kCPU));
  for (const c10::Device& d : devices) {
    std::string why;
    EXPECT_TRUE(DeviceAvailable(d, &why)) << DeviceName(d) << ": " << why;
  }
}

TEST(DeviceAvailableBytes, CpuReportsPositiveMemory) {
  EXPECT_GT(DeviceAvailableBytes(c10::Device(c10::kCPU)), 0);
}

// NVML is asked for a GPU by PCI bus id, which CUDA_VISIBLE_DEVICES cannot
// renumber; with no id there is no sampler, never a guess by ordinal.
TEST(GpuUtilSampler, NeedsTheDevicesPciBusId) {
  EXPECT_EQ(GpuUtilSampler::Create(""), nullptr);
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(cuda::PciBusId(0), "");
  } else {
    const std::string id = cuda::PciBusId(0);
    EXPECT_EQ(std::count(id.begin(), id.end(), ':'), 2)
        << id;  // domain:bus:device.function
  }
}

TEST(Backends, EveryBuiltInKindOwnsItsDevicesAndNamesThem) {
  const std::vector<const DeviceBackend*> all = Backends();
  ASSERT_GE(all.size(), 3u);
  for (const char* name : {"cpu", "cuda", "cuda:3", "mps"}) {
    const c10::Device d = ParseDevice(name).value();
    EXPECT_EQ(BackendOf(d).Name(d), name);
    EXPECT_TRUE(BackendOf(d).Owns(d));
  }
  EXPECT_EQ(&BackendOf(HostDevice()), all.front());
  EXPECT_TRUE(BackendOf(HostDevice()).Caps().host);
}

TEST(Backends, CapabilitiesAreTheDeviceKinds) {
  const Capabilities cpu = BackendOf(c10::Device(c10::kCPU)).Caps();
  const Capabilities gpu = BackendOf(c10::Device(c10::kCUDA, 0)).Caps();
  const Capabilities mps = BackendOf(c10::Device(c10::kMPS)).Caps();
  EXPECT_TRUE(cpu.host && cpu.packed_linears);
  EXPECT_FALSE(cpu.host_transfers || cpu.pinned_host_memory || cpu.profiled_kernels);
  EXPECT_FALSE(gpu.host || gpu.packed_linears);
  EXPECT_TRUE(gpu.host_transfers && gpu.pinned_host_memory && gpu.profiled_kernels);
  EXPECT_FALSE(mps.host || mps.host_transfers);
}

TEST(Backends, CudaCountsCopiesAndFillsAsBusyAsKernels) {
  const DeviceBackend& cuda = BackendOf(c10::Device(c10::kCUDA, 0));
  // libkineto: GPU_MEMCPY 3, GPU_MEMSET 4, CONCURRENT_KERNEL 5; CPU_OP 0.
  EXPECT_TRUE(cuda.BusyActivity(3));
  EXPECT_TRUE(cuda.BusyActivity(4));
  EXPECT_TRUE(cuda.BusyActivity(5));
  EXPECT_FALSE(cuda.BusyActivity(0));
  EXPECT_FALSE(BackendOf(HostDevice()).BusyActivity(5));
}

TEST(Backends, CollectivesAndRanksByKind) {
  EXPECT_EQ(BackendOf(HostDevice()).CollectivesName(), "gloo");
  EXPECT_EQ(BackendOf(c10::Device(c10::kCUDA, 0)).CollectivesName(), "nccl");
  EXPECT_EQ(BackendOf(HostDevice()).BindRank(3).value(), HostDevice());
  const absl::StatusOr<c10::Device> mps = BackendOf(c10::Device(c10::kMPS)).BindRank(0);
  ASSERT_FALSE(mps.ok());
  EXPECT_NE(mps.status().message().find("--devices=cpu"), std::string::npos);
  std::string why;
  if (!DeviceAvailable(c10::Device(c10::kCUDA, 0), &why)) {
    const absl::StatusOr<c10::Device> gpu =
        BackendOf(c10::Device(c10::kCUDA, 0)).BindRank(0);
    ASSERT_FALSE(gpu.ok());
    EXPECT_NE(gpu.status().message().find("no GPU is visible"), std::string::npos);
  }
}

TEST(Backends, CudaTurnsTf32OffSoThatFp32IsFp32) {
  (void)BackendOf(c10::Device(c10::kCUDA, 0));
  EXPECT_FALSE(at::globalContext().allowTF32CuBLAS());
  EXPECT_FALSE(at::globalContext().allowTF32CuDNN());
}

TEST(CheckTf32Environment, RefusesOverridesThatContradictTheNames) {
  {
    ScopedEnv env({{"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", nullptr},
                   {"NVIDIA_TF32_OVERRIDE", nullptr}});
    EXPECT_TRUE(CheckTf32Environment(true).ok());
  }
  {
    // LibTorch reads "1" alone as on; fp32 runs of every kind are affected.
    ScopedEnv env({{"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1"}});
    for (bool tf32_runs : {false, true}) {
      const absl::Status s = CheckTf32Environment(tf32_runs);
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.message().find("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes every fp32 "
                                 "matmul on CUDA TF32"),
                std::string::npos)
          << s.message();
    }
  }
  {
    ScopedEnv env({{"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "0"}});
    EXPECT_TRUE(CheckTf32Environment(true).ok());
  }
  {
    // NVIDIA's override turns TF32 off: only runs named /tf32 would be wrong.
    ScopedEnv env({{"NVIDIA_TF32_OVERRIDE", "0"}});
    EXPECT_TRUE(CheckTf32Environment(false).ok());
    const absl::Status s = CheckTf32Environment(true);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("--tf32=false"), std::string::npos) << s.message();
  }
}

TEST(CheckFpmathEnvironment, RefusesOneDnnComputingFp32NarrowerThanItsName) {
  {
    ScopedEnv env(
        {{"ONEDNN_DEFAULT_FPMATH_MODE", nullptr}, {"DNNL_DEFAULT_FPMATH_MODE", nullptr}});
    EXPECT_TRUE(CheckFpmathEnvironment().ok());
  }
  for (const char* name : {"ONEDNN_DEFAULT_FPMATH_MODE", "DNNL_DEFAULT_FPMATH_MODE"}) {
    for (const char* strict : {"STRICT", "strict", ""}) {
      ScopedEnv env({{name, strict}});
      EXPECT_TRUE(CheckFpmathEnvironment().ok()) << name << "=" << strict;
    }
    for (const char* narrower : {"BF16", "f16", "TF32", "ANY"}) {
      ScopedEnv env({{name, narrower}});
      const absl::Status s = CheckFpmathEnvironment();
      ASSERT_FALSE(s.ok()) << name << "=" << narrower;
      EXPECT_NE(s.message().find(absl::StrCat(name, "=", narrower,
                                              " lets oneDNN compute fp32 in a narrower")),
                std::string::npos)
          << s.message();
    }
  }
}

// The CPU backend's context: what this process may use of the machine,
// always, and the rest where this machine's /proc and /sys say.
TEST(CpuContext, RecordsTheAffinityTheQuotaAndTheKernel) {
  std::map<std::string, std::string> ctx;
  for (const auto& [key, value] : BackendOf(HostDevice()).Context()) ctx[key] = value;
  ASSERT_TRUE(ctx.count("cpu_affinity"));
  EXPECT_NE(ctx["cpu_affinity"].find(" logical CPUs)"), std::string::npos);
  ASSERT_TRUE(ctx.count("cpu_quota"));
  EXPECT_TRUE(absl::StartsWith(ctx["cpu_quota"], "none (") ||
              absl::StrContains(ctx["cpu_quota"], "(cgroup v"))
      << ctx["cpu_quota"];
  EXPECT_TRUE(absl::StartsWith(ctx["kernel"], "Linux ")) << ctx["kernel"];
  ASSERT_TRUE(ctx.count("cpu_frequency_scaling"));
  for (const auto& [key, value] : ctx) EXPECT_FALSE(value.empty()) << key;
}

}  // namespace
}  // namespace ltb
