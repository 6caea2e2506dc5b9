#include "peaks/peaks.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mkldnn_linear.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mv.h>
#include <ATen/ops/randn.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/format.h"
#include "device/backend.h"
#include "device/cpu_isa.h"
#include "device/device.h"
#include "device/timer.h"
#include "family/spec.h"
#include "peaks/cpu_bandwidth.h"
#include "peaks/cpu_peak.h"

namespace ltb {
namespace {

std::string Key(const c10::Device& device) { return DeviceName(device); }

// The name a peak is kept under: the dtype's, or "tf32" for fp32 as TF32.
std::string PrecisionName(c10::ScalarType dtype, bool tf32) {
  return tf32 && dtype == c10::kFloat ? "tf32" : DtypeName(dtype);
}

double DatasheetFlops(const DatasheetPeaks& p, c10::ScalarType dtype, bool tf32) {
  switch (dtype) {
    case c10::kFloat:
      return tf32 ? p.tf32 : p.fp32;
    case c10::kBFloat16:
      return p.bf16;
    case c10::kHalf:
      return p.fp16;
    default:
      return 0;
  }
}

}  // namespace

absl::StatusOr<std::map<c10::ScalarType, double>> ParsePeakFlops(
    const std::string& text) {
  std::map<c10::ScalarType, double> out;
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("valid: FLOP/s for every dtype (1.2e14) or dtype=FLOP/s pairs "
                     "(fp32=6.7e13,bf16=9.9e14) with dtypes fp32, bf16, fp16, fp64"));
  };
  double v = 0;
  if (absl::SimpleAtod(text, &v)) {
    if (!std::isfinite(v) || v <= 0) return bad();
    // fp64 too: a --model file's dtype may be, and the suite measures no
    // fp64 peak of its own.
    for (c10::ScalarType t : {c10::kFloat, c10::kBFloat16, c10::kHalf, c10::kDouble}) {
      out[t] = v;
    }
    return out;
  }
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    // fp64: a --model file's dtype, which no family sweeps.
    absl::StatusOr<c10::ScalarType> dtype =
        kv.first == "fp64" ? absl::StatusOr<c10::ScalarType>(c10::kDouble)
                           : ParseDtype(kv.first);
    if (!dtype.ok() || !absl::SimpleAtod(kv.second, &v) || !std::isfinite(v) || v <= 0) {
      return bad();
    }
    out[*dtype] = v;
  }
  return out;
}

absl::StatusOr<double> ParsePeakBandwidth(const std::string& text) {
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v) || v <= 0) {
    return absl::InvalidArgumentError("valid: bytes per second, e.g. 3.35e12");
  }
  return v;
}

