// CPU energy from RAPL through Linux's powercap interface: the package
// domains' cumulative energy_uj counters (a whole socket, cores and uncore,
// whatever runs on it), where the kernel exposes them and they are readable.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device/backend.h"

namespace ltb {

class RaplMeter final : public EnergyMeter {
 public:
  // The package domains under `root` (/sys/class/powercap: intel-rapl:N,
  // which AMD's CPUs use too; not their sub-domains intel-rapl:N:M), or why
  // there are none or they cannot be read.
  static absl::StatusOr<std::unique_ptr<EnergyMeter>> Create(
      const std::string& root = "/sys/class/powercap");

  double Joules() override;
  double MinSeconds() const override { return 0.05; }  // updated each millisecond
  // The smallest domain's range at 500 W (AMD's 32-bit counters wrap at
  // 4.3 kJ, Intel's at 262 kJ).
  double MaxSeconds() const override;
  std::string Covers() const override;

 private:
  struct Domain {
    std::string dir, name;
    double range_uj = 0;  // the counter wraps at max_energy_range_uj
    double last_uj = 0;
    double total_uj = 0;
  };
  explicit RaplMeter(std::vector<Domain> domains) : domains_(std::move(domains)) {}

  std::vector<Domain> domains_;
};

}  // namespace ltb
