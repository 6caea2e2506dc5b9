#include "models/selftest.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"

namespace ltb {
namespace {

class SelftestWorkload final : public Workload {
 public:
  explicit SelftestWorkload(std::string kind) : kind_(std::move(kind)) {}
  void Step() override {
    if (kind_ == "abort") std::abort();
    if (kind_ == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }

 private:
  std::string kind_;
};

}  // namespace

Family SelftestFamily() {
  Family f;
  f.name = "Selftest";
  f.sizes = {"ok", "slow", "abort"};
  for (const std::string& size : f.sizes)
    f.cases.push_back({size, "step", false, Shape::kNone});
  f.plan = [](const BenchSpec& s) -> absl::StatusOr<Plan> {
    if (s.size != "ok" && s.size != "slow" && s.size != "abort") {
      return absl::InvalidArgumentError(absl::StrCat("unknown Selftest '", s.size, "'"));
    }
    Plan plan;
    plan.samples_per_step = 1;
    return plan;
  };
  f.build = [](const BenchSpec& s) { return std::make_unique<SelftestWorkload>(s.size); };
  return f;
}

}  // namespace ltb
