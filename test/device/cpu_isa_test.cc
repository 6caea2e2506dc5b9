#include "device/cpu_isa.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "scoped_env.h"

namespace ltb {
namespace {

// /proc/cpuinfo read here independently of the library.
bool ProcHas(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0)
      return (line + " ").find(" " + flag + " ") != std::string::npos;
  }
  return false;
}

TEST(MatchCpuSimulation, AtenAloneLimitsOneDnnAndThePeaksToItsLevel) {
  {
    ScopedEnv aten({{"ATEN_CPU_CAPABILITY", "avx2"},
                    {"ONEDNN_MAX_CPU_ISA", nullptr},
                    {"MKL_ENABLE_INSTRUCTIONS", nullptr},
                    {"LTB_MAX_CPU_ISA", nullptr}});
    const std::string note = MatchCpuSimulation();
    EXPECT_EQ(std::string(std::getenv("ONEDNN_MAX_CPU_ISA")), "AVX2");
    EXPECT_EQ(std::string(std::getenv("MKL_ENABLE_INSTRUCTIONS")), "AVX2");
    EXPECT_EQ(std::string(std::getenv("LTB_MAX_CPU_ISA")), "avx2");
    EXPECT_NE(note.find("ONEDNN_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2 and "
                        "LTB_MAX_CPU_ISA=avx2"),
              std::string::npos)
        << note;
    EXPECT_EQ(CpuIsaLimit(), "avx2");
    EXPECT_FALSE(CpuHas("avx512f"));
  }
  {
    // What the user set stays; only what is missing follows.
    ScopedEnv aten({{"ATEN_CPU_CAPABILITY", "default"},
                    {"ONEDNN_MAX_CPU_ISA", "AVX512_CORE"},
                    {"MKL_ENABLE_INSTRUCTIONS", nullptr},
                    {"LTB_MAX_CPU_ISA", nullptr}});
    const std::string note = MatchCpuSimulation();
    EXPECT_NE(note.find("MKL_ENABLE_INSTRUCTIONS=SSE4_2 and LTB_MAX_CPU_ISA=default"),
              std::string::npos)
        << note;
    EXPECT_EQ(std::string(std::getenv("ONEDNN_MAX_CPU_ISA")), "AVX512_CORE");
  }
  for (const char* level : {"avx512", "AVX512"}) {
    // AVX-512 kernels pack for AMX themselves: nothing to match.
    ScopedEnv aten({{"ATEN_CPU_CAPABILITY", level},
                    {"ONEDNN_MAX_CPU_ISA", nullptr},
                    {"MKL_ENABLE_INSTRUCTIONS", nullptr},
                    {"LTB_MAX_CPU_ISA", nullptr}});
    EXPECT_EQ(MatchCpuSimulation(), "");
    EXPECT_EQ(std::getenv("ONEDNN_MAX_CPU_ISA"), nullptr);
    EXPECT_EQ(std::getenv("MKL_ENABLE_INSTRUCTIONS"), nullptr);
  }
}

TEST(MatchCpuSimulation, LimitsWithoutAtensAreNamedASimulationInPart) {
  {
    ScopedEnv limits({{"ATEN_CPU_CAPABILITY", nullptr},
                      {"ONEDNN_MAX_CPU_ISA", "AVX2"},
                      {"DNNL_MAX_CPU_ISA", nullptr},
                      {"MKL_ENABLE_INSTRUCTIONS", nullptr},
                      {"LTB_MAX_CPU_ISA", nullptr}});
    const std::string note = MatchCpuSimulation();
    EXPECT_TRUE(absl::StartsWith(note,
                                 "in part: ONEDNN_MAX_CPU_ISA=AVX2 without "
                                 "ATEN_CPU_CAPABILITY"))
        << note;
    EXPECT_EQ(CpuSimulationNote(), note);
    // Nothing is set on the user's behalf.
    EXPECT_EQ(std::getenv("MKL_ENABLE_INSTRUCTIONS"), nullptr);
    EXPECT_EQ(std::getenv("LTB_MAX_CPU_ISA"), nullptr);
  }
  ScopedEnv none({{"ATEN_CPU_CAPABILITY", nullptr},
                  {"ONEDNN_MAX_CPU_ISA", nullptr},
                  {"DNNL_MAX_CPU_ISA", nullptr},
                  {"MKL_ENABLE_INSTRUCTIONS", nullptr},
                  {"LTB_MAX_CPU_ISA", nullptr}});
  EXPECT_EQ(MatchCpuSimulation(), "");
}

TEST(CpuIsa, WithoutALimitFollowsTheCpuFlags) {
  ScopedEnv unset({{"LTB_MAX_CPU_ISA", nullptr}});
  for (const char* flag : {"sse4_2", "avx2", "fma", "avx512f", "avx512bw", "avx512_bf16",
                           "avx512_fp16", "amx_bf16", "amx_tile", "no_such_flag"}) {
    EXPECT_EQ(CpuHas(flag), ProcHas(flag)) << flag;
    EXPECT_EQ(CpuHardwareHas(flag), ProcHas(flag)) << flag;
  }
  EXPECT_EQ(CpuIsaLimit(), "");
  EXPECT_TRUE(CheckCpuIsaLimit().ok());
}

