// Explicit thread settings: LibTorch's intra-op and inter-op pools and the
// BLAS library's own pool, so that two pools never fight over the cores.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace ltb {

struct ThreadSettings {
  int intra_op = 0;  // 0: LibTorch's default (physical cores)
  int inter_op = 1;
};

// Applies the settings once, before any parallel work has started. Sets the
// BLAS library's thread count to the intra-op count as well.
absl::Status ConfigureThreads(const ThreadSettings& settings);

int IntraOpThreads();
int InterOpThreads();

// The BLAS library in use ("mkl", "openblas", ...) as LibTorch was built,
// plus any BLAS shared library actually loaded into the process.
std::string BlasLibrary();

// BLAS threads as the BLAS library reports them, or -1 if it cannot say.
int BlasThreads();

}  // namespace ltb
