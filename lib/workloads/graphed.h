// --cuda_graphs for a whole step: the step captured once as a graph on its
// device and replayed at every step after.
#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "family/family.h"

namespace ltb {

// `inner`, each Step() replaying one capture of inner's step (which runs
// eagerly first, as capture needs). Counters, Evaluate() and the rest are
// inner's. Throws where the device has no graphs or the step cannot be
// captured.
std::unique_ptr<Workload> GraphedSteps(std::unique_ptr<Workload> inner,
                                       const c10::Device& device);

}  // namespace ltb
