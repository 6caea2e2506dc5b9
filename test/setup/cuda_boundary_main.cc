// The CUDA boundary alone (device/cuda_runtime.cc, or its stub where
// LibTorch has no CUDA), linked as bench links it: LibTorch, the CUDA
// runtime, Google Benchmark, Abseil. The set-up tests build this one target
// to prove that a machine without the CUDA toolkit, or offline from a kit,
// compiles and links what the toolkit changes, without building the whole
// suite again. It prints what it found as one JSON object and runs one empty
// benchmark.
#include <benchmark/benchmark.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "device/cuda_runtime.h"

int main(int argc, char** argv) {
  std::string why;
  const int gpus = ltb::cuda::DeviceCount(&why);
  const nlohmann::json found = {{"cuda_compiled", ltb::cuda::Compiled()},
                                {"cuda_runtime", ltb::cuda::RuntimeVersion()},
                                {"cuda_build", ltb::cuda::BuildNote()},
                                {"gpus", gpus},
                                {"why_no_gpu", gpus > 0 ? "" : why},
                                {"abseil", absl::StrCat("StrCat ", 1, "+", 1)}};
  std::cout << found.dump() << "\n";
  benchmark::Initialize(&argc, argv);
  benchmark::RegisterBenchmark("empty", [](benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(state.iterations());
  });
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
