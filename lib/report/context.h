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

// The versions a LibTorch build summary (at::show_config()) names, "" where
// it names none: MKL's ("2024.2-Product Build 20240605") and oneDNN's
// ("3.13.3 (git b38f97eb6f21)"). Either changes what a matmul or a packed
// linear runs where the LibTorch version does not say (a LibTorch built
// against the system's).
std::string MklVersionIn(const std::string& config);
std::string OneDnnVersionIn(const std::string& config);

}  // namespace ltb
