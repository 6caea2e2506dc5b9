#include "device/cpu_isa.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ltb {
namespace {

// The flags Linux reports for the first CPU.
const std::set<std::string, std::less<>>& HardwareFlags() {
  static const auto* flags = [] {
    auto* out = new std::set<std::string, std::less<>>;
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) != 0) continue;
      std::istringstream words(line.substr(line.find(':') + 1));
      for (std::string w; words >> w;) out->insert(w);
      break;
    }
    return out;
  }();
  return *flags;
}

// 0: default, 1: avx2, 2: avx512, 3: none (the CPU's own); -1: invalid.
int LimitLevel() {
  const char* v = std::getenv("LTB_MAX_CPU_ISA");
  if (v == nullptr || *v == '\0') return 3;
  const std::string value = absl::AsciiStrToLower(v);
  if (value == "default") return 0;
  if (value == "avx2") return 1;
  if (value == "avx512") return 2;
  return -1;
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// The oldest level that includes `flag`; flags of no vector extension
// (sse4_2, popcnt, ...) belong to every level.
int LevelOf(std::string_view flag) {
  if (StartsWith(flag, "amx") || StartsWith(flag, "avx10") || flag == "avx512_bf16" ||
      flag == "avx512_fp16" || flag == "avx_ne_convert" || flag == "avx_vnni_int8" ||
      flag == "avx_vnni_int16") {
    return 3;
  }
  if (StartsWith(flag, "avx512")) return 2;
  if (StartsWith(flag, "avx") || flag == "fma" || flag == "f16c") return 1;
  return 0;
}

std::string& SimulationNote() {
  static auto* note = new std::string;
  return *note;
}

}  // namespace

std::string MatchCpuSimulation() {
  const char* aten = std::getenv("ATEN_CPU_CAPABILITY");
  if (aten == nullptr) {
    // Limits without ATen's: a simulation in part, which the context says.
    std::vector<std::string> alone;
    for (const char* var : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
                            "MKL_ENABLE_INSTRUCTIONS", "LTB_MAX_CPU_ISA"}) {
      const char* v = std::getenv(var);
      if (v != nullptr && *v != '\0') alone.push_back(absl::StrCat(var, "=", v));
    }
    if (alone.empty()) return "";
    SimulationNote() = absl::StrCat(
        "in part: ", absl::StrJoin(alone, " and "),
        " without ATEN_CPU_CAPABILITY, so LibTorch's own kernels run this CPU's "
        "instructions (cpu_capability), and so does whichever of oneDNN, MKL and the "
        "peaks' loop no limit here names; ATEN_CPU_CAPABILITY=avx2 or default simulates "
        "an older CPU throughout");
    return SimulationNote();
  }
  const std::string level = aten;  // as ATen reads it (CheckCpuIsaLimit)
  const char* onednn = level == "avx2" ? "AVX2" : level == "default" ? "SSE41" : nullptr;
  if (onednn == nullptr) return "";
  // MKL's limit: on Intel CPUs its GEMMs otherwise run AVX-512 under the
  // simulation (twice an AVX2 CPU's rate); AMD's it leaves as they are.
  const char* mkl = level == "avx2" ? "AVX2" : "SSE4_2";
  std::string set;
  const auto set_unset = [&](const char* var, const char* value) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return;
    setenv(var, value, /*overwrite=*/1);
    absl::StrAppend(&set, set.empty() ? "" : " and ", var, "=", value);
  };
  set_unset("ONEDNN_MAX_CPU_ISA", onednn);
  set_unset("MKL_ENABLE_INSTRUCTIONS", mkl);
  set_unset("LTB_MAX_CPU_ISA", level.c_str());
  if (set.empty()) return "";
  SimulationNote() = absl::StrCat(set, ", set to match ATEN_CPU_CAPABILITY=", aten,
                                  " (an older CPU for oneDNN, MKL and the peaks too)");
  return SimulationNote();
}

std::string CpuSimulationNote() { return SimulationNote(); }

absl::Status CheckCpuIsaLimit() {
#if defined(__x86_64__)
  // ATen compares the value as it is (DispatchStub.cpp), and warns once that
  // it ignores another.
  if (const char* aten = std::getenv("ATEN_CPU_CAPABILITY");
      aten != nullptr && *aten != '\0' && std::string_view(aten) != "default" &&
      std::string_view(aten) != "avx2" && std::string_view(aten) != "avx512") {
    return absl::InvalidArgumentError(absl::StrCat(
        "ATEN_CPU_CAPABILITY=", aten,
        " is not a value ATen reads: it ignores it and runs this CPU's own kernels, "
        "while oneDNN, MKL and the peaks would follow it; valid: ",
        kCpuIsaLimits, " (lower case)"));
  }
#endif
  if (LimitLevel() >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("bad LTB_MAX_CPU_ISA value '",
                                                 std::getenv("LTB_MAX_CPU_ISA"),
                                                 "'; valid: ", kCpuIsaLimits));
}

std::string CpuIsaLimit() {
  switch (LimitLevel()) {
    case 0:
      return "default";
    case 1:
      return "avx2";
    case 2:
      return "avx512";
    default:
      return "";
  }
}

bool CpuHardwareHas(std::string_view flag) { return HardwareFlags().count(flag) > 0; }

bool CpuHas(std::string_view flag) {
  return CpuHardwareHas(flag) && LevelOf(flag) <= LimitLevel();
}

bool OneDnnRunsBf16(std::string* why) {
  std::string reason;
#if defined(__x86_64__)
  const bool avx512 = CpuHardwareHas("avx512bw") && CpuHardwareHas("avx512vl") &&
                      CpuHardwareHas("avx512dq");
  const bool ne_convert = CpuHardwareHas("avx_ne_convert");
  // oneDNN reads its older name where the newer is not set.
  const char* variable = std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr
                             ? "ONEDNN_MAX_CPU_ISA"
                             : "DNNL_MAX_CPU_ISA";
  const char* limit = std::getenv(variable);
  const std::string isa = limit != nullptr ? absl::AsciiStrToUpper(limit) : "";
  // oneDNN's bf16 kernels start at AVX2_VNNI_2 (AVX-NE-CONVERT) and
  // AVX512_CORE; a limit below both leaves it none.
  const bool limited = isa == "SSE41" || isa == "AVX" || isa == "AVX2" ||
                       isa == "AVX2_VNNI" || (isa == "AVX2_VNNI_2" && !ne_convert);
  if (!avx512 && !ne_convert) {
    reason =
        "this CPU has no AVX-512 BW/VL/DQ or AVX-NE-CONVERT instructions, which "
        "oneDNN's bf16 linear needs";
  } else if (limited) {
    reason = absl::StrCat(variable, "=", limit,
                          " keeps oneDNN below the AVX-512 or AVX-NE-CONVERT "
                          "instructions its bf16 linear needs");
  }
#endif
  if (why != nullptr) *why = reason;
  return reason.empty();
}

}  // namespace ltb
