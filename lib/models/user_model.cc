#include "models/user_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "family/registry.h"
#include "workloads/model_file.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

struct ModelCase {
  std::string path;
  absl::StatusOr<ModelFile> file = absl::UnknownError("not inspected");
  std::vector<InputSpec> inputs;  // from --inputs, or the saved inputs' shapes
  // Saved with the file by tools/export: read again when its benchmark is
  // built, so that no file's saved inputs and outputs stay in memory
  // through the other benchmarks (their peak_mem counted them).
  bool saved_io = false;
  absl::Status problem;  // why it cannot run, reported as its error
};

// The model's dtype: its first floating input's, else what tools/export
// recorded, else (a model of token ids) a TorchScript file's first floating
// parameter's or an AOTInductor package's weights', where bf16 or fp16,
// else fp32.
c10::ScalarType CaseDtype(const ModelCase& m) {
  for (const InputSpec& s : m.inputs) {
    if (at::isFloatingType(s.dtype)) return s.dtype;
  }
  if (m.file.ok()) {
    if (auto it = m.file->metadata.find("ltb_dtype"); it != m.file->metadata.end()) {
      if (absl::StatusOr<c10::ScalarType> t = ParseDtype(it->second); t.ok()) return *t;
    }
    if (std::optional<c10::ScalarType> t = ModelParameterDtype(*m.file);
        t == c10::kBFloat16 || t == c10::kHalf) {
      return *t;
    }
  }
  return c10::kFloat;
}

ModelCase Inspect(const std::string& path, const std::vector<InputSpec>& given) {
  ModelCase m;
  m.path = path;
  m.file = InspectModelFile(path);
  if (!m.file.ok()) {
    m.problem = m.file.status();
    return m;
  }
  if (!given.empty()) {
    m.inputs = given;
    return m;
  }
  absl::StatusOr<std::optional<SavedIO>> io = LoadSavedIO(*m.file);
  if (!io.ok()) {
    m.problem = io.status();
  } else if (!io->has_value()) {
    m.problem = absl::InvalidArgumentError(
        absl::StrCat(path, ": no example inputs saved with it; give --inputs"));
  } else {
    m.saved_io = true;
    for (const at::Tensor& t : (*io)->inputs) {
      InputSpec s;
      s.shape = t.sizes().vec();
      s.dtype = t.scalar_type();
      // Integers (token ids) at another batch: drawn from the saved ones'
      // range, not the [0, 2) of an --inputs without one.
      if (!at::isFloatingType(t.scalar_type()) && t.numel() > 0 &&
          t.scalar_type() != at::kBool) {
        s.low = t.min().item<int64_t>();
        s.high = t.max().item<int64_t>() + 1;
      }
      m.inputs.push_back(s);
    }
  }
  return m;
}

// A file's case: its stem and backend, as its benchmark names end.
std::string CaseKey(const std::string& stem, const std::string& backend) {
  return absl::StrCat(stem, "/", backend);
}

}  // namespace

