#include "peaks/peaks.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "device/datasheets.h"

namespace ltb {
namespace {

TEST(LookupDatasheet, MatchesNvidiaDeviceNames) {
  const auto model = [](const std::string& name) {
    const DatasheetPeaks* p = LookupDatasheet(name);
    return p == nullptr ? std::string("none") : p->model;
  };
  EXPECT_EQ(model("NVIDIA H100 80GB HBM3"), "NVIDIA H100 SXM5");
  EXPECT_EQ(model("NVIDIA H100 PCIe"), "NVIDIA H100 PCIe");
  EXPECT_EQ(model("NVIDIA H100 NVL"), "NVIDIA H100 NVL");
  EXPECT_EQ(model("NVIDIA H200"), "NVIDIA H200 SXM");
  // The NVL cards run at lower clocks and power than the SXM ones.
  EXPECT_EQ(model("NVIDIA H200 NVL"), "NVIDIA H200 NVL");
  EXPECT_LT(LookupDatasheet("NVIDIA H200 NVL")->bf16,
            LookupDatasheet("NVIDIA H200")->bf16);
  EXPECT_EQ(model("NVIDIA GH200 480GB"), "none");  // a superchip, not an H200
  EXPECT_EQ(model("NVIDIA A100-SXM4-80GB"), "NVIDIA A100 80GB SXM");
  EXPECT_EQ(model("NVIDIA A100-PCIE-40GB"), "NVIDIA A100 40GB");
  EXPECT_EQ(model("NVIDIA L4"), "NVIDIA L4");
  EXPECT_EQ(model("Tesla T4"), "NVIDIA T4");
  EXPECT_EQ(model("NVIDIA GeForce RTX 4090"), "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(model("NVIDIA RTX A4000"), "none");
  EXPECT_EQ(model("NVIDIA GeForce RTX 3090"), "none");
  // Memory sizes and kinds and form factors name no other part.
  EXPECT_EQ(model("NVIDIA H200 141GB HBM3e"), "NVIDIA H200 SXM");
  EXPECT_EQ(model("NVIDIA A100-SXM-80GB"), "NVIDIA A100 80GB SXM");
  EXPECT_EQ(model("NVIDIA A100 80GB PCIe"), "NVIDIA A100 80GB PCIe");
  // A MIG slice has a share of the SMs and of the bandwidth, and the laptop
  // and D chips fewer SMs than the card: the card's peaks would put mfu and
  // mbu several times too low, so theirs are measured.
  EXPECT_EQ(model("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), "none");
  EXPECT_EQ(model("NVIDIA A100-SXM4-40GB MIG 3g.20gb"), "none");
  EXPECT_EQ(model("NVIDIA GeForce RTX 4090 Laptop GPU"), "none");
  EXPECT_EQ(model("NVIDIA GeForce RTX 4090 D"), "none");
}

TEST(CudaArithmeticGap, Bf16AndTf32CameWithAmpere) {
  // A T4 (7.5) and a V100 (7.0): LibTorch emulates bf16 in fp32, and there
  // is no TF32.
  const std::string t4 = CudaArithmeticGap(7, 5, /*bf16=*/true, /*tf32=*/false);
  EXPECT_EQ(t4,
            "this GPU (compute capability 7.5) has no bf16 arithmetic (LibTorch emulates "
            "it in fp32), which came with compute capability 8.0 (Ampere)");
  EXPECT_EQ(CudaArithmeticGap(7, 0, false, true),
            "this GPU (compute capability 7.0) has no TF32, which came with compute "
            "capability 8.0 (Ampere)");
  EXPECT_EQ(CudaArithmeticGap(7, 5, false, false), "");  // fp32, fp16: its own
  for (const auto& [major, minor] : {std::pair{8, 0}, {8, 9}, {9, 0}, {10, 0}, {0, 0}}) {
    EXPECT_EQ(CudaArithmeticGap(major, minor, true, false), "") << major << "." << minor;
    EXPECT_EQ(CudaArithmeticGap(major, minor, false, true), "") << major << "." << minor;
  }
}

TEST(IsMigInstance, NamesASliceOfAGpu) {
  EXPECT_TRUE(IsMigInstance("NVIDIA H100 80GB HBM3 MIG 1g.10gb"));
  EXPECT_TRUE(IsMigInstance("NVIDIA A100-SXM4-40GB MIG 7g.40gb"));
  EXPECT_FALSE(IsMigInstance("NVIDIA H100 80GB HBM3"));
  EXPECT_FALSE(IsMigInstance("NVIDIA MIGHTY 1"));  // a whole word only
}

TEST(LookupDatasheet, GivesDensePeaksWithTheirSource) {
  const DatasheetPeaks* h100 = LookupDatasheet("NVIDIA H100 80GB HBM3");
  ASSERT_NE(h100, nullptr);
  EXPECT_DOUBLE_EQ(h100->bf16, 989.4e12);
  EXPECT_DOUBLE_EQ(h100->bandwidth, 3.35e12);
  EXPECT_NE(h100->source.find("datasheet"), std::string::npos);
  EXPECT_EQ(LookupDatasheet("Tesla T4")->bf16, 0);  // no bf16 tensor cores
  // TF32: the dense rate, half the "with sparsity" figure datasheets print;
  // half the fp16 tensor rate, and never below plain fp32 (the RTX 4090's
  // equals it).
  EXPECT_DOUBLE_EQ(h100->tf32, 494.7e12);
  EXPECT_DOUBLE_EQ(LookupDatasheet("NVIDIA A100-SXM4-80GB")->tf32, 156e12);
  EXPECT_EQ(LookupDatasheet("Tesla T4")->tf32, 0);  // Turing has no TF32
  for (const char* gpu :
       {"NVIDIA H100 NVL", "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA H200 NVL",
        "NVIDIA A100 80GB PCIe", "NVIDIA L4", "NVIDIA GeForce RTX 4090"}) {
    const DatasheetPeaks* p = LookupDatasheet(gpu);
    ASSERT_NE(p, nullptr) << gpu;
    EXPECT_GE(p->tf32, p->fp32) << gpu;
    EXPECT_NEAR(p->tf32, p->fp16 / 2, 0.01 * p->fp16) << gpu;  // L4: 60 of 121
  }
}

TEST(ParsePeakFlops, OneNumberOrPerDtype) {
  // One number for every dtype: fp64 too (a --model file's may be).
  const auto all = ParsePeakFlops("1.5e14").value();
  EXPECT_EQ(all.size(), 4u);
  EXPECT_DOUBLE_EQ(all.at(c10::kBFloat16), 1.5e14);
  EXPECT_DOUBLE_EQ(all.at(c10::kDouble), 1.5e14);
  EXPECT_DOUBLE_EQ(ParsePeakFlops("fp64=2e12").value().at(c10::kDouble), 2e12);
  const auto some = ParsePeakFlops("fp32=6.7e13,bf16=9.9e14").value();
  EXPECT_EQ(some.size(), 2u);
  EXPECT_DOUBLE_EQ(some.at(c10::kFloat), 6.7e13);
  for (const char* bad :
       {"", "x", "-1", "0", "int8=1e12", "fp32=", "fp32=inf", "fp32:1e12"}) {
    const auto r = ParsePeakFlops(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("valid: FLOP/s for every dtype"),
              std::string::npos);
  }
}

TEST(ParsePeakBandwidth, PositiveNumbersOnly) {
  EXPECT_DOUBLE_EQ(ParsePeakBandwidth("3.35e12").value(), 3.35e12);
  EXPECT_FALSE(ParsePeakBandwidth("0").ok());
  EXPECT_FALSE(ParsePeakBandwidth("fast").ok());
}

TEST(Peaks, OverridesWinAndAreRecordedAsSuch) {
  Peaks peaks({{c10::kFloat, 1e12}}, 5e10, {{64, 64, 64}});
  const c10::Device cpu(c10::kCPU);
  peaks.Prepare(cpu, c10::kFloat, /*bandwidth=*/true);
  ASSERT_NE(peaks.Flops(cpu, c10::kFloat), nullptr);
  EXPECT_DOUBLE_EQ(peaks.Flops(cpu, c10::kFloat)->value, 1e12);
  EXPECT_EQ(peaks.Flops(cpu, c10::kFloat)->source, "--peak_flops");
  EXPECT_DOUBLE_EQ(peaks.Bandwidth(cpu)->value, 5e10);
  EXPECT_EQ(peaks.Flops(cpu, c10::kBFloat16), nullptr);  // not prepared
  const auto ctx = peaks.Context();
  ASSERT_EQ(ctx.size(), 2u);
  EXPECT_EQ(ctx[0].first, "peak_flops_cpu_fp32");
  EXPECT_NE(ctx[0].second.find("--peak_flops"), std::string::npos);
}

TEST(Peaks, MeasuresWhatIsNotGiven) {
  Peaks peaks({}, 0, {{128, 128, 128}, {256, 256, 256}});
  const c10::Device cpu(c10::kCPU);
  peaks.Prepare(cpu, c10::kFloat, /*bandwidth=*/false);
  const Peak* p = peaks.Flops(cpu, c10::kFloat);
  ASSERT_NE(p, nullptr);
  EXPECT_GT(p->value, 0);
  EXPECT_NE(p->source.find("measured"), std::string::npos);
  EXPECT_EQ(peaks.Bandwidth(cpu), nullptr);
  EXPECT_TRUE(p->measured);
  // A benchmark whose fastest step beats the measured peak raises it.
  const double before = p->value;
  const Utilisation u = peaks.FlopsUtilisation(cpu, c10::kFloat, false, 1.5 * before,
                                               2 * before, "Ops/matmul/x");
  EXPECT_DOUBLE_EQ(u.value, 0.75);
  EXPECT_DOUBLE_EQ(peaks.Flops(cpu, c10::kFloat)->value, 2 * before);
  EXPECT_NE(u.note.find("raised"), std::string::npos) << u.note;
  EXPECT_NE(peaks.Context()[0].second.find("raised to"), std::string::npos);
  // A convolution's count (exact = false) past it leaves it where it is.
  const Utilisation conv = peaks.FlopsUtilisation(cpu, c10::kFloat, false, 3 * before,
                                                  3 * before, "Ops/conv2d/x", false);
  EXPECT_LT(conv.value, 0);
  EXPECT_DOUBLE_EQ(peaks.Flops(cpu, c10::kFloat)->value, 2 * before);
}

TEST(UtilisationOf, BelowThePeakIsTheRatio) {
  Peak peak{100, "measured: x", true};
  const Utilisation u = UtilisationOf(peak, 40, 50, "B", "bandwidth peak");
  EXPECT_DOUBLE_EQ(u.value, 0.4);
  EXPECT_EQ(u.note, "");
  EXPECT_DOUBLE_EQ(peak.value, 100);
}

TEST(UtilisationOf, AMeasuredPeakBeatenIsRaisedNeverAboveOne) {
  // Ops/copy on a shared machine: its fastest step beat the start-up peak.
  Peak peak{2.207e10, "measured: copy", true};
  const Utilisation u = UtilisationOf(peak, 2.337e10, 2.5e10, "Ops/copy", "bandwidth");
  EXPECT_DOUBLE_EQ(peak.value, 2.5e10);
  EXPECT_DOUBLE_EQ(u.value, 2.337e10 / 2.5e10);
  EXPECT_LE(u.value, 1.0);
  EXPECT_NE(u.note.find("Ops/copy"), std::string::npos);
  EXPECT_NE(peak.source.find("raised to 2.5e+10 by Ops/copy"), std::string::npos)
      << peak.source;
  // A later benchmark is measured against the raised peak.
  EXPECT_DOUBLE_EQ(UtilisationOf(peak, 1.25e10, 1.3e10, "Next", "bw").value, 0.5);
  // A best rate below the mean (an averaged rate only) is raised to the mean.
  Peak low{10, "measured: y", true};
  EXPECT_DOUBLE_EQ(UtilisationOf(low, 12, 0, "Decode", "bw").value, 1.0);
  EXPECT_DOUBLE_EQ(low.value, 12);
}

TEST(UtilisationOf, ACountBeyondTheArithmeticNeverRaisesAMeasuredPeak) {
  // Ops/conv2d 32x512x7x7 in bf16 on a 2-core AVX512_BF16 Xeon: counted
  // over the padding (19/21 of the 3x3 taps of a 7-wide row touch the
  // input, so (19/21)^2 = 82% of the counted products are done), it reached
  // 2.05e11 against a measured 1.81e11 and raised the peak for every later
  // benchmark, lowering a bf16 GPT2 forward's mfu from 0.79 to 0.68.
  Peak peak{1.81e11, "measured: bf16", true};
  const Utilisation u =
      UtilisationOf(peak, 2.0e11, 2.05e11, "Ops/conv2d/x", "bf16 FLOP/s peak", false);
  EXPECT_LT(u.value, 0);
  EXPECT_DOUBLE_EQ(peak.value, 1.81e11);
  EXPECT_EQ(peak.source, "measured: bf16");
  EXPECT_EQ(u.omitted.rfind("the rate is 1.1 times the bf16 FLOP/s peak 1.81e+11", 0), 0)
      << u.omitted;
  // Below the peak, it is the ratio, as any count's.
  EXPECT_DOUBLE_EQ(UtilisationOf(peak, 0.905e11, 1e11, "Ops/conv2d/x", "p", false).value,
                   0.5);
  EXPECT_DOUBLE_EQ(peak.value, 1.81e11);
}

TEST(UtilisationOf, AGivenPeakBeatenGivesNoValueAndSaysWhy) {
  Peak sheet{1e12, "datasheet: H100", false};
  const Utilisation u = UtilisationOf(sheet, 1.2e12, 1.3e12, "Ops/matmul", "peak");
  EXPECT_LT(u.value, 0);
  EXPECT_NE(u.note.find("wrong peak or a wrong count"), std::string::npos);
  EXPECT_EQ(u.omitted, "the rate is 1.2 times the peak 1e+12 (datasheet: H100)");
  EXPECT_DOUBLE_EQ(sheet.value, 1e12);  // never raised
  // No peak: no value, no note on stderr, and the peak's reason for the
  // label; nothing achieved: nothing to say.
  Peak none{0, "none: no native bf16", false};
  EXPECT_LT(UtilisationOf(none, 5, 5, "x", "p").value, 0);
  EXPECT_EQ(UtilisationOf(none, 5, 5, "x", "p").note, "");
  EXPECT_EQ(UtilisationOf(none, 5, 5, "x", "p").omitted, "no native bf16");
  EXPECT_EQ(UtilisationOf(none, 0, 0, "x", "p").omitted, "");
}

TEST(BandwidthUtilisationOf, AStepTheCacheHoldsHasNoMbu) {
  constexpr int64_t kMiB = 1 << 20;
  Peak peak{3e10, "measured: sum", true};
  // Ops/layer_norm's 12 MiB a step on a 32 MiB last-level cache, reading
  // four times faster than memory: no mbu, and the peak is untouched.
  const Utilisation u =
      BandwidthUtilisationOf(peak, 1.2e11, 1.4e11, 12.0 * kMiB, 32 * kMiB, "Ops/x");
  EXPECT_LT(u.value, 0);
  EXPECT_EQ(u.note, "");
  EXPECT_NE(u.omitted.find("a step works over 12"), std::string::npos) << u.omitted;
  EXPECT_NE(u.omitted.find("32"), std::string::npos) << u.omitted;
  EXPECT_NE(u.omitted.find("it reads from the cache, not from memory"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(peak.value, 3e10);
  // Named to the nearest byte (pybench names it alike): 754,432 bytes are
  // 736.75 KiB, which a rate times a time can land a hair under.
  for (const double bytes : {754432 - 1e-7, 754432 + 1e-7}) {
    const Utilisation near =
        BandwidthUtilisationOf(peak, 1e9, 1e9, bytes, 32 * kMiB, "x");
    EXPECT_NE(near.omitted.find("works over 736.8 KiB,"), std::string::npos)
        << near.omitted;
  }
  // However slowly it runs: what it reads is the cache's.
  EXPECT_LT(BandwidthUtilisationOf(peak, 1e9, 1e9, 12.0 * kMiB, 32 * kMiB, "Ops/x").value,
            0);
}

TEST(BandwidthUtilisationOf, UnderEightCachesAStepNeverRaisesThePeak) {
  constexpr int64_t kMiB = 1 << 20;
  const int64_t cache = 32 * kMiB;
  Peak peak{3e10, "measured: sum", true};
  // Ops/add in fp32 (72 MiB a step): slower than the peak, an mbu.
  Utilisation u = BandwidthUtilisationOf(peak, 1.5e10, 2e10, 72.0 * kMiB, cache, "Ops/a");
  EXPECT_DOUBLE_EQ(u.value, 0.5);
  EXPECT_DOUBLE_EQ(u.peak, 3e10);
  // Faster than the peak: the cache served part of it. No mbu, the peak
  // stays, and what comes after is divided by it.
  u = BandwidthUtilisationOf(peak, 2.9e10, 3.6e10, 72.0 * kMiB, cache, "Ops/a");
  EXPECT_LT(u.value, 0);
  EXPECT_EQ(u.note, "");
  EXPECT_NE(u.omitted.find("the fastest step's rate is 1.2 times the bandwidth peak"),
            std::string::npos)
      << u.omitted;
  EXPECT_NE(u.omitted.find("under 8 times the device's 32"), std::string::npos)
      << u.omitted;
  EXPECT_DOUBLE_EQ(peak.value, 3e10);
  EXPECT_EQ(peak.source, "measured: sum");
  // From eight caches on (Ops/copy/256MiB: 512 MiB a step) the step reads
  // memory: a beaten measured peak was measured too low, and is raised.
  u = BandwidthUtilisationOf(peak, 3e10, 3.3e10, 512.0 * kMiB, cache, "Ops/copy");
  EXPECT_DOUBLE_EQ(peak.value, 3.3e10);
  EXPECT_DOUBLE_EQ(u.value, 3e10 / 3.3e10);
  EXPECT_NE(u.note.find("raised"), std::string::npos);
  // No size of the step: by the rate alone.
  Peak other{3e10, "measured: sum", true};
  EXPECT_DOUBLE_EQ(BandwidthUtilisationOf(other, 2e10, 2e10, 0, cache, "x").value,
                   2.0 / 3);
  // No cache size (MPS): a step under the 256 MiB the peak was measured over
  // that beats it may have read from a cache; it has no mbu and the peak
  // stays. One that does not beat it is judged as any other.
  u = BandwidthUtilisationOf(other, 3e10, 4e10, 12.0 * kMiB, 0, "x");
  EXPECT_LT(u.value, 0);
  EXPECT_NE(u.omitted.find("under the 256.0 MiB that peak was measured over"),
            std::string::npos)
      << u.omitted;
  EXPECT_DOUBLE_EQ(other.value, 3e10);
  EXPECT_DOUBLE_EQ(BandwidthUtilisationOf(other, 1.5e10, 2e10, 12.0 * kMiB, 0, "x").value,
                   0.5);
  // From the measurement's size on, a beaten measured peak is raised.
  EXPECT_DOUBLE_EQ(BandwidthUtilisationOf(other, 3e10, 4e10, 512.0 * kMiB, 0, "x").value,
                   0.75);
  EXPECT_DOUBLE_EQ(other.value, 4e10);
  // A given peak is never raised: the rate past it is left out as before.
  Peak given{3e10, "--peak_bandwidth", false};
  EXPECT_NE(BandwidthUtilisationOf(given, 4e10, 4e10, 12.0 * kMiB, 0, "x")
                .omitted.find("the rate is 1.33 times"),
            std::string::npos);
}

TEST(BandwidthUtilisationOf, AGivenPeakIsJudgedTheSameWay) {
  constexpr int64_t kMiB = 1 << 20;
  Peak sheet{3.35e12, "datasheet: H100", false};
  // 12 MiB in a 50 MiB L2: no mbu, whatever the rate.
  EXPECT_LT(
      BandwidthUtilisationOf(sheet, 1e12, 1e12, 12.0 * kMiB, 50 * kMiB, "Ops/ln").value,
      0);
  // 100 MiB, beating the datasheet: the cache's, not a wrong peak.
  const Utilisation u =
      BandwidthUtilisationOf(sheet, 3.5e12, 4e12, 100.0 * kMiB, 50 * kMiB, "Ops/sm");
  EXPECT_LT(u.value, 0);
  EXPECT_NE(u.omitted.find("served part of its reads"), std::string::npos) << u.omitted;
  EXPECT_DOUBLE_EQ(sheet.value, 3.35e12);
  // Or the peak given is low (--peak_bandwidth=1e10 where memory reads
  // 3.1e10): a given peak, unlike a measured one, is said to be either.
  EXPECT_NE(u.omitted.find("served part of its reads, or that peak is too low for this "
                           "device (the peak is not raised for it)"),
            std::string::npos)
      << u.omitted;
  Peak measured{3.35e12, "measured: copy", true};
  EXPECT_EQ(
      BandwidthUtilisationOf(measured, 3.5e12, 4e12, 100.0 * kMiB, 50 * kMiB, "Ops/sm")
          .omitted.find("too low"),
      std::string::npos);
}

}  // namespace
}  // namespace ltb
