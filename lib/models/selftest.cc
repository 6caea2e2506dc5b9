#include "models/selftest.h"

#include <ATen/ops/ones.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "distributed/distributed.h"
#include "family/registry.h"

namespace ltb {
namespace {

// A step of `spin`: 2 ms of busy waiting, times LTB_SELFTEST_SLOWDOWN (a
// factor, default 1), read once when the workload is built. Busy rather
// than sleeping, so it behaves like compute under load.
double SpinSeconds() {
  double factor = 1;
  const char* env = std::getenv("LTB_SELFTEST_SLOWDOWN");
  if (env != nullptr && (!absl::SimpleAtod(env, &factor) || factor <= 0)) factor = 1;
  return 0.002 * factor;
}

class SelftestWorkload final : public Workload {
 public:
  explicit SelftestWorkload(std::string kind) : kind_(std::move(kind)) {
    if (kind_ == "spin") spin_seconds_ = SpinSeconds();
    // Which ranks built it: an empty file KIND.rankN in LTB_SELFTEST_MARKS.
    if (const char* dir = std::getenv("LTB_SELFTEST_MARKS")) {
      std::ofstream(absl::StrCat(dir, "/", kind_, ".rank", CurrentRank()));
    }
  }
  void Step() override {
    if (kind_ == "rank1_fails" || kind_ == "together") return CollectiveStep();
    if (kind_ == "abort") std::abort();
    if (kind_ == "kill") std::raise(SIGKILL);
    if (kind_ == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (kind_ == "spin") {
      using Clock = std::chrono::steady_clock;
      const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(spin_seconds_));
      while (Clock::now() < end) {
      }
    }
  }

 private:
  // together and rank1_fails: every rank sums a tensor over the process
  // group each step (a data-parallel step's collective); in rank1_fails,
  // rank 1 fails at its fifth step, while the others wait for it in the
  // collective.
  void CollectiveStep() {
    DataParallel* group = CurrentProcessGroup();
    if (group == nullptr) return;
    if (kind_ == "rank1_fails" && group->rank() == 1 && ++steps_ == 5) {
      throw std::runtime_error("Selftest: rank 1 fails at its fifth step");
    }
    at::Tensor t = at::ones({1}, at::TensorOptions(at::kDouble).device(group->device()));
    group->SumInPlace(t);
  }

  std::string kind_;
  double spin_seconds_ = 0;
  int steps_ = 0;
};

const std::vector<std::string>& Kinds() {
  static const auto* kinds = new std::vector<std::string>{
      "ok", "slow", "abort", "spin", "kill", "rank1_fails", "together"};
  return *kinds;
}

}  // namespace

Family SelftestFamily() {
  Family f;
  f.name = "Selftest";
  f.sizes = Kinds();
  f.phases = {Phase{"step", PhaseKind::kInference, Shape::kNone}};
  for (const std::string& size : f.sizes) {
    Case c{size, f.phases[0]};
    // Its ranks step together, and its failure stops the run, as a
    // data-parallel training step's does.
    c.phase.data_parallel = size == "rank1_fails" || size == "together";
    c.sweeps_dtype = false;
    f.cases.push_back(c);
  }
  f.plan = [](const BenchSpec& s) -> absl::StatusOr<Plan> {
    if (std::find(Kinds().begin(), Kinds().end(), s.size) == Kinds().end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown Selftest '", s.size, "'"));
    }
    Plan plan;
    plan.samples_per_step = 1;
    return plan;
  };
  f.build = [](const BenchSpec& s) { return std::make_unique<SelftestWorkload>(s.size); };
  return f;
}
LTB_REGISTER_TEST_FAMILY(SelftestFamily, 90);

}  // namespace ltb
