// --compiled: the model files tools/export wrote for the suite's own
// benchmarks, registered after the eager benchmark each compiles.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "suite/sweep.h"
#include "workloads/model_file.h"

namespace ltb {

// The model files of a directory (--compiled) that tools/export made for the
// suite's benchmarks, by the benchmark each compiles (its name without the
// backend). Files it cannot read are reported in `errors`, not dropped.
std::multimap<std::string, ModelFile> CompiledBenchmarks(
    const std::string& dir, std::vector<std::string>* errors);

// Every registration in `eager`, each inference benchmark followed by the
// compiled files that `compiled` has for it: the same benchmark with the
// file's backend and the file.
std::vector<Registration> WithCompiled(
    const std::vector<Registration>& eager,
    const std::multimap<std::string, ModelFile>& compiled);

}  // namespace ltb
