#include "base/cpu_host.h"

#include <sys/utsname.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/threads.h"

namespace ltb {
namespace {

namespace fs = std::filesystem;

std::string SysLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

// The bracketed choice of a sysfs setting: "madvise" of "always [madvise]
// never"; the text itself where nothing is bracketed.
std::string BracketedChoice(const std::string& text) {
  const size_t open = text.find('[');
  const size_t close = text.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return text;
  return text.substr(open + 1, close - open - 1);
}

// The kernel's CPU list ("0-3,8") as numbers.
std::vector<int> ParseCpuList(absl::string_view text) {
  std::vector<int> cpus;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> range =
        absl::StrSplit(absl::StripAsciiWhitespace(part), absl::MaxSplits('-', 1));
    int first = 0, last = 0;
    if (!absl::SimpleAtoi(range.first, &first)) continue;
    if (range.second.empty()) {
      last = first;
    } else if (!absl::SimpleAtoi(range.second, &last)) {
      continue;
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

// The numbers N of `dir`'s entries named <prefix>N, in order.
std::vector<int> NumberedEntries(const std::string& dir, absl::string_view prefix) {
  std::vector<int> numbers;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    int n = 0;
    if (absl::StartsWith(name, prefix) &&
        absl::SimpleAtoi(absl::string_view(name).substr(prefix.size()), &n)) {
      numbers.push_back(n);
    }
  }
  std::sort(numbers.begin(), numbers.end());
  return numbers;
}

}  // namespace

std::string TransparentHugePages(const std::string& root) {
  const std::string dir = root + "/sys/kernel/mm/transparent_hugepage/";
  const std::string enabled = SysLine(dir + "enabled");
  if (enabled.empty()) return "";
  const std::string defrag = SysLine(dir + "defrag");
  return defrag.empty() ? BracketedChoice(enabled)
                        : absl::StrCat(BracketedChoice(enabled),
                                       " (defrag: ", BracketedChoice(defrag), ")");
}

std::string CpuFrequencyScaling(const std::string& root, const std::vector<int>& cpus) {
  const std::string sys = root + "/sys/devices/system/cpu/";
  // Each governor and the CPUs it runs, in the order first seen.
  std::vector<std::pair<std::string, std::vector<int>>> governors;
  std::set<std::string> drivers;
  std::string preference;
  for (int cpu : cpus) {
    const std::string dir = absl::StrCat(sys, "cpu", cpu, "/cpufreq/");
    const std::string governor = SysLine(dir + "scaling_governor");
    if (governor.empty()) continue;
    auto it = std::find_if(governors.begin(), governors.end(),
                           [&](const auto& g) { return g.first == governor; });
    if (it == governors.end()) {
      governors.push_back({governor, {cpu}});
    } else {
      it->second.push_back(cpu);
    }
    if (const std::string d = SysLine(dir + "scaling_driver"); !d.empty())
      drivers.insert(d);
    if (preference.empty()) preference = SysLine(dir + "energy_performance_preference");
  }
  if (governors.empty()) {
    return "absent (no cpufreq in /sys: the hypervisor or the firmware sets the "
           "frequency)";
  }
  std::vector<std::string> parts;
  for (const auto& [governor, on] : governors) {
    parts.push_back(governors.size() == 1
                        ? governor
                        : absl::StrCat(governor, " on ", CpuListText(on)));
  }
  std::vector<std::string> notes;
  if (!drivers.empty())
    notes.push_back(absl::StrCat("driver ", absl::StrJoin(drivers, ", ")));
  if (!preference.empty())
    notes.push_back(absl::StrCat("energy preference ", preference));
  // intel_pstate says whether turbo is off; acpi-cpufreq and amd-pstate
  // whether boost is on.
  if (const std::string no_turbo = SysLine(sys + "intel_pstate/no_turbo");
      no_turbo == "0" || no_turbo == "1") {
    notes.push_back(no_turbo == "0" ? "turbo on" : "turbo off");
  } else if (const std::string boost = SysLine(sys + "cpufreq/boost");
             boost == "0" || boost == "1") {
    notes.push_back(boost == "1" ? "boost on" : "boost off");
  }
  std::string text = absl::StrJoin(parts, ", ");
  if (!notes.empty()) absl::StrAppend(&text, " (", absl::StrJoin(notes, ", "), ")");
  return text;
}

std::string ThreadsPerCore(const std::string& root) {
  const std::string sys = root + "/sys/devices/system/cpu/";
  std::map<std::pair<std::string, std::string>, int> threads;
  for (int cpu : NumberedEntries(sys, "cpu")) {
    const std::string topo = absl::StrCat(sys, "cpu", cpu, "/topology/");
    const std::string package = SysLine(topo + "physical_package_id");
    const std::string core = SysLine(topo + "core_id");
    if (!package.empty() && !core.empty()) ++threads[{package, core}];
  }
  if (threads.empty()) return "";
  int most = 0;
  for (const auto& [core, n] : threads) most = std::max(most, n);
  std::string text = absl::StrCat(most, most == 1 ? " thread" : " threads", " per core");
  // The kernel's words for SMT's state, in a reader's.
  const std::string control = SysLine(sys + "smt/control");
  if (control == "notsupported") {
    absl::StrAppend(&text, " (no SMT)");
  } else if (control == "forceoff") {
    absl::StrAppend(&text, " (SMT forced off)");
  } else if (control == "notimplemented") {
    absl::StrAppend(&text, " (SMT control not implemented)");
  } else if (!control.empty()) {
    absl::StrAppend(&text, " (SMT ", control, ")");
  }
  return text;
}

std::string NumaNodes(const std::string& root, const std::vector<int>& cpus) {
  const std::string sys = root + "/sys/devices/system/node/";
  const std::vector<int> nodes = NumberedEntries(sys, "node");
  if (nodes.empty()) return "";
  std::vector<int> used;
  for (int node : nodes) {
    for (int cpu : ParseCpuList(SysLine(absl::StrCat(sys, "node", node, "/cpulist")))) {
      if (std::find(cpus.begin(), cpus.end(), cpu) != cpus.end()) {
        used.push_back(node);
        break;
      }
    }
  }
  return absl::StrCat(nodes.size(), " (this process's CPUs on node",
                      used.size() == 1 ? " " : "s ",
                      used.empty() ? "unknown" : CpuListText(used), ")");
}

std::string KernelRelease() {
  struct utsname name;
  if (uname(&name) != 0) return "unknown";
  return absl::StrCat(name.sysname, " ", name.release);
}

std::string VirtualMachine(const std::string& root) {
  std::ifstream in(root + "/proc/cpuinfo");
  std::string line;
  bool flags = false, hypervisor = false;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "flags")) continue;
    flags = true;
    const size_t colon = line.find(':');
    for (absl::string_view flag : absl::StrSplit(
             absl::string_view(line).substr(colon == std::string::npos ? 0 : colon + 1),
             ' ', absl::SkipEmpty())) {
      if (flag == "hypervisor") hypervisor = true;
    }
    break;
  }
  if (!flags) return "";
  if (!hypervisor) return "no (no hypervisor flag)";
  std::string machine = SysLine(root + "/sys/hypervisor/type");
  if (machine.empty()) {
    const std::string vendor = SysLine(root + "/sys/class/dmi/id/sys_vendor");
    const std::string product = SysLine(root + "/sys/class/dmi/id/product_name");
    machine = vendor.empty() || product.empty() ? vendor + product
                                                : absl::StrCat(vendor, " ", product);
  }
  return machine.empty() ? "yes (hypervisor flag)"
                         : absl::StrCat("yes (hypervisor flag; ", machine, ")");
}

}  // namespace ltb
