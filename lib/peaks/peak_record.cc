#include "peaks/peak_record.h"

#include <ATen/Parallel.h>
#include <fcntl.h>
#include <sys/file.h>
#include <torch/version.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/cache_dir.h"
#include "base/threads.h"
#include "device/cpu_isa.h"

namespace ltb {
namespace {

// Raised when a method that sets a measured peak changes what it measures,
// so that an older method's values are not compared with the new one's.
// 2: the loop's one-thread rate is multiplied by the threads that have a
// physical core each (within the CPU quota), not by every thread: a record
// of more threads than cores held up to twice what the cores can do.
constexpr int kPeakMethodsVersion = 2;

// A record this many times this run's measurement or more is no peak of
// this machine: a key fixes the machine, its threads and LibTorch, and load
// slows a peak's measurement by tens of percent, not tenfold. Such a
// record (a hand edit, a file from another machine) would make every mfu
// and mbu that divides by it tiny.
constexpr double kImplausibleRecord = 10;

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// Holds an exclusive flock on `path` for its lifetime (no lock when the file
// cannot be opened: `error` says why).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      error = std::error_code(errno, std::generic_category()).message();
      return;
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        error = std::error_code(errno, std::generic_category()).message();
        return;
      }
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  std::string error;

 private:
  int fd_ = -1;
};

}  // namespace

std::string DefaultPeakCachePath() {
  if (const char* env = std::getenv("LTB_PEAK_CACHE"); env != nullptr && *env != '\0') {
    return env;
  }
  return UserCacheDir() + "/peaks.json";
}

PeakRecord::PeakRecord(std::string path) : path_(path == "off" ? "" : std::move(path)) {}

