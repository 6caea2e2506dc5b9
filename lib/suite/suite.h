// The bench program's steps after its flags are parsed: set up the process
// (malloc, threads, devices, the process group), register every family's
// benchmarks with Google Benchmark, measure the peaks they need, then run
// them and report.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "suite/flags.h"

namespace ltb {

// What bench needs to know of Google Benchmark's own arguments, read before
// benchmark::Initialize consumes them.
struct CommandLine {
  std::string filter;               // --benchmark_filter; empty: the default suite
  bool list_only = false;           // --benchmark_list_tests
  bool quiet_rank = false;          // a data-parallel rank other than 0: reports nothing
  std::string out;                  // --benchmark_out
  std::string out_format = "json";  // --benchmark_out_format
  bool min_time_given = false;      // --benchmark_min_time
};

// Whether the default suite's minimum time applies: no filter, none given.
bool DefaultSuiteMinTime(const CommandLine& command_line);

// Google Benchmark's arguments: argv, plus the default suite's
// --benchmark_min_time. The strings live as long as the program.
std::vector<char*> BenchmarkArguments(const CommandLine& command_line, int argc,
                                      char** argv);

// An error naming the path and the reason when --benchmark_out, --profile or
// the train_epoch data directory (with --data=disk) cannot be written.
// Directories are created.
absl::Status CheckWritablePaths(const SuiteOptions& options,
                                const CommandLine& command_line);

// Reads the above; on ranks other than 0 also drops the output flags
// (--benchmark_out, --benchmark_format) from argv.
CommandLine ReadCommandLine(int* argc, char** argv);

// Sets the process up and registers the benchmarks. An error is a usage
// error (bad filter, family flags that do not fit together, ...).
absl::Status RegisterSuite(const SuiteOptions& options, const CommandLine& command_line);

// Runs what the filter selects and reports it; the process's exit code: 0,
// or 128 + the signal's number when a signal stopped the run (1 when a
// data-parallel failure did), after writing what was measured.
int RunSuite();

// bench --list_families: the registered families' facts (suite/facts.h) on
// stdout; 0, or 2 with the error when the registry cannot be read.
int PrintFamilyFacts();

// Prints "bench: <message>" and exits with the usage exit code, 2.
[[noreturn]] void ExitWithUsageError(const absl::Status& status);

}  // namespace ltb
