// The instruction sets this CPU offers, as Linux reports them
// (/proc/cpuinfo), optionally limited by LTB_MAX_CPU_ISA to simulate an
// older CPU on a newer one, as ATEN_CPU_CAPABILITY and ONEDNN_MAX_CPU_ISA do
// for LibTorch's and oneDNN's kernels. What the suite decides from the CPU's
// instructions (peak loops, native arithmetic, what oneDNN can run) asks here.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ltb {

// LTB_MAX_CPU_ISA's values, oldest first: "default" (no AVX), "avx2" (AVX2
// and FMA, no AVX-512), "avx512" (AVX-512 F/BW/VL/DQ, no BF16, FP16 or AMX).
// Unset or empty: the CPU's own.
constexpr char kCpuIsaLimits[] = "default, avx2, avx512";

// An error naming the valid values when LTB_MAX_CPU_ISA holds another, or
// when ATEN_CPU_CAPABILITY holds one ATen does not read (on x86, other than
// default, avx2 and avx512, in lower case: ATen ignores it and runs this
// CPU's own kernels, while oneDNN, MKL and the peaks would follow it).
absl::Status CheckCpuIsaLimit();

// The limit in force ("avx2"), or "" for none.
std::string CpuIsaLimit();

// Whether the CPU reports `flag` (a /proc/cpuinfo name: "avx2",
// "avx512_bf16", "amx_tile") and LTB_MAX_CPU_ISA allows it.
bool CpuHas(std::string_view flag);

// Whether the hardware reports `flag`, whatever the limit: for checks that
// LibTorch makes on the hardware itself.
bool CpuHardwareHas(std::string_view flag);

// ATEN_CPU_CAPABILITY=avx2 or default alone simulates an older CPU for ATen's
// kernels only: oneDNN, and the suite's peak loops, would still use the
// newer instructions, and LibTorch mixes the two (its bf16 attention packs
// operands for AMX inside an AVX2 kernel and throws "pack_vnni2 is only
// supported when avx512 is supported"), and MKL's GEMMs would run AVX-512
// on Intel CPUs. Completes the simulation by setting ONEDNN_MAX_CPU_ISA,
// MKL_ENABLE_INSTRUCTIONS and LTB_MAX_CPU_ISA to the same level where they
// are unset; call before oneDNN or MKL first reads its limit. Returns what
// it set, for the run context ("" when nothing).
std::string MatchCpuSimulation();

// What MatchCpuSimulation() set, or "".
std::string CpuSimulationNote();

// Whether LibTorch's oneDNN can run bf16 linear layers on this CPU; when
// not, `why` says which instructions are missing, in the suite's words.
// ATen asks oneDNN (mkldnn_bf16_device_check), which wants AVX-512
// BW/VL/DQ or AVX-NE-CONVERT from the hardware, allowed by
// ONEDNN_MAX_CPU_ISA; LTB_MAX_CPU_ISA does not enter.
bool OneDnnRunsBf16(std::string* why = nullptr);

}  // namespace ltb