TEST(CpuIsa, ALimitHidesNewerInstructionsButNotTheHardware) {
  {
    ScopedEnv avx2({{"LTB_MAX_CPU_ISA", "avx2"}});
    EXPECT_EQ(CpuIsaLimit(), "avx2");
    EXPECT_EQ(CpuHas("avx2"), ProcHas("avx2"));
    EXPECT_EQ(CpuHas("sse4_2"), ProcHas("sse4_2"));
    for (const char* flag : {"avx512f", "avx512bw", "avx512_bf16", "amx_bf16"}) {
      EXPECT_FALSE(CpuHas(flag)) << flag;
      EXPECT_EQ(CpuHardwareHas(flag), ProcHas(flag)) << flag;
    }
  }
  {
    ScopedEnv avx512({{"LTB_MAX_CPU_ISA", "AVX512"}});
    EXPECT_EQ(CpuHas("avx512f"), ProcHas("avx512f"));
    EXPECT_FALSE(CpuHas("avx512_bf16"));
    EXPECT_FALSE(CpuHas("avx512_fp16"));
    EXPECT_FALSE(CpuHas("amx_tile"));
  }
  {
    ScopedEnv none({{"LTB_MAX_CPU_ISA", "default"}});
    EXPECT_FALSE(CpuHas("avx2"));
    EXPECT_FALSE(CpuHas("fma"));
    EXPECT_FALSE(CpuHas("avx"));
    EXPECT_EQ(CpuHas("sse4_2"), ProcHas("sse4_2"));
  }
}

TEST(CpuIsa, AnUnknownLimitIsAnErrorNamingTheValidOnes) {
  ScopedEnv bad({{"LTB_MAX_CPU_ISA", "avx9000"}});
  const absl::Status s = CheckCpuIsaLimit();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("avx9000"), std::string::npos) << s;
  EXPECT_NE(s.message().find("default, avx2, avx512"), std::string::npos) << s;
}

#if defined(__x86_64__)
// ATen reads ATEN_CPU_CAPABILITY as written and ignores another value
// (AVX2 included) with a warning, running this CPU's kernels: refused, not
// half simulated (MatchCpuSimulation sets nothing for it either).
TEST(CpuIsa, AValueAtenIgnoresIsAnError) {
  for (const char* level : {"AVX2", "DEFAULT", "avx2 ", "sse"}) {
    ScopedEnv aten({{"ATEN_CPU_CAPABILITY", level},
                    {"ONEDNN_MAX_CPU_ISA", nullptr},
                    {"MKL_ENABLE_INSTRUCTIONS", nullptr},
                    {"LTB_MAX_CPU_ISA", nullptr}});
    EXPECT_EQ(MatchCpuSimulation(), "") << level;
    EXPECT_EQ(std::getenv("ONEDNN_MAX_CPU_ISA"), nullptr) << level;
    const absl::Status s = CheckCpuIsaLimit();
    EXPECT_FALSE(s.ok()) << level;
    EXPECT_NE(s.message().find(absl::StrCat("ATEN_CPU_CAPABILITY=", level,
                                            " is not a value ATen reads")),
              std::string::npos)
        << s;
  }
  for (const char* level : {"default", "avx2", "avx512"}) {
    ScopedEnv aten({{"ATEN_CPU_CAPABILITY", level}, {"LTB_MAX_CPU_ISA", nullptr}});
    EXPECT_TRUE(CheckCpuIsaLimit().ok()) << level;
  }
}
#endif

TEST(OneDnnRunsBf16, AsksTheHardwareAsATenDoesAndHonoursOneDnnsLimit) {
  ScopedEnv unset({{"ONEDNN_MAX_CPU_ISA", nullptr}, {"DNNL_MAX_CPU_ISA", nullptr}});
  const bool hardware =
      (ProcHas("avx512bw") && ProcHas("avx512vl") && ProcHas("avx512dq")) ||
      ProcHas("avx_ne_convert");
  std::string why;
  EXPECT_EQ(OneDnnRunsBf16(&why), hardware);
  if (hardware) {
    EXPECT_EQ(why, "");
    ScopedEnv limited({{"ONEDNN_MAX_CPU_ISA", "AVX2"}});
    EXPECT_FALSE(OneDnnRunsBf16(&why));
    EXPECT_NE(why.find("ONEDNN_MAX_CPU_ISA=AVX2"), std::string::npos) << why;
  }
  if (hardware) {
    // oneDNN's older name for the same limit.
    ScopedEnv older({{"DNNL_MAX_CPU_ISA", "AVX2"}});
    EXPECT_FALSE(OneDnnRunsBf16(&why));
    EXPECT_NE(why.find("DNNL_MAX_CPU_ISA=AVX2"), std::string::npos) << why;
  } else {
    EXPECT_NE(why.find("this CPU has no AVX-512 BW/VL/DQ or AVX-NE-CONVERT"),
              std::string::npos)
        << why;
  }
  // LTB_MAX_CPU_ISA limits the suite's loops, not ATen's hardware check.
  ScopedEnv ours({{"LTB_MAX_CPU_ISA", "default"}});
  EXPECT_EQ(OneDnnRunsBf16(), hardware);
}

}  // namespace
}  // namespace ltb
