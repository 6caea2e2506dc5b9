#include "suite/compiled.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ltb {

namespace fs = std::filesystem;

std::multimap<std::string, ModelFile> CompiledBenchmarks(
    const std::string& dir, std::vector<std::string>* errors) {
  std::multimap<std::string, ModelFile> out;
  std::error_code ec;
  std::vector<std::string> paths;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string p = entry.path().string();
    if (absl::EndsWith(p, ".pt2") ||
        (absl::EndsWith(p, ".pt") && !absl::EndsWith(p, ".io.pt"))) {
      paths.push_back(p);
    }
  }
  if (ec) errors->push_back(absl::StrCat("--compiled=", dir, ": ", ec.message()));
  std::sort(paths.begin(), paths.end());
  for (const std::string& p : paths) {
    absl::StatusOr<ModelFile> file = InspectModelFile(p);
    if (!file.ok()) {
      errors->push_back(std::string(file.status().message()));
      continue;
    }
    const auto it = file->metadata.find("ltb_benchmark");
    if (it == file->metadata.end()) {
      errors->push_back(
          absl::StrCat(p,
                       ": no ltb_benchmark in its metadata; files of your own "
                       "models go to --model"));
      continue;
    }
    out.emplace(it->second, *file);
  }
  return out;
}

std::vector<Registration> WithCompiled(
    const std::vector<Registration>& eager,
    const std::multimap<std::string, ModelFile>& compiled) {
  std::vector<Registration> out;
  for (const Registration& r : eager) {
    out.push_back(r);
    // An AOTInductor package fixes TF32 when it is compiled, not when it runs.
    if (r.spec.training() || !r.spec.backend.empty() || r.spec.tf32 || r.spec.graph)
      continue;
    const auto [begin, end] = compiled.equal_range(r.spec.Name());
    for (auto it = begin; it != end; ++it) {
      Registration c = r;
      c.spec.backend = BackendName(it->second.format);
      c.spec.model_file = it->second.path;
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace ltb
