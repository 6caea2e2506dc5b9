#include "device/rapl.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace ltb {
namespace {

std::optional<std::string> ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return std::string(absl::StripAsciiWhitespace(line));
}

std::optional<double> ReadNumber(const std::string& path) {
  const std::optional<std::string> line = ReadLine(path);
  double value = 0;
  if (!line || !absl::SimpleAtod(*line, &value) || value < 0) return std::nullopt;
  return value;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EnergyMeter>> RaplMeter::Create(const std::string& root) {
  std::error_code error;
  if (!std::filesystem::is_directory(root, error)) {
    return absl::UnavailableError(
        absl::StrCat(root,
                     " does not exist: this kernel or machine (a virtual one, "
                     "usually) exposes no RAPL energy counters"));
  }
  static const std::regex kPackage("intel-rapl:[0-9]+");
  std::vector<Domain> domains;
  std::vector<std::string> unreadable;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, kPackage)) continue;
    Domain d;
    d.dir = entry.path().string();
    d.name = ReadLine(d.dir + "/name").value_or(name);
    const std::optional<double> now = ReadNumber(d.dir + "/energy_uj");
    const std::optional<double> range = ReadNumber(d.dir + "/max_energy_range_uj");
    if (!now || !range || *range <= 0) {
      unreadable.push_back(d.dir + "/energy_uj");
      continue;
    }
    d.last_uj = *now;
    d.range_uj = *range;
    domains.push_back(d);
  }
  if (!unreadable.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("RAPL's ", absl::StrJoin(unreadable, ", "),
                     " cannot be read (root only since Linux 5.10)"));
  }
  if (domains.empty()) {
    return absl::UnavailableError(
        absl::StrCat(root, " has no RAPL package domains (intel-rapl:N)"));
  }
  std::sort(domains.begin(), domains.end(),
            [](const Domain& a, const Domain& b) { return a.dir < b.dir; });
  return std::unique_ptr<EnergyMeter>(new RaplMeter(std::move(domains)));
}

double RaplMeter::Joules() {
  double total = 0;
  for (Domain& d : domains_) {
    const std::optional<double> now = ReadNumber(d.dir + "/energy_uj");
    if (!now) return -1;
    // The counter wraps at its range; readings come often enough that it
    // wraps at most once between two.
    d.total_uj += *now >= d.last_uj ? *now - d.last_uj : *now + d.range_uj - d.last_uj;
    d.last_uj = *now;
    total += d.total_uj;
  }
  return total * 1e-6;
}

double RaplMeter::MaxSeconds() const {
  double range = domains_.front().range_uj;
  for (const Domain& d : domains_) range = std::min(range, d.range_uj);
  return range * 1e-6 / 500;
}

std::string RaplMeter::Covers() const {
  std::vector<std::string> names;
  for (const Domain& d : domains_) names.push_back(d.name);
  return absl::StrCat("RAPL ", absl::StrJoin(names, " + "),
                      " (whole sockets: every process on them)");
}

}  // namespace ltb
