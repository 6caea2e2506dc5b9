// The bench program's steps after its flags are parsed: set up the process
// (malloc, threads, devices, the process group), register every family's
// benchmarks with Google Benchmark, measure the peaks they need, then run
// them and report, each step a function and what the run keeps a Suite.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "family/family.h"
#include "measure/runner.h"
#include "peaks/peaks.h"
#include "report/context.h"
#include "suite/flags.h"
#include "suite/sweep.h"

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
  std::string min_time;             // its value
  std::string min_warmup_time;      // --benchmark_min_warmup_time; empty: none
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

// What the run's JSON context records of its settings, beside what
// CollectContext adds (versions, hardware, threads): how it measures and
// what it reads, that no benchmark's name carries.
Context SettingsContext(const SuiteOptions& options, const CommandLine& command_line,
                        const std::string& malloc_description, int world_size);

// Reads the above; on ranks other than 0 also drops the output flags
// (--benchmark_out, --benchmark_format) from argv.
CommandLine ReadCommandLine(int* argc, char** argv);

// --- the run's steps ------------------------------------------------------
// flags -> options (OptionsFromFlags, suite/flags.h) -> the filter and the
// sweep -> registrations -> a Runner (measure/runner.h) -> reporters
// (Suite::Run). The steps below are pure but for their warnings on stderr.

// The filter the run selects with: the user's, or the default suite's less
// --suite_skip's members; an error when the two are given together, or the
// filter is not a valid regular expression.
absl::StatusOr<std::string> RunFilter(const std::vector<Family>& families,
                                      const SuiteOptions& options,
                                      const CommandLine& command_line);

// The options' sweep, completed for the run: without --devices, `available`
// plus the devices the user's filter names (so that they report why they
// cannot run); without --dtype, the dtypes it names beside the default; the
// default suite's shapes when there is no filter; the epochs' data.
Sweep SweepFor(const SuiteOptions& options, const CommandLine& command_line,
               const std::vector<c10::Device>& available);

// The sweep's benchmarks over `families`, with --compiled's beside the eager
// ones they compile; warns (unless `quiet`) of a --tf32 or --cuda_graphs that
// adds nothing; an error when --compiled holds no model file.
absl::StatusOr<std::vector<Registration>> RegistrationsFor(
    const std::vector<Family>& families, const Sweep& sweep, bool quiet);

// What the command line sets that no benchmark `selected` keeps takes, a
// sentence each, naming the families that take it: a --dtype, --quant,
// --memory_format, --cpu_linear, --seq, --prompt, --new_tokens or --depth
// value (a --model file, say, runs in its own dtype at its own shapes); and
// the selected generation whose family fixes the prompt or the depth that
// --prompt or --depth would set.
std::vector<std::string> UntakenSettings(
    const std::vector<Registration>& registrations, const Sweep& sweep, bool dtypes_given,
    const std::function<bool(const BenchSpec&)>& selected);

// One run of the suite: what registration leaves for the run (the families,
// the filter, the peaks and the Runner the registered benchmarks point at),
// owned here rather than by the process. It must outlive the run.
class Suite {
 public:
  // Sets the process up (malloc, threads, the process group) and registers
  // the benchmarks with Google Benchmark. An error is a usage error (bad
  // filter, family flags that do not fit together, ...).
  static absl::StatusOr<std::unique_ptr<Suite>> Register(const SuiteOptions& options,
                                                         const CommandLine& command_line);
  ~Suite();
  Suite(const Suite&) = delete;
  Suite& operator=(const Suite&) = delete;

  // Runs what the filter selects and reports it; the process's exit code: 0,
  // or 128 + the signal's number when a signal stopped the run (1 when a
  // data-parallel failure did), after writing what was measured.
  int Run();

 private:
  explicit Suite(const CommandLine& command_line);

  CommandLine command_line_;
  std::string filter_;  // the user's, or the default suite's
  std::vector<c10::Device> devices_;
  std::vector<Family> families_;  // the registrations point into it
  std::unique_ptr<Peaks> peaks_;
  std::unique_ptr<Runner> runner_;
};

// bench --list_families: the registered families' facts (suite/facts.h) on
// stdout; 0, or 2 with the error when the registry cannot be read.
int PrintFamilyFacts(const FamilyOptions& options);

// Prints "bench: <message>" and exits with the usage exit code, 2.
[[noreturn]] void ExitWithUsageError(const absl::Status& status);

}  // namespace ltb
