// Test helper: the BenchSpec of one benchmark, as the registration loop
// would build it: the phase's kind and iterations come from the registered
// family's case, when there is one.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "device/device.h"
#include "family/family.h"
#include "family/registry.h"
#include "family/spec.h"
#include "suite/sweep.h"

namespace ltb {

// batch and seq 0: the family has no such setting. A size or phase the
// family does not have keeps the phase's name only (for error tests).
inline BenchSpec SpecFor(std::string family, std::string size, std::string phase,
                         int64_t batch = 0, int64_t seq = 0) {
  BenchSpec s;
  s.family = std::move(family);
  s.size = std::move(size);
  s.phase = std::move(phase);
  s.batch = batch;
  s.seq = seq;
  static const std::vector<Family>* families =
      new std::vector<Family>(RegisteredFamilies(/*include_test_only=*/true).value());
  if (absl::StatusOr<const Family*> f = FindFamily(*families, s.family); f.ok()) {
    s.phase_before_device = (*f)->phase_before_device;
    if (absl::StatusOr<Case> c = (*f)->FindCase(s.size, s.phase); c.ok()) {
      SetPhase(c->phase, &s);
    }
  }
  return s;
}

// A serve benchmark of a nano decoder's generation in `scenario`: 4 slots,
// prompts of 3 to 12 tokens, outputs of 2 to 8, a short LoadGen test.
inline BenchSpec TextServeSpec(const std::string& family, const std::string& scenario) {
  BenchSpec s = SpecFor(family, "nano", "generate", /*batch=*/4);
  s.prompt = 12;
  s.new_tokens = 8;
  s.phase = kServe;
  s.serve.scenario = scenario;
  s.serve.phase = "generate";
  s.serve.output_min = 2;
  s.serve.prompt_min = 3;
  s.serve.max_batch = 4;
  s.serve.target_qps = 50;
  s.serve.min_s = 0.2;
  s.serve.min_queries = 16;
  s.serve.ttft_bound_ms = 5000;
  s.serve.tpot_bound_ms = 5000;
  return s;
}

// A sweep on the host that serves in Offline at 1 QPS, up to `max_batch`
// samples a batch (or slots).
inline Sweep OfflineServeSweep(int64_t max_batch) {
  Sweep sweep;
  sweep.devices = {HostDevice()};
  sweep.serve_scenarios = {"Offline"};
  sweep.serve_qps = {kDefaultTargetQps};  // Offline's expected rate, out of the names
  sweep.serve.max_batch = max_batch;
  return sweep;
}

}  // namespace ltb