double MeasureMatmulPeak(const c10::Device& device, c10::ScalarType dtype,
                         const std::vector<MatmulShape>& shapes, GemmPath path) {
  std::vector<MatmulShape> ordered = shapes;
  const auto flops = [](const MatmulShape& s) { return 2.0 * s[0] * s[1] * s[2]; };
  std::sort(
      ordered.begin(), ordered.end(),
      [&](const MatmulShape& a, const MatmulShape& b) { return flops(a) < flops(b); });
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  StepTimer timer(device, /*sync=*/true);
  struct Candidate {
    double flops;
    at::Tensor a, b, c;
    double fastest = 1e30;
    // LibTorch's matmul into a preallocated output, or oneDNN's linear over
    // operands reordered into its layout once (b holds the (n, k) weight).
    void Run(GemmPath path) {
      if (path == GemmPath::kDefault) {
        at::mm_out(c, a, b);
      } else {
        c = at::mkldnn_linear(a, b);
      }
    }
  };
  // Warm each shape up (threads, caches, clocks) for kShapeSeconds. The
  // warm-up rate also tells which shapes would take over kMaxStepSeconds a
  // step; those are left out. On two AVX-512 cores fp32's 4096^3 takes 0.8
  // s a step for no higher rate than 2048^3's: with it, and twice the time a
  // shape, fp32's measurement took 14 s and bf16's 11 s, against 6 and 8 s
  // now, for the same rates within 2% (on one thread too, where LibTorch's
  // matmul can beat the loop).
  constexpr double kShapeSeconds = 0.05, kMaxStepSeconds = 0.5;
  std::vector<Candidate> candidates;
  double rough = 0;
  for (const MatmulShape& s : ordered) {
    if (rough > 0 && flops(s) / rough > kMaxStepSeconds) continue;
    Candidate c{flops(s), at::randn({s[0], s[1]}, opts), at::randn({s[1], s[2]}, opts),
                at::empty({s[0], s[2]}, opts)};
    if (path == GemmPath::kOnednn) {
      c.a = c.a.to_mkldnn();
      c.b = c.b.t().contiguous().to_mkldnn();
    }
    for (double warm = 0; warm < kShapeSeconds;) {
      timer.Start();
      c.Run(path);
      const double t = timer.Stop();
      warm += t;
      rough = std::max(rough, c.flops / t);
    }
    candidates.push_back(std::move(c));
  }
  // Three rounds over the shapes, each timing every shape for at least one
  // step and kShapeSeconds (small shapes take thousands of steps). A shape's
  // best step is the fastest of samples spread over the whole measurement,
  // so a passing burst of load on a shared machine cannot lower it.
  for (int round = 0; round < 3; ++round) {
    for (Candidate& c : candidates) {
      double spent = 0;
      for (int i = 0; i < 1 || (spent < kShapeSeconds && i < 10000); ++i) {
        timer.Start();
        c.Run(path);
        const double t = timer.Stop();
        spent += t;
        c.fastest = std::min(c.fastest, t);
      }
    }
  }
  double best = 0;
  for (const Candidate& c : candidates) best = std::max(best, c.flops / c.fastest);
  return best;
}

double MeasureCopyPeak(const c10::Device& device) {
  const int64_t n = kMeasuredBandwidthBytes / 4;
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor src = at::randn({n}, opts), dst = at::empty({n}, opts);
  dst.copy_(src);
  // Reading alone (what decoding does with its weights) outruns a copy, whose
  // writes also read each line before they write it: a matrix-vector product
  // over the same 256 MiB, read once.
  const int64_t side = 8192;  // 8192^2 fp32 = 256 MiB
  const at::Tensor matrix = src.view({side, side});
  const at::Tensor vector = at::randn({side}, opts);
  at::Tensor product = at::empty({side}, opts);
  StepTimer timer(device, /*sync=*/true);
  // The fastest step of `op` so far, each call timing it for 0.1 s or 10 steps.
  const auto time = [&](const std::function<void()>& op, double* best) {
    double spent = 0;
    for (int i = 0; i < 10 && spent < 0.1; ++i) {
      timer.Start();
      op();
      const double t = timer.Stop();
      spent += t;
      *best = std::min(*best, t);
    }
  };
  // Three rounds alternating the two, so that a passing burst of load on a
  // shared machine lowers neither.
  double copy = 1e30, read = 1e30;
  for (int round = 0; round < 3; ++round) {
    time([&] { dst.copy_(src); }, &copy);
    time([&] { at::mv_out(product, matrix, vector); }, &read);
  }
  return std::max(2.0 * n * 4 / copy, 1.0 * n * 4 / read);
}

Peaks::Peaks(std::map<c10::ScalarType, double> flops_override, double bandwidth_override,
             std::vector<MatmulShape> matmul_shapes, std::string peak_cache)
    : flops_override_(std::move(flops_override)),
      bandwidth_override_(bandwidth_override),
      shapes_(std::move(matmul_shapes)),
      record_(std::move(peak_cache)) {}

Peak Peaks::BestRecorded(const c10::Device& device, const std::string& quantity,
                         Peak measured) {
  if (!record_.enabled() || measured.value <= 0) return measured;
  const RecordedPeak r = record_.Merge(
      PeakRecordKey(quantity, Key(device), BackendOf(device).DisplayName(device)),
      measured.value, measured.source);
  if (!r.warning.empty()) std::cerr << "bench: " << r.warning << "\n";
  record_unread_ |= !r.read;
  record_unkept_ |= !r.kept;
  return {r.value, DescribeRecordedPeak(r, record_.path()), true};
}

