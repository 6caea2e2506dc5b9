// Benchmarks of model files: an AOTInductor package (.pt2, made by
// torch._inductor.aoti_compile_and_package from a torch.export program) run
// through torch::inductor::AOTIModelPackageLoader, or a TorchScript module
// (torch.jit.save) run through torch::jit::load. Both hold code that runs
// when loaded: load only files you trust. tools/export writes such files for
// the suite's own families, with metadata naming the benchmark they compile
// and a <stem>.io.pt beside them holding example inputs and eager outputs.
#pragma once

#include <c10/core/ScalarType.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"

namespace ltb {

enum class ModelFormat { kAoti, kTorchScript };

// "aoti" or "torchscript": the backend a benchmark name ends with.
std::string BackendName(ModelFormat format);

struct ModelFile {
  std::string path;
  ModelFormat format = ModelFormat::kAoti;
  // The file's metadata: for AOTInductor packages the compiler's (the device
  // it was compiled for: AOTI_DEVICE_KEY) and tools/export's (ltb_*); for
  // TorchScript, tools/export's extra file.
  std::map<std::string, std::string> metadata;
  std::string Stem() const;  // file name without directory and extension
};

// What a file is, from its extension and its contents: an error naming the
// file and the reason when it is not a model this LibTorch can load.
absl::StatusOr<ModelFile> InspectModelFile(const std::string& path);

// The dtype of a TorchScript file's first floating parameter (or buffer),
// loaded on the CPU to read it; none for an AOTInductor package, a file
// without one, or one that does not load.
std::optional<c10::ScalarType> ModelParameterDtype(const ModelFile& file);

// Inputs given on the command line: "8x3x224x224:fp32", "4x128:int64[0,50257)",
// several separated by ';'. Floating inputs are standard normal; integer
// inputs uniform in [low, high) (default [0, 2)).
struct InputSpec {
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::kFloat;
  int64_t low = 0, high = 2;
};
absl::StatusOr<std::vector<InputSpec>> ParseInputSpecs(const std::string& text);
std::string FormatInputSpec(const InputSpec& spec);

// Tensors for `specs` on `device`, the first dimension replaced by `batch`
// when batch > 0.
std::vector<at::Tensor> MakeInputs(const std::vector<InputSpec>& specs, int64_t batch,
                                   const c10::Device& device);

// The example inputs and eager outputs tools/export saved beside a model file
// (<stem>.io.pt); nullopt when there is none.
struct SavedIO {
  std::vector<at::Tensor> inputs, expected;
  double compile_s = -1;  // seconds tools/export took to compile; -1: unknown
};
absl::StatusOr<std::optional<SavedIO>> LoadSavedIO(const ModelFile& file);

// Runs `file` on `inputs` (on spec.device) each step. Its counters:
// compile_s and rel_err of its outputs against the eager ones, when `io`
// gives them; with `count_flops`, a TorchScript file's FlopsPerStep() is one
// step's FLOPs as StepFlops counts them (an AOTInductor package's, 0: its own
// kernels hide them). Throws, naming the file, when the file cannot
// run here (another device, another LibTorch, inputs it does not take).
std::unique_ptr<Workload> MakeModelFileWorkload(const ModelFile& file,
                                                const BenchSpec& spec,
                                                std::vector<at::Tensor> inputs,
                                                const SavedIO* io = nullptr,
                                                bool count_flops = false);

// Builds a benchmark of a compiled suite model (spec.model_file set): the
// file, its saved inputs and the eager outputs it is compared with.
std::unique_ptr<Workload> BuildCompiledBenchmark(const BenchSpec& spec);

}  // namespace ltb