absl::StatusOr<Family> ModelFamilyFromOptions(const FamilyOptions& options) {
  Family f;
  f.name = "Model";
  f.phases = {ForwardPhase(Shape::kBatch)};
  const std::vector<std::string>& paths = options.model_files;
  if (paths.empty()) return f;  // no cases: not offered in this run
  std::vector<InputSpec> given;
  if (const std::string& text = options.model_inputs; !text.empty()) {
    absl::StatusOr<std::vector<InputSpec>> parsed = ParseInputSpecs(text);
    if (!parsed.ok()) return parsed.status();
    given = *parsed;
  }
  double flops = 0;
  if (const std::string& text = options.model_flops_per_step; !text.empty()) {
    if (!absl::SimpleAtod(text, &flops) || !(flops > 0) || !std::isfinite(flops)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --flops_per_step value '", text,
                       "'; valid: a positive number, e.g. 3.6e9"));
    }
  }
  auto cases = std::make_shared<std::map<std::string, ModelCase>>();
  for (const std::string& path : paths) {
    ModelCase m = Inspect(path, given);
    const std::string stem =
        m.file.ok() ? m.file->Stem() : std::filesystem::path(path).stem().string();
    Case c{stem, f.phases[0]};
    c.backend = m.file.ok()                    ? BackendName(m.file->format)
                : absl::EndsWith(path, ".pt2") ? "aoti"
                                               : "torchscript";
    // An AOTInductor package fixes TF32 when it is compiled, not when it runs.
    c.tf32 = c.backend != "aoti";
    c.graphs = false;  // a model file runs as its format decides
    // Names end in the backend: one stem may be a package and a TorchScript
    // file (the same model both ways); two of one backend would collide.
    const std::string key = CaseKey(stem, c.backend);
    if (cases->count(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--model: two ", c.backend, " files are named ", stem, " (",
                       cases->at(key).path, " and ", path,
                       "): their benchmarks would have one name; rename one"));
    }
    c.default_batch =
        m.inputs.empty() || m.inputs[0].shape.empty() ? 1 : m.inputs[0].shape[0];
    c.dtype = CaseDtype(m);
    c.serves = m.inputs.size() == 1;  // serve gathers one batch-first input
    // Inputs other than the file's are another computation: in the name,
    // written out whole (ranges and dtypes as they ran, not as typed).
    c.inputs = absl::StrJoin(given, ";", [](std::string* out, const InputSpec& s) {
      out->append(FormatInputSpec(s));
    });
    if (std::find(f.sizes.begin(), f.sizes.end(), stem) == f.sizes.end()) {
      f.sizes.push_back(stem);
    }
    f.cases.push_back(c);
    cases->emplace(key, std::move(m));
  }
  f.default_batch = 1;
  f.serves = true;  // a file of batch-first inputs: its workload runs batches
  f.suite = {""};   // every file: without a filter, bench measures them alone
  f.replaces_default_suite = true;
  f.plan = [cases, flops](const BenchSpec& s) -> absl::StatusOr<Plan> {
    const ModelCase& m = cases->at(CaseKey(s.size, s.backend));
    if (!m.problem.ok()) return m.problem;
    Plan plan;
    plan.samples_per_step = s.batch;  // rows of the first input
    const InputSpec& first = m.inputs.front();
    // Token ids (B, T): int64 or int32, as an embedding takes them (a
    // flattened uint8 image or a boolean mask is no sequence of tokens).
    if (first.shape.size() == 2 &&
        (first.dtype == at::kLong || first.dtype == at::kInt)) {
      plan.tokens_per_step = s.batch * first.shape[1];
    }
    plan.flops_per_step = flops;
    plan.counts_flops_when_built = flops <= 0;
    std::error_code ec;
    const double bytes = static_cast<double>(std::filesystem::file_size(m.path, ec));
    plan.memory.weights = static_cast<int64_t>(bytes);  // the file holds the weights
    // And the inputs at this batch. What the graph holds between them the
    // guard cannot know from a file: the estimate is a floor
    // (docs/devices.md, "Memory guard").
    for (const InputSpec& in : m.inputs) {
      int64_t n = static_cast<int64_t>(c10::elementSize(in.dtype));
      for (size_t i = 0; i < in.shape.size(); ++i) n *= i == 0 ? s.batch : in.shape[i];
      plan.memory.activations += n;
    }
    return plan;
  };
  f.build = [cases, flops](const BenchSpec& s) -> std::unique_ptr<Workload> {
    const ModelCase& m = cases->at(CaseKey(s.size, s.backend));
    if (!m.problem.ok()) throw std::runtime_error(std::string(m.problem.message()));
    // The saved inputs at their batch (with the eager outputs to compare
    // with); new ones of their shapes at any other.
    std::optional<SavedIO> io;
    if (m.saved_io && s.batch == m.inputs[0].shape[0]) {
      absl::StatusOr<std::optional<SavedIO>> read = LoadSavedIO(*m.file);
      if (!read.ok()) throw std::runtime_error(std::string(read.status().message()));
      io = *std::move(read);
    }
    std::vector<at::Tensor> inputs =
        io.has_value() ? io->inputs : MakeInputs(m.inputs, s.batch, s.device);
    // Without --flops_per_step (the plan's), the profiler counts them.
    return MakeModelFileWorkload(*m.file, s, inputs, io.has_value() ? &*io : nullptr,
                                 /*count_flops=*/flops <= 0);
  };
  return f;
}
LTB_REGISTER_FAMILY(ModelFamilyFromOptions, 85);

}  // namespace ltb
