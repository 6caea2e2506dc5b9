// The best peaks measured on this machine, kept from run to run in a JSON
// file (--peak_cache). A measured peak is a lower bound of what the machine
// can do, and on a shared machine what it delivers changes from one minute
// to the next (a VM's bandwidth peak moved by a third between runs), so a
// run's own measurement makes every mbu move with it. Each run still
// measures; the record keeps the highest value seen under the same key (the
// device, its model, the CPUs, the threads, the instruction-set limit and
// LibTorch's version), and the run divides by that, so that runs on one
// machine share one denominator, which only a faster measurement raises.
#pragma once

#include <string>

namespace ltb {

// The default record: $LTB_PEAK_CACHE when set (a path, or "off"), else
// $XDG_CACHE_HOME/libtorch-bench/peaks.json, else
// ~/.cache/libtorch-bench/peaks.json.
std::string DefaultPeakCachePath();

// What merging a run's measurement into the record gave.
struct RecordedPeak {
  double value = 0;             // the best of the record and this run's measurement
  double this_run = 0;          // this run's measurement
  std::string this_run_source;  // how this run measured it
  bool from_record = false;     // an earlier run's value beats this run's
  std::string best_at;          // when the best was measured (UTC, ISO 8601)
  std::string best_source;      // how the best was measured (the run's own words)
  int runs = 0;         // runs that have measured under this key, this one included
  std::string warning;  // the record could not be read or written: why
  bool read = true;     // false: the record could not be used at all (locked)
  bool kept = true;     // false: this run's measurement is not in the record
};

class PeakRecord {
 public:
  // `path` empty or "off": no record; every call returns the measurement.
  explicit PeakRecord(std::string path);

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // Merges a measurement under `key`, under an exclusive lock on PATH.lock
  // (runs that share the file, ranks of one job among them, take turns),
  // writing the file anew (a temporary file renamed over it). A record that
  // cannot be parsed is replaced, and one that cannot be written is left:
  // either way `warning` says so and the run goes on with what it has.
  RecordedPeak Merge(const std::string& key, double measured, const std::string& source);

 private:
  std::string path_;
};

// A peak's source when the record is on: how the best was measured and
// when, over how many runs, and this run's own figure where that is lower
// ("measured: the best of 3 runs on this machine, 2.6e+10 at ... (streaming
// read, ...); this run measured 2.4e+10 (...); kept in PATH").
std::string DescribeRecordedPeak(const RecordedPeak& r, const std::string& path);

// The key a measured peak is kept under: what it measures ("bandwidth",
// "fp32 FLOP/s"), the device kind, its model as the backend names it, the
// CPUs online, those this process may run on and its cgroup's CPU quota,
// the intra-op threads, the CPU instruction-set limit
// (LTB_MAX_CPU_ISA) and LibTorch's version, and the version of the
// suite's methods (a changed method starts a new record).
std::string PeakRecordKey(const std::string& quantity, const std::string& device_kind,
                          const std::string& model);

}  // namespace ltb
