#include "report/reporters.h"

#include "base/interrupt.h"

namespace ltb {

bool StoppedRunsFilter::ReportContext(const Context& context) {
  if (pass_streams_) {
    inner_->SetOutputStream(&GetOutputStream());
    inner_->SetErrorStream(&GetErrorStream());
  }
  return inner_->ReportContext(context);
}

void StoppedRunsFilter::ReportRuns(const std::vector<Run>& runs) {
  std::vector<Run> kept;
  for (const Run& run : runs) {
    if (!(run.error_occurred && run.error_message == kNotRunMessage)) kept.push_back(run);
  }
  if (!kept.empty()) inner_->ReportRuns(kept);
}

std::unique_ptr<benchmark::BenchmarkReporter> FileReporter(const std::string& format) {
  if (format == "csv") {
    // Deprecated upstream, but what --benchmark_out_format=csv asks for.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return std::make_unique<benchmark::CSVReporter>();
#pragma GCC diagnostic pop
  }
  if (format == "console") {
    return std::make_unique<benchmark::ConsoleReporter>(
        benchmark::ConsoleReporter::OO_None);
  }
  return std::make_unique<benchmark::JSONReporter>();
}

}  // namespace ltb
