// Stopping a run early without losing what it measured. SIGINT and SIGTERM
// ask the run to stop: the benchmark in flight finishes its step and is
// recorded as interrupted, the rest are skipped (and left out of the
// results), the reporters finish their output, and bench exits with 128 plus
// the signal's number. A second signal, a second or more after the first,
// exits at once (its --benchmark_out unfinished); one sooner is the first
// delivered again (timeout(1) signals the process and then its group), and
// changes nothing. A data-parallel
// failure stops the run the same way, with exit code 1.
#pragma once

#include <string>

namespace ltb {

// Installs the SIGINT and SIGTERM handlers.
void InstallInterruptHandlers();

// Asks the run to stop, as a signal does, with the process's exit code and
// the reason benchmarks in flight are recorded with.
void RequestStop(int exit_code, const std::string& reason);

bool StopRequested();
// 0 until a stop is requested.
int StopExitCode();
// "interrupted by SIGINT", or RequestStop's reason.
std::string StopReason();

// The error message of a benchmark that was never started because the run
// had stopped; reporters leave such benchmarks out.
extern const char kNotRunMessage[];

}  // namespace ltb
