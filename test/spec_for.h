// Test helper: the BenchSpec of one benchmark, as the registration loop
// would build it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "harness/spec.h"

namespace ltb {

// batch and seq 0: the family has no such setting.
inline BenchSpec SpecFor(std::string family, std::string size, std::string phase,
                         int64_t batch = 0, int64_t seq = 0) {
  BenchSpec s;
  s.family = std::move(family);
  s.size = std::move(size);
  s.phase = std::move(phase);
  s.batch = batch;
  s.seq = seq;
  return s;
}

}  // namespace ltb
