// The run's metadata for the JSON "context": versions, BLAS, threads, CPU
// and GPUs, build type, commit, allocator. Recorded once per run.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ltb {

extern const char kGitCommit[];  // from the generated build_info.cc
extern const char kBuildType[];

using Context = std::vector<std::pair<std::string, std::string>>;

// `extra` (settings the caller chose: malloc, sync, ...) is appended.
Context CollectContext(const Context& extra);

// True when this binary was compiled with optimisation.
bool BuiltOptimized();

}  // namespace ltb
