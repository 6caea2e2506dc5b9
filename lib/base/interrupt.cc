#include "base/interrupt.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>

namespace ltb {
namespace {

std::atomic<int> stop_code{0};
std::atomic<int> signals_seen{0};  // lock-free: safe in a signal handler
// Signals within this long of the first are that one delivered again.
constexpr int64_t kSameSignalNs = 1000000000;
volatile std::sig_atomic_t first_signal = 0;

std::mutex& ReasonMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::string& Reason() {
  static auto* reason = new std::string;
  return *reason;
}

std::atomic<int64_t> first_signal_ns{0};

// CLOCK_MONOTONIC in nanoseconds (clock_gettime is async-signal-safe).
int64_t NowNs() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void OnSignal(int signo) {
  // Only async-signal-safe calls here.
  if (signals_seen.fetch_add(1) > 0) {
    // The same stop delivered twice is not a second one: timeout(1) sends
    // its signal to bench and then to its process group, and a terminal's
    // Ctrl-C reaches a wrapper's group as well.
    if (NowNs() - first_signal_ns.load() < kSameSignalNs) return;
    const char msg[] =
        "\nbench: second signal, exiting now (the --benchmark_out file is left "
        "unfinished)\n";
    (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    ::_exit(128 + signo);
  }
  first_signal_ns.store(NowNs());
  first_signal = signo;
  stop_code.store(128 + signo);
  const char msg[] =
      "\nbench: stopping after the current step; results so far are being written "
      "(again to exit at once)\n";
  (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
}

}  // namespace

const char kNotRunMessage[] = "not run: the run was stopped before this benchmark";

void InstallInterruptHandlers() {
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void RequestStop(int exit_code, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(ReasonMutex());
    if (Reason().empty()) Reason() = reason;
  }
  int expected = 0;
  stop_code.compare_exchange_strong(expected, exit_code);
}

bool StopRequested() { return stop_code.load() != 0; }
int StopExitCode() { return stop_code.load(); }

std::string StopReason() {
  std::lock_guard<std::mutex> lock(ReasonMutex());
  if (!Reason().empty()) return Reason();
  return first_signal == SIGTERM ? "interrupted by SIGTERM" : "interrupted by SIGINT";
}

}  // namespace ltb
