// The process's memory around the benchmarks: its peak resident set, cached
// memory given back between benchmarks, and the malloc settings the suite
// runs with.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "base/format.h"

namespace ltb {

// The process's peak resident set (Linux's VmHWM), which ResetPeakRss()
// brings down to the current resident set (through /proc/self/clear_refs).
// Both say false / -1 where the system cannot.
bool ResetPeakRss();
int64_t PeakRssBytes();

// Returns cached device memory to the driver between benchmarks (on the
// CPU, the memory malloc keeps, so the next memory check sees it free).
void ReleaseCachedMemory(const c10::Device& device);

// glibc malloc: "tuned" keeps freed memory in the process (no mmap for large
// blocks, no trimming) so a step does not pay page faults for memory the
// previous step returned; "system" leaves glibc's defaults. Returns a
// description for the run context.
// Where another malloc serves the process (jemalloc or tcmalloc preloaded or
// linked before glibc), glibc's settings do nothing, and the description
// says which library it is instead.
absl::Status ConfigureMalloc(const std::string& mode, std::string* description);

// Whether glibc's malloc serves the process under "tuned": a block it frees
// stays in the process, and a later larger one may not fit where it was, so
// that the resident set of a step that allocates and frees large tensors
// (attention scores) grows past its live peak (Encoder/nano's
// forward_backward at batch 8 x 2048: 6.96 GB resident for a peak_mem of
// 3.88 GB, 4.48 GB under "system").
bool HeapKeepsFreedMemory();

// The file of the library whose malloc the process calls ("" when unknown).
std::string MallocLibrary();
// The description ConfigureMalloc gives `glibc`'s settings when `library`
// serves malloc: theirs where it is glibc's (libc.so) or unknown, else that
// the other library serves it and the settings do not apply.
std::string MallocDescription(const std::string& glibc, const std::string& library);

}  // namespace ltb
