// The device speedup summary: when one run measured the same benchmark on
// several devices, each device's throughput and its speedup over the CPU.
// tools/speedup makes the same table from saved JSON.
#pragma once

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

namespace ltb {

// Forwards everything to the display reporter and keeps the runs.
class RecordingReporter : public benchmark::BenchmarkReporter {
 public:
  explicit RecordingReporter(benchmark::BenchmarkReporter* display) : display_(display) {}
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override;
  const std::vector<Run>& runs() const { return runs_; }

 private:
  benchmark::BenchmarkReporter* display_;
  std::vector<Run> runs_;
};

// The throughput counter a summary compares: tokens/s, else samples/s,
// else FLOP/s, else bytes/s; "" when the run has none.
std::string ThroughputCounter(const benchmark::UserCounters& counters);

// "" unless some benchmark ran without error on two or more devices.
// Errored runs and aggregates are left out; repetitions are averaged.
std::string SpeedupSummary(const std::vector<benchmark::BenchmarkReporter::Run>& runs);

}  // namespace ltb
