#include "report/reporters.h"

#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>

#include "base/interrupt.h"

namespace ltb {

bool LateContextReporter::ReportContext(const Context& context) {
  inner_->SetOutputStream(&GetOutputStream());
  inner_->SetErrorStream(&GetErrorStream());
  json_ = dynamic_cast<benchmark::JSONReporter*>(inner_) != nullptr;
  if (!json_) {
    const bool ok = inner_->ReportContext(context);
    for (const auto& [key, value] : late_()) {
      GetErrorStream() << key << ": " << value << "\n";
    }
    return ok;
  }
  // Google Benchmark writes `{ "context": {...}, "benchmarks": [`: keep the
  // context's entries for the end and open the benchmarks' list alone.
  std::ostringstream text;
  inner_->SetOutputStream(&text);
  const bool ok = inner_->ReportContext(context);
  inner_->SetOutputStream(&GetOutputStream());
  const std::string written = text.str();
  const std::string open = "\"context\": {\n", close = "\n  },\n  \"benchmarks\": [\n";
  const size_t begin = written.find(open), end = written.rfind(close);
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    // Another layout than the one this knows: Google Benchmark's, unchanged.
    json_context_.clear();
    json_ = false;
    GetOutputStream() << written;
    return ok;
  }
  json_context_ = written.substr(begin + open.size(), end - begin - open.size());
  // The context as it stands now goes first, so that a run killed before its
  // end (SIGKILL, the out-of-memory killer) leaves it in the file with every
  // entry written before the kill: Google Benchmark flushes each reporter's
  // stream after the context and after each benchmark.
  std::ostream& out = GetOutputStream();
  out << "{\n  \"context_at_start\": {\n";
  WriteJsonContext(out);
  out << "\n  },\n  \"benchmarks\": [\n";
  return ok;
}

void LateContextReporter::WriteJsonContext(std::ostream& out) const {
  out << json_context_;
  for (const auto& [key, value] : late_()) {
    out << ",\n    " << nlohmann::json(key).dump() << ": "
        << nlohmann::json(value).dump();
  }
}

void LateContextReporter::Finalize() {
  if (!json_) {
    inner_->Finalize();
    return;
  }
  std::ostream& out = GetOutputStream();
  out << "\n  ],\n  \"context\": {\n";
  WriteJsonContext(out);
  out << "\n  }\n}\n";
  out.flush();
}

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
    if (run.error_occurred && run.error_message == kNotRunMessage) continue;
    kept.push_back(run);
    if (run.run_type != Run::RT_Aggregate) continue;
    // An aggregate of a counter can be no number: the coefficient of
    // variation of one whose mean is 0 (token_match_% of random weights).
    // Google Benchmark would write NaN, which JSON has not.
    for (auto it = kept.back().counters.begin(); it != kept.back().counters.end();) {
      it = std::isfinite(it->second.value) ? std::next(it)
                                           : kept.back().counters.erase(it);
    }
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
