// Test helper: the BenchSpec of one benchmark, as the registration loop
// would build it: the phase's kind and iterations come from the registered
// family's case, when there is one.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "family/family.h"
#include "family/registry.h"
#include "family/spec.h"

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

}  // namespace ltb
