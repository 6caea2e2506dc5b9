// The memory guard: a benchmark that cannot fit on its device (or in the
// host memory its model is built in) is refused with the numbers, before it
// runs, rather than failing half-way or swapping.
#pragma once

#include <c10/core/Device.h>

#include "absl/status/status.h"
#include "family/family.h"
#include "measure/memory.h"

namespace ltb {

class DataParallel;

// OK when `need` fits in what `device` has available; otherwise an error
// that names both numbers and what the estimate is made of. `host_ranks`
// ranks of a data-parallel benchmark run on this machine, each building its
// own model in the host's memory (and on the CPU, running there too). On
// the CPU, where the heap keeps what it frees (`heap_keeps_freed`: the
// tuned malloc's), the activations count twice: blocks freed within a step
// stay resident beside those allocated after them.
absl::Status CheckFits(const MemoryEstimate& need, const c10::Device& device,
                       int host_ranks = 1,
                       bool heap_keeps_freed = HeapKeepsFreedMemory());

// The ranks of `group` (may be null: 1) that run on this machine (by
// MachineKey: its kernel's boot id, else its host name). A collective on the
// group's device.
int RanksOnThisHost(DataParallel* group);

// Data-parallel ranks run a benchmark all or none, or the others would wait
// for collectives that never come: `fits` unless another rank of `group`
// (may be null) refuses. The vote is a collective on the group's device.
absl::Status AgreeOnFit(absl::Status fits, DataParallel* group);

}  // namespace ltb