void Peaks::Prepare(const c10::Device& device, c10::ScalarType dtype, bool bandwidth,
                    bool tf32) {
  tf32 = tf32 && dtype == c10::kFloat;
  const auto key = std::make_pair(Key(device), PrecisionName(dtype, tf32));
  const DatasheetPeaks* sheet = BackendOf(device).Datasheet(device);
  if (!flops_.count(key)) {
    Peak p;
    if (flops_override_.count(dtype) && !tf32) {
      p = {flops_override_.at(dtype), "--peak_flops"};
    } else if (const std::string gap =
                   BackendOf(device).ArithmeticGap(device, dtype, tf32);
               !gap.empty()) {
      p = {0, absl::StrCat("none: ", gap, ", so no mfu is reported for it")};
    } else if (sheet != nullptr && DatasheetFlops(*sheet, dtype, tf32) > 0) {
      p = {DatasheetFlops(*sheet, dtype, tf32),
           absl::StrCat("datasheet: ", sheet->model, " (", sheet->source, ")")};
    } else if (BackendOf(device).FlopsPeakMethod() == PeakMethod::kCpuLimit) {
      p = BestRecorded(device, absl::StrCat(DtypeName(dtype), " FLOP/s"),
                       MeasureCpuFlops(dtype));
    } else {
      // TF32 measured with TF32 on, and off again after.
      BackendOf(device).SetTf32(tf32);
      try {
        p = {MeasureMatmulPeak(device, dtype, shapes_),
             "measured: fastest step of the Ops matmul shapes", true};
      } catch (...) {
        BackendOf(device).SetTf32(false);
        throw;
      }
      BackendOf(device).SetTf32(false);
      p = BestRecorded(device, absl::StrCat(PrecisionName(dtype, tf32), " FLOP/s"), p);
    }
    flops_[key] = p;
  }
  if (bandwidth && !bandwidth_.count(Key(device))) {
    Peak p;
    if (bandwidth_override_ > 0) {
      p = {bandwidth_override_, "--peak_bandwidth"};
    } else if (sheet != nullptr) {
      p = {sheet->bandwidth,
           absl::StrCat("datasheet: ", sheet->model, " (", sheet->source, ")")};
    } else if (BackendOf(device).FlopsPeakMethod() == PeakMethod::kCpuLimit) {
      const BandwidthPeak measured = MeasureCpuBandwidth();
      p = {measured.bytes_per_s, DescribeBandwidthPeak(measured), true};
      // A buffer cut down by a limited address space may be served in part
      // by the cache: its rate is this run's alone, not the machine's.
      if (BandwidthBufferIsFull(measured)) p = BestRecorded(device, "bandwidth", p);
    } else {
      p = BestRecorded(
          device, "bandwidth",
          {MeasureCopyPeak(device),
           "measured: the faster of a 256MiB copy (bytes read + written) and a "
           "matrix-vector product reading 256MiB",
           true});
    }
    bandwidth_[Key(device)] = p;
  }
}

Peak Peaks::MeasureCpuFlops(c10::ScalarType dtype) {
  const c10::Device cpu = HostDevice();
  if (dtype != c10::kFloat && dtype != c10::kBFloat16 && dtype != c10::kHalf) {
    return {0,
            absl::StrCat("none: the suite measures no ", DtypeName(dtype),
                         " peak (its loops are fp32's, bf16's and fp16's), so no mfu is "
                         "reported for it; --peak_flops gives one (a number, or ",
                         DtypeName(dtype), "=FLOP/s)")};
  }
  const LoopPeak loop = MeasureLoopPeak(dtype);
  if (loop.flops <= 0) {
    // Under a simulated older CPU, the limit is what has none.
    const std::string limit = CpuIsaLimit();
    return {0,
            absl::StrCat(
                "none: ",
                limit.empty()
                    ? "this CPU has"
                    : absl::StrCat("the CPU simulated (LTB_MAX_CPU_ISA=", limit, ") has"),
                " no native ", DtypeName(dtype),
                " arithmetic (LibTorch converts it to fp32), so no mfu is "
                "reported for it")};
  }
  // A GEMM path this LibTorch lacks for the dtype reaches nothing.
  const auto gemm = [&](GemmPath path) {
    try {
      return MeasureMatmulPeak(cpu, dtype, shapes_, path);
    } catch (const c10::Error&) {
      return 0.0;
    }
  };
  const double stock = gemm(GemmPath::kDefault);
  if (stock > 0) default_gemm_[{Key(cpu), DtypeName(dtype)}] = stock;
  double onednn = 0;
  if (at::hasMKLDNN() && (dtype == c10::kFloat || dtype == c10::kBFloat16)) {
    onednn = gemm(GemmPath::kOnednn);
  }
  const double best = std::max({loop.flops, stock, onednn});
  // A path that reached nothing is said so, not given a rate of 0.
  const auto rate = [](double flops, const char* why) {
    return flops > 0 ? absl::StrFormat("%.4g", flops) : std::string(why);
  };
  return {best,
          absl::StrFormat(
              "measured: the highest of a register-resident %s loop on %d threads %.4g, "
              "LibTorch's matmul %s and oneDNN's linear %s over the Ops matmul shapes",
              loop.isa, at::get_num_threads(), loop.flops,
              rate(stock, "(which failed: none)"),
              rate(onednn,
                   at::hasMKLDNN() && (dtype == c10::kFloat || dtype == c10::kBFloat16)
                       ? "(which failed: none)"
                       : "(not measured: oneDNN's linear takes fp32 and bf16)")),
          true};
}

