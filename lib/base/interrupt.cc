#include "base/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>

namespace ltb {
namespace {

std::atomic<int> stop_code{0};
std::atomic<int> signals_seen{0};  // lock-free: safe in a signal handler
volatile std::sig_atomic_t first_signal = 0;

std::mutex& ReasonMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::string& Reason() {
  static auto* reason = new std::string;
  return *reason;
}

void OnSignal(int signo) {
  // Only async-signal-safe calls here.
  if (signals_seen.fetch_add(1) > 0) {
    const char msg[] = "\nbench: second signal, exiting now\n";
    (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    ::_exit(128 + signo);
  }
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
