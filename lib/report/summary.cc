#include "report/summary.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "device/device.h"

namespace ltb {

bool RecordingReporter::ReportContext(const Context& context) {
  return display_->ReportContext(context);
}

void RecordingReporter::ReportRuns(const std::vector<Run>& runs) {
  runs_.insert(runs_.end(), runs.begin(), runs.end());
  display_->ReportRuns(runs);
}

void RecordingReporter::Finalize() { display_->Finalize(); }

std::string ThroughputCounter(const benchmark::UserCounters& counters) {
  for (const char* name : {"tokens/s", "samples/s", "FLOP/s", "bytes/s"}) {
    if (counters.count(name)) return name;
  }
  return "";
}

namespace {

// Families put the device third (Family/size/device/...); those that name
// the phase first, fourth (Ops/op/shape/device/...).
size_t DeviceField(const std::vector<std::string>& parts) {
  const auto is_device = [](const std::string& p) { return ParseDevice(p).ok(); };
  return parts.size() > 3 && !is_device(parts[2]) && is_device(parts[3]) ? 3 : 2;
}

std::string WithSiPrefix(double v) {
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  return absl::StrFormat("%.4g%s", v, units[i]);
}

}  // namespace

std::string SpeedupSummary(const std::vector<benchmark::BenchmarkReporter::Run>& runs) {
  struct Sum {
    double total = 0;
    int n = 0;
  };
  // key (name without device) -> device -> throughput; keys in first-seen order.
  std::map<std::string, std::map<std::string, Sum>> by_key;
  std::map<std::string, std::vector<std::string>> devices_in_order;
  std::map<std::string, std::string> counter_of;
  std::vector<std::string> keys;
  for (const auto& run : runs) {
    if (run.error_occurred ||
        run.run_type != benchmark::BenchmarkReporter::Run::RT_Iteration) {
      continue;
    }
    const std::string counter = ThroughputCounter(run.counters);
    if (counter.empty()) continue;
    std::vector<std::string> parts = absl::StrSplit(run.run_name.function_name, '/');
    const size_t field = DeviceField(parts);
    if (parts.size() <= field) continue;
    const std::string device = parts[field];
    parts.erase(parts.begin() + field);
    const std::string key = absl::StrJoin(parts, "/");
    if (!by_key.count(key)) keys.push_back(key);
    Sum& sum = by_key[key][device];
    if (sum.n == 0) devices_in_order[key].push_back(device);
    sum.total += run.counters.at(counter).value;
    ++sum.n;
    counter_of[key] = counter;
  }

  std::string out;
  for (const std::string& key : keys) {
    const auto& devices = by_key[key];
    if (devices.size() < 2) continue;
    if (out.empty()) out = "\nDevice speedup (throughput, and speedup over cpu):\n";
    const double cpu =
        devices.count("cpu") ? devices.at("cpu").total / devices.at("cpu").n : 0;
    absl::StrAppend(&out, "  ", key, "\n");
    for (const std::string& device : devices_in_order[key]) {
      const Sum& s = devices.at(device);
      const double v = s.total / s.n;
      absl::StrAppend(&out, absl::StrFormat("    %-8s %12s %s", device, WithSiPrefix(v),
                                            counter_of[key]));
      if (cpu > 0 && device != "cpu") {
        absl::StrAppend(
            &out, absl::StrFormat("   Speedup: %.2fx (%s vs cpu)", v / cpu, device));
      }
      absl::StrAppend(&out, "\n");
    }
  }
  return out;
}

}  // namespace ltb