RecordedPeak PeakRecord::Merge(const std::string& key, double measured,
                               const std::string& source) {
  RecordedPeak out;
  out.value = out.this_run = measured;
  out.best_at = UtcNow();
  out.best_source = out.this_run_source = source;
  out.runs = 1;
  const auto warn = [&out](const std::string& text) {
    absl::StrAppend(&out.warning, out.warning.empty() ? "" : "; ", text);
  };
  if (!enabled() || !(measured > 0) || !std::isfinite(measured)) return out;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path file(path_);
  if (file.has_parent_path()) fs::create_directories(file.parent_path(), ec);
  FileLock lock(path_ + ".lock");
  if (!lock.error.empty()) {
    warn(absl::StrCat("the peak cache ", path_, " cannot be locked (", path_, ".lock: ",
                      lock.error, "), so this run's peaks are its own and are not kept"));
    out.read = out.kept = false;
    return out;
  }
  nlohmann::json doc = nlohmann::json::object();
  if (std::ifstream in(path_); in) {
    std::stringstream text;
    text << in.rdbuf();
    try {
      doc = nlohmann::json::parse(text.str());
      if (!doc.is_object() || !doc.value("peaks", nlohmann::json::object()).is_object()) {
        throw std::runtime_error("not an object with an object \"peaks\"");
      }
    } catch (const std::exception& e) {
      warn(absl::StrCat("the peak cache ", path_, " is not a record of peaks (", e.what(),
                        "): it is replaced by this run's peaks"));
      doc = nlohmann::json::object();
    }
  }
  if (!doc.contains("peaks")) doc["peaks"] = nlohmann::json::object();
  nlohmann::json& entry = doc["peaks"][key];
  // Every field read below, of the type it is read as: a hand-edited or
  // foreign entry otherwise throws from nlohmann's accessors, which no
  // caller of a peak expects, and aborts the run.
  const auto readable = [](const nlohmann::json& e) {
    if (!e.is_object()) return false;
    for (const char* text : {"measured_at", "how"}) {
      if (e.contains(text) && !e[text].is_string()) return false;
    }
    if (!e.contains("runs")) return true;
    const nlohmann::json& r = e["runs"];
    return r.is_number_integer() && r.get<int64_t>() >= 0 &&
           r.get<int64_t>() < std::numeric_limits<int>::max();
  };
  if (!entry.is_null() && !readable(entry)) {
    std::string shown =
        entry.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (shown.size() > 120) shown = shown.substr(0, 117) + "...";
    warn(absl::StrCat("the peak cache ", path_, " holds an entry for ", key,
                      " that is not a record of a peak (", shown,
                      "): it is replaced by this run's"));
    entry = nlohmann::json::object();
  }
  double best = 0;
  int runs = 0;
  if (entry.is_object()) {
    const nlohmann::json& v = entry.value("bytes_or_flops_per_s", nlohmann::json());
    if (v.is_number() && std::isfinite(v.get<double>())) best = v.get<double>();
    if (entry.contains("runs")) runs = entry["runs"].get<int>();
  }
  if (best >= kImplausibleRecord * measured) {
    warn(absl::StrFormat(
        "the peak cache %s holds %.4g for %s, %.0f or more times this run's %.4g: no "
        "peak of this machine, so it is replaced by this run's",
        path_, best, key, kImplausibleRecord, measured));
    best = 0;
    runs = 0;
  }
  out.runs = runs + 1;
  if (best > measured) {
    out.value = best;
    out.from_record = true;
    out.best_at = entry.value("measured_at", std::string("an earlier run"));
    out.best_source = entry.value("how", std::string());
  } else {
    entry["bytes_or_flops_per_s"] = measured;
    entry["measured_at"] = out.best_at;
    entry["how"] = source;
  }
  entry["runs"] = out.runs;
  entry["last_run"] = {{"at", UtcNow()}, {"measured", measured}};
  doc["about"] =
      "The best peaks bench measured on this machine, one entry per key; bench "
      "divides mfu and mbu by them (see --peak_cache). Delete the file to start anew.";
  const std::string tmp = absl::StrCat(path_, ".tmp.", ::getpid());
  {
    std::ofstream o(tmp, std::ios::trunc);
    o << doc.dump(2) << "\n";
    o.close();
    if (!o) {
      std::remove(tmp.c_str());
      warn(absl::StrCat("the peak cache ", path_,
                        " cannot be written, so this run's peaks are not kept"));
      out.kept = false;
      return out;
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    std::remove(tmp.c_str());
    warn(absl::StrCat("the peak cache ", path_, " cannot be replaced (", ec.message(),
                      "), so this run's peaks are not kept"));
    out.kept = false;
  }
  return out;
}

std::string DescribeRecordedPeak(const RecordedPeak& r, const std::string& path) {
  const auto how = [](absl::string_view source) {
    absl::ConsumePrefix(&source, "measured: ");
    return std::string(source);
  };
  if (!r.read) {
    return absl::StrCat("measured: ", how(r.best_source),
                        "; this run's own, for the peak ", "cache ", path,
                        " could not be used");
  }
  const std::string kept =
      r.kept
          ? absl::StrCat("kept in ", path,
                         "; --peak_cache=off divides by this run's own measurement")
          : absl::StrCat("not kept, for the peak cache ", path, " could not be written");
  if (r.from_record) {
    return absl::StrFormat(
        "measured: the best of %d runs on this machine, %.4g at %s (%s); this run "
        "measured %.4g (%s); %s",
        r.runs, r.value, r.best_at, how(r.best_source), r.this_run,
        how(r.this_run_source), kept);
  }
  if (r.runs <= 1) {
    return absl::StrCat("measured: ", how(r.best_source),
                        "; the first run on this machine to measure it, ", kept);
  }
  return absl::StrFormat("measured: %s; the best of %d runs on this machine, %s",
                         how(r.best_source), r.runs, kept);
}

std::string PeakRecordKey(const std::string& quantity, const std::string& device_kind,
                          const std::string& model) {
  const std::string limit = CpuIsaLimit();
  // What this process may use of them: a run under taskset or a CPU quota
  // measures less than the machine's best, and would divide by a peak it
  // cannot reach were the records one.
  const CpuQuota quota = ReadCpuQuota("");
  return absl::StrCat(
      quantity, " | ", device_kind, ": ", model, " | ", sysconf(_SC_NPROCESSORS_ONLN),
      " CPUs online | ", AllowedCpus().size(), " allowed | CPU quota: ",
      quota.cpus < 0 ? "none" : absl::StrFormat("%g", quota.cpus), " | ",
      at::get_num_threads(), " threads | CPU ISA limit: ", limit.empty() ? "none" : limit,
      " | LibTorch " TORCH_VERSION " | methods v", kPeakMethodsVersion);
}

}  // namespace ltb