Utilisation UtilisationOf(Peak& peak, double mean_rate, double best_rate,
                          const std::string& benchmark, const std::string& what,
                          bool exact) {
  Utilisation u;
  // A device without the dtype's arithmetic has no peak, and says why.
  if (peak.value <= 0 && mean_rate > 0) {
    u.omitted = std::string(absl::StripPrefix(peak.source, "none: "));
  }
  if (peak.value <= 0 || mean_rate <= 0) return u;
  best_rate = std::max(best_rate, mean_rate);
  if (peak.measured && exact && best_rate > peak.value) {
    u.note = absl::StrFormat(
        "%s's fastest step reached %.4g, above the measured %s %.4g: that peak was "
        "measured too low and is raised to %.4g for it and every later benchmark",
        benchmark, best_rate, what, peak.value, best_rate);
    peak.source = absl::StrFormat("%s; raised to %.4g by %s (from %.4g)", peak.source,
                                  best_rate, benchmark, peak.value);
    peak.value = best_rate;
  }
  const double value = mean_rate / peak.value;
  if (value > 1) {
    u.note = absl::StrFormat(
        "%s reached %.4g, above the %s %.4g (%s): a wrong peak or a wrong count, so "
        "no utilisation is reported",
        benchmark, mean_rate, what, peak.value, peak.source);
    u.omitted = absl::StrFormat("the rate is %.3g times the %s %.4g (%s)", value, what,
                                peak.value, peak.source);
    return u;
  }
  u.value = value;
  u.peak = peak.value;
  return u;
}

Utilisation Peaks::FlopsUtilisation(const c10::Device& device, c10::ScalarType dtype,
                                    bool tf32, double mean_rate, double best_rate,
                                    const std::string& benchmark, bool exact) {
  const std::string precision = PrecisionName(dtype, tf32);
  auto it = flops_.find({Key(device), precision});
  if (it == flops_.end()) return {};
  return UtilisationOf(it->second, mean_rate, best_rate, benchmark,
                       absl::StrCat(precision, " FLOP/s peak"), exact);
}

