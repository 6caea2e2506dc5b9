// bench: every registered model family and phase as Google Benchmark
// benchmarks. Google Benchmark's flags (--benchmark_*) are handled first;
// the suite's own flags (suite/flags.h) select the sweep and the settings.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "device/cpu_isa.h"
#include "device/cpu_memory.h"
#include "suite/flags.h"
#include "suite/suite.h"

int main(int argc, char** argv) {
  // Before oneDNN first reads its limit.
  ltb::MatchCpuSimulation();
  // Before any tensor exists, so every CPU tensor is counted.
  ltb::InstallCpuTracking();
  const ltb::CommandLine command_line = ltb::ReadCommandLine(&argc, argv);
  std::vector<char*> args = ltb::BenchmarkArguments(command_line, argc, argv);
  argc = static_cast<int>(args.size()) - 1;
  argv = args.data();
  benchmark::Initialize(&argc, argv, ltb::PrintSuiteHelp);
  if (absl::Status s = ltb::ParseSuiteFlags(argc, argv); !s.ok())
    ltb::ExitWithUsageError(s);
  absl::StatusOr<ltb::SuiteOptions> options = ltb::OptionsFromFlags();
  if (!options.ok()) ltb::ExitWithUsageError(options.status());
  if (options->list_families) return ltb::PrintFamilyFacts(options->families);
  absl::StatusOr<std::unique_ptr<ltb::Suite>> suite =
      ltb::Suite::Register(*options, command_line);
  if (!suite.ok()) ltb::ExitWithUsageError(suite.status());
  return (*suite)->Run();
}
