// The hardware limits model benchmarks are compared with: matmul FLOP/s per
// dtype and memory bandwidth per device, each with where it came from —
// measured on this machine, given on the command line, or a datasheet.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "device/datasheets.h"
#include "family/family.h"
#include "peaks/peak_record.h"

namespace ltb {

struct Peak {
  double value = 0;    // FLOP/s, or bytes/s
  std::string source;  // "measured: ...", "--peak_flops", "datasheet: ..."
  // Measured on this machine: a lower bound of what it can do, which a
  // benchmark's faster rate raises (see Peaks::Utilisation).
  bool measured = false;
};

// A utilisation (mfu, mbu) against a peak, or why there is none.
struct Utilisation {
  double value = -1;  // in [0, 1]; -1: none
  double peak = 0;    // what `value` divides by, after any raise it made
  std::string note;   // a raised peak, or why a value is left out
  // When the value is left out, why, for the result itself: by how much the
  // peak was passed ("the rate is 1.2 times the fp32 FLOP/s peak 6.7e+13
  // (datasheet: ...)"), or that the step's data sat in a cache.
  std::string omitted;
};

// --peak_flops: a number for every dtype ("1.2e14") or dtype=number pairs
// ("fp32=6.7e13,bf16=9.9e14").
absl::StatusOr<std::map<c10::ScalarType, double>> ParsePeakFlops(const std::string& text);
// --peak_bandwidth: bytes/s, a positive number.
absl::StatusOr<double> ParsePeakBandwidth(const std::string& text);

class Peaks {
 public:
  // `peak_cache`: the record of this machine's best measured peaks (a path;
  // "" or "off": none), see peak_record.h.
  Peaks(std::map<c10::ScalarType, double> flops_override, double bandwidth_override,
        std::vector<MatmulShape> matmul_shapes, std::string peak_cache = "");

  // Determines the peaks of a device and dtype (measuring once); call before
  // any benchmark runs, so that no measurement lands in a timed region.
  // `tf32`: the peak of fp32 run as TF32, apart from fp32's (a datasheet's
  // TF32 row, or measured with TF32 on; --peak_flops does not set it).
  void Prepare(const c10::Device& device, c10::ScalarType dtype, bool bandwidth,
               bool tf32 = false);

  // Peaks prepared above; nullptr when there is none.
  const Peak* Flops(const c10::Device& device, c10::ScalarType dtype,
                    bool tf32 = false) const;
  const Peak* Bandwidth(const c10::Device& device) const;

  // The utilisation of `mean_rate` (the benchmark's achieved FLOP/s or
  // bytes/s) against the flops peak of (device, dtype) or the bandwidth peak
  // of device; `best_rate` is its fastest step's rate (>= mean_rate). A
  // measured peak that `best_rate` beats was measured too low (a shared
  // machine's passing load): it is raised to `best_rate` for this benchmark
  // and every later one, and the note says so. A datasheet or command-line
  // peak that the mean beats is a wrong peak or a wrong count: no value, and
  // the note says why. Never above 1. `exact`: false where the count may
  // exceed the arithmetic the kernels do (a convolution counted over its
  // padding, or as a direct one where Winograd does fewer): such a rate
  // past a measured peak says nothing of the peak, which stays, and gets no
  // value either.
  Utilisation FlopsUtilisation(const c10::Device& device, c10::ScalarType dtype,
                               bool tf32, double mean_rate, double best_rate,
                               const std::string& benchmark, bool exact = true);
  // `step_bytes`: what one step works over (0: unknown). mbu is memory's:
  // a step the device's cache can hold has none, and one under
  // kCachesFromMemory times the cache that beats a measured peak is taken to
  // read from the cache in part: it has none either, and the peak stays.
  // Where the cache's size is unknown (MPS), a step under the
  // kMeasuredBandwidthBytes the peak was measured over that beats it is
  // taken the same way.
  Utilisation BandwidthUtilisation(const c10::Device& device, double mean_rate,
                                   double best_rate, double step_bytes,
                                   const std::string& benchmark);

  // Context entries: peak_flops_<device>_<dtype> (or why there is none),
  // gemm_flops_<device>_<dtype> (what LibTorch's default matmul reached),
  // peak_bandwidth_<device>; each peak as it stands now, with every raise
  // a benchmark made to it (which one, from what, to what); peak_cache, the
  // record measured peaks were kept in (or "off").
  std::vector<std::pair<std::string, std::string>> Context() const;

 private:
  // A CPU's measured peak: the highest of the arithmetic loop and the GEMM
  // paths; value 0 when the CPU has no native arithmetic for the dtype.
  Peak MeasureCpuFlops(c10::ScalarType dtype);
  // A peak measured in this run, merged into the record under `quantity`
  // ("bandwidth", "fp32 FLOP/s"): the best this machine has measured, its
  // source naming both it and this run's measurement.
  Peak BestRecorded(const c10::Device& device, const std::string& quantity,
                    Peak measured);

  std::map<c10::ScalarType, double> flops_override_;
  double bandwidth_override_;
  std::vector<MatmulShape> shapes_;
  // Keyed by device and precision (a dtype's name, or "tf32").
  std::map<std::pair<std::string, std::string>, Peak> flops_;  // value 0: none
  std::map<std::pair<std::string, std::string>, double> default_gemm_;
  std::map<std::string, Peak> bandwidth_;
  PeakRecord record_;
  // The peak cache could not be used or written: the context says so.
  bool record_unread_ = false, record_unkept_ = false;
};

// The utilisation against `peak` as Peaks::FlopsUtilisation says, raising a
// measured peak in place where the count is `exact`; `what` names the peak
// in the note.
Utilisation UtilisationOf(Peak& peak, double mean_rate, double best_rate,
                          const std::string& benchmark, const std::string& what,
                          bool exact = true);
// The bandwidth utilisation of a step that works over `step_bytes` (0:
// unknown) on a device whose cache holds `cache_bytes` (0: unknown), as
// Peaks::BandwidthUtilisation says.
Utilisation BandwidthUtilisationOf(Peak& peak, double mean_rate, double best_rate,
                                   double step_bytes, int64_t cache_bytes,
                                   const std::string& benchmark);

// How a GEMM is run: LibTorch's default matmul (MKL or OpenBLAS on CPUs), or
// oneDNN's linear with both operands reordered into its layout once (CPU).
enum class GemmPath { kDefault, kOnednn };

// Best matmul FLOP/s over `shapes` on `device` in `dtype`: each shape timed
// for a fraction of a second, its fastest step kept; shapes whose step would
// take more than half a second are skipped.
double MeasureMatmulPeak(const c10::Device& device, c10::ScalarType dtype,
                         const std::vector<MatmulShape>& shapes,
                         GemmPath path = GemmPath::kDefault);
// What MeasureCopyPeak works over: on a device whose cache's size is
// unknown, a step under it may find its bytes in a cache the measurement's
// did not fit.
constexpr int64_t kMeasuredBandwidthBytes = int64_t{256} << 20;

// Best bytes/s of `device`: the fastest step of a 256 MiB copy (bytes read +
// written) and of a matrix-vector product reading a 256 MiB matrix, over
// three rounds that alternate the two.
double MeasureCopyPeak(const c10::Device& device);

}  // namespace ltb