Utilisation BandwidthUtilisationOf(Peak& peak, double mean_rate, double best_rate,
                                   double step_bytes, int64_t cache_bytes,
                                   const std::string& benchmark) {
  const std::string what = "bandwidth peak (bytes/s)";
  const double cache = static_cast<double>(cache_bytes);
  Utilisation u;
  // No cache size (MPS, whose system-level cache LibTorch does not report):
  // a step that beats the peak measured over 256 MiB while it works over
  // less may have read from a cache, and a peak raised by it would divide
  // every later benchmark's reads by the cache's rate.
  if (cache <= 0 && peak.measured && step_bytes > 0 &&
      step_bytes < static_cast<double>(kMeasuredBandwidthBytes) &&
      std::max(best_rate, mean_rate) > peak.value && peak.value > 0) {
    u.omitted = absl::StrFormat(
        "the fastest step's rate is %.3g times the %s %.4g (%s), and a step's %s are "
        "under the %s that peak was measured over, on a device whose cache's size is "
        "unknown, which may have served part of its reads (the peak is not raised for "
        "it)",
        std::max(best_rate, mean_rate) / peak.value, what, peak.value, peak.source,
        FormatBytes(std::llround(step_bytes)), FormatBytes(kMeasuredBandwidthBytes));
    return u;
  }
  if (cache <= 0 || step_bytes <= 0 || step_bytes >= kCachesFromMemory * cache) {
    return UtilisationOf(peak, mean_rate, best_rate, benchmark, what);
  }
  // Named to the nearest byte: a decode step's bytes come as a rate times a
  // time, a hair either side of a whole number.
  const std::string step = FormatBytes(std::llround(step_bytes));
  if (step_bytes <= cache) {
    u.omitted = absl::StrFormat(
        "a step works over %s, which the device's %s cache holds: it reads from the "
        "cache, not from memory",
        step, FormatBytes(cache_bytes));
    return u;
  }
  const double fastest = std::max(best_rate, mean_rate);
  if (peak.value <= 0 || fastest <= peak.value) {
    return UtilisationOf(peak, mean_rate, best_rate, benchmark, what);
  }
  u.omitted = absl::StrFormat(
      "the fastest step's rate is %.3g times the %s %.4g (%s), and a step's %s are "
      "under %d times the device's %s cache, which served part of its reads%s (the "
      "peak is not raised for it)",
      fastest / peak.value, what, peak.value, peak.source, step, kCachesFromMemory,
      FormatBytes(cache_bytes),
      // A peak given, not measured, may be the one that is wrong.
      peak.measured ? "" : ", or that peak is too low for this device");
  return u;
}

Utilisation Peaks::BandwidthUtilisation(const c10::Device& device, double mean_rate,
                                        double best_rate, double step_bytes,
                                        const std::string& benchmark) {
  auto it = bandwidth_.find(Key(device));
  if (it == bandwidth_.end()) return {};
  return BandwidthUtilisationOf(it->second, mean_rate, best_rate, step_bytes,
                                BackendOf(device).CacheBytes(device), benchmark);
}

const Peak* Peaks::Flops(const c10::Device& device, c10::ScalarType dtype,
                         bool tf32) const {
  auto it = flops_.find({Key(device), PrecisionName(dtype, tf32)});
  return it == flops_.end() || it->second.value <= 0 ? nullptr : &it->second;
}

const Peak* Peaks::Bandwidth(const c10::Device& device) const {
  auto it = bandwidth_.find(Key(device));
  return it == bandwidth_.end() ? nullptr : &it->second;
}

std::vector<std::pair<std::string, std::string>> Peaks::Context() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, p] : flops_) {
    out.emplace_back(
        absl::StrCat("peak_flops_", key.first, "_", key.second),
        p.value > 0 ? absl::StrFormat("%.4g FLOP/s (%s)", p.value, p.source) : p.source);
  }
  for (const auto& [key, value] : default_gemm_) {
    out.emplace_back(
        absl::StrCat("gemm_flops_", key.first, "_", key.second),
        absl::StrFormat("%.4g FLOP/s (LibTorch's default matmul, fastest step "
                        "of the Ops matmul shapes)",
                        value));
  }
  for (const auto& [device, p] : bandwidth_) {
    out.emplace_back(absl::StrCat("peak_bandwidth_", device),
                     absl::StrFormat("%.4g bytes/s (%s)", p.value, p.source));
  }
  bool any_measured = false;
  for (const auto& [key, p] : flops_) any_measured |= p.measured;
  for (const auto& [device, p] : bandwidth_) any_measured |= p.measured;
  if (!any_measured) return out;
  std::string cache = "off (measured peaks are this run's own)";
  if (record_.enabled() && record_unread_) {
    cache = absl::StrCat(record_.path(),
                         " could not be used (measured peaks are this run's own)");
  } else if (record_.enabled()) {
    cache = absl::StrCat(record_.path(),
                         " (this machine's best measured peaks: measured peaks are the "
                         "best of it and this run's",
                         record_unkept_ ? "; this run's could not be written to it" : "",
                         ")");
  }
  out.emplace_back("peak_cache", cache);
  return out;
}

}  // namespace ltb
