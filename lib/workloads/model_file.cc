#include "workloads/model_file.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <c10/core/InferenceMode.h>
#include <caffe2/serialize/inline_container.h>
#include <stdlib.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/torch_compat.h"
#include "device/device.h"
#include "family/spec.h"
#include "workloads/profiled_flops.h"

#if LTB_HAS_AOTI_PACKAGE
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#endif
#if !LTB_HAS_AOTI_PACKAGE_METADATA
#include <nlohmann/json.hpp>
#endif

namespace ltb {
namespace {

namespace fs = std::filesystem;

// The name tools/export gives the TorchScript extra file of its metadata.
constexpr char kTorchScriptMeta[] = "ltb_meta.txt";

// "key: value" lines.
std::map<std::string, std::string> ParseMetadata(absl::string_view text) {
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    out[std::string(absl::StripAsciiWhitespace(line.substr(0, colon)))] =
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return out;
}

absl::Status ModelFileError(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
}

// The dtypes an input can have, by the names --inputs gives them.
const std::vector<std::pair<std::string, c10::ScalarType>>& InputDtypes() {
  static const auto* types = new std::vector<std::pair<std::string, c10::ScalarType>>{
      {"fp32", c10::kFloat},  {"bf16", c10::kBFloat16}, {"fp16", c10::kHalf},
      {"fp64", c10::kDouble}, {"int64", c10::kLong},    {"int32", c10::kInt},
      {"int8", c10::kChar},   {"uint8", c10::kByte},    {"bool", c10::kBool}};
  return *types;
}

absl::StatusOr<c10::ScalarType> ParseInputDtype(absl::string_view text) {
  std::vector<std::string> names;
  for (const auto& [name, type] : InputDtypes()) {
    if (text == name) return type;
    names.push_back(name);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown input dtype '", text, "'; valid: ", absl::StrJoin(names, ", ")));
}

// [lowest, highest + 1) of an integer input dtype.
std::pair<int64_t, int64_t> IntegerBounds(c10::ScalarType t) {
  switch (t) {
    case c10::kBool:
      return {0, 2};
    case c10::kByte:
      return {0, 256};
    case c10::kChar:
      return {-128, 128};
    case c10::kInt:
      return {std::numeric_limits<int32_t>::min(),
              int64_t{std::numeric_limits<int32_t>::max()} + 1};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

std::string InputDtypeName(c10::ScalarType t) {
  for (const auto& [name, type] : InputDtypes()) {
    if (type == t) return name;
  }
  return c10::toString(t);
}

// One forward of a loaded file.
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) = 0;
  virtual int64_t UntrackedBytes() { return 0; }
};

#if LTB_HAS_AOTI_PACKAGE
// Without input checks an AOTInductor model runs inputs of other shapes than
// it was compiled for and returns garbage; with them, it refuses them.
const std::string& Checked(const std::string& path) {
  ::setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", /*overwrite=*/0);
  return path;
}

class AotiRunner final : public ModelRunner {
 public:
  AotiRunner(const std::string& path, const c10::Device& device)
      : loader_(Checked(path), "model", /*run_single_threaded=*/false, /*num_runners=*/1,
                device.index()) {}
  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) override {
    return loader_.run(inputs);
  }
  // The weights (the package's constants), held in memory the package's
  // runtime manages rather than LibTorch's allocator; each buffer once.
  int64_t UntrackedBytes() override {
    std::set<const void*> seen;
    int64_t bytes = 0;
    for (const auto& [name, t] : loader_.get_runner()->extract_constants_map(false)) {
      if (t.defined() && seen.insert(t.storage().data()).second) {
        bytes += static_cast<int64_t>(t.storage().nbytes());
      }
    }
    return bytes;
  }

 private:
  torch::inductor::AOTIModelPackageLoader loader_;
};
#endif

#if !LTB_HAS_AOTI_PACKAGE_METADATA
// The metadata AOTInductor writes beside the model's code
// (data/aotinductor/model/<name>_metadata.json, a JSON object of strings),
// which LibTorch 2.10's load_metadata_from_package reads.
std::map<std::string, std::string> AotiMetadata(
    caffe2::serialize::PyTorchStreamReader& reader) {
  for (const std::string& record : reader.getAllRecords()) {
    if (!absl::StartsWith(record, "data/aotinductor/model/") ||
        !absl::EndsWith(record, "_metadata.json")) {
      continue;
    }
    auto [data, size] = reader.getRecord(record);
    const char* text = static_cast<const char*>(data.get());
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : nlohmann::json::parse(text, text + size).items()) {
      if (value.is_string()) out[key] = value.get<std::string>();
    }
    return out;
  }
  throw std::runtime_error("no data/aotinductor/model/*_metadata.json in it");
}
#endif

class TorchScriptRunner final : public ModelRunner {
 public:
  TorchScriptRunner(const std::string& path, const c10::Device& device)
      : module_(torch::jit::load(path, device)) {
    module_.eval();
  }
  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs) override {
    std::vector<c10::IValue> args(inputs.begin(), inputs.end());
    const c10::IValue out = module_.forward(std::move(args));
    std::vector<at::Tensor> outputs;
    if (out.isTensor()) {
      outputs.push_back(out.toTensor());
    } else if (out.isTuple()) {
      for (const c10::IValue& v : out.toTupleRef().elements()) {
        if (v.isTensor()) outputs.push_back(v.toTensor());
      }
    } else if (out.isTensorList()) {
      for (const at::Tensor& t : out.toTensorVector()) outputs.push_back(t);
    }
    return outputs;
  }

 private:
  torch::jit::Module module_;
};

std::unique_ptr<ModelRunner> LoadRunner(const ModelFile& file,
                                        const c10::Device& device) {
  if (file.format == ModelFormat::kTorchScript) {
    return std::make_unique<TorchScriptRunner>(file.path, device);
  }
#if LTB_HAS_AOTI_PACKAGE
  return std::make_unique<AotiRunner>(file.path, device);
#else
  throw std::runtime_error(absl::StrCat(
      file.path, ": AOTInductor packages need LibTorch " LTB_AOTI_PACKAGE_VERSION
                 " or newer; this one is " TORCH_VERSION));
#endif
}

class ModelFileWorkload final : public Workload {
 public:
  ModelFileWorkload(std::unique_ptr<ModelRunner> runner, std::vector<at::Tensor> inputs,
                    std::vector<std::pair<std::string, double>> counters)
      : runner_(std::move(runner)),
        inputs_(std::move(inputs)),
        counters_(std::move(counters)) {}
  void Step() override {
    c10::InferenceMode guard;
    runner_->Run(inputs_);
  }
  at::Tensor Evaluate() override {
    c10::InferenceMode guard;
    std::vector<at::Tensor> out = runner_->Run(inputs_);
    return out.empty() ? at::Tensor() : out.front();
  }
  std::vector<std::pair<std::string, double>> Counters() const override {
    return counters_;
  }
  int64_t UntrackedBytes() const override { return runner_->UntrackedBytes(); }
  double FlopsPerStep() const override { return flops_; }
  // serve: a model of one input, batch first.
  at::Tensor BatchInputs() const override {
    return inputs_.size() == 1 ? inputs_.front() : at::Tensor();
  }
  // A file compiled for its inputs' batch (an AOTInductor package without a
  // dynamic batch, a trace that kept it) refuses another: from the first
  // refusal on, a smaller batch runs padded to that one.
  at::Tensor RunBatch(const at::Tensor& batch) override {
    if (inputs_.size() != 1) return {};
    c10::InferenceMode guard;
    const int64_t b = batch.size(0), full = inputs_.front().size(0);
    if (!pad_ || b == full) {
      try {
        std::vector<at::Tensor> out = runner_->Run({batch});
        return out.empty() ? at::Tensor() : out.front();
      } catch (const std::exception&) {
        if (b >= full) throw;
        pad_ = true;
      }
    }
    if (!padded_.defined()) padded_ = inputs_.front().clone();
    padded_.narrow(0, 0, b).copy_(batch);
    std::vector<at::Tensor> out = runner_->Run({padded_});
    return out.empty() ? at::Tensor() : out.front().narrow(0, 0, b);
  }
  // A step whose operators are not all counted reports no FLOPs: a part
  // of them would pass for the whole.
  void CountFlops() {
    const CountedFlops counted = StepFlops([this] { Step(); });
    if (counted.uncounted.empty()) {
      flops_ = counted.flops;
      return;
    }
    flops_ = 0;
    flops_left_out_ = absl::StrCat(
        "FLOP/s and mfu left out: a step runs ", absl::StrJoin(counted.uncounted, ", "),
        ", whose FLOPs are not counted (their weights are packed, or their shapes "
        "unknown here)",
        counted.flops > 0 ? absl::StrFormat("; the rest count %.4g", counted.flops) : "",
        "; --flops_per_step gives them");
  }
  std::string FlopsLeftOut() const override { return flops_left_out_; }
  void AddCounter(const std::string& name, double value) {
    counters_.emplace_back(name, value);
  }

 private:
  std::unique_ptr<ModelRunner> runner_;
  std::vector<at::Tensor> inputs_;
  std::vector<std::pair<std::string, double>> counters_;
  double flops_ = 0;
  std::string flops_left_out_;
  bool pad_ = false;
  at::Tensor padded_;
};

}  // namespace

std::optional<c10::ScalarType> ModelParameterDtype(const ModelFile& file) {
  if (file.format == ModelFormat::kAoti) {
#if LTB_HAS_AOTI_PACKAGE
    // A package's weights are its constants, in no order: the floating
    // dtype that holds the most of their bytes. One compiled for another
    // device than the CPU cannot load here: none.
    try {
      torch::inductor::AOTIModelPackageLoader loader(file.path, "model",
                                                     /*run_single_threaded=*/false,
                                                     /*num_runners=*/1,
                                                     /*device_index=*/-1);
      std::map<c10::ScalarType, int64_t> bytes;
      for (const auto& [name, t] : loader.get_runner()->extract_constants_map(false)) {
        if (t.defined() && at::isFloatingType(t.scalar_type())) {
          bytes[t.scalar_type()] += static_cast<int64_t>(t.nbytes());
        }
      }
      if (bytes.empty()) return std::nullopt;
      return std::max_element(
                 bytes.begin(), bytes.end(),
                 [](const auto& a, const auto& b) { return a.second < b.second; })
          ->first;
    } catch (const std::exception&) {
    }
#endif
    return std::nullopt;
  }
  try {
    const torch::jit::Module module = torch::jit::load(file.path, c10::Device(c10::kCPU));
    for (const at::Tensor& t : module.parameters()) {
      if (at::isFloatingType(t.scalar_type())) return t.scalar_type();
    }
    for (const at::Tensor& t : module.buffers()) {
      if (at::isFloatingType(t.scalar_type())) return t.scalar_type();
    }
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string BackendName(ModelFormat format) {
  return format == ModelFormat::kAoti ? "aoti" : "torchscript";
}

std::string ModelFile::Stem() const {
  std::string name = fs::path(path).filename().string();
  for (const char* ext : {".pt2", ".pt", ".pth", ".ts", ".torchscript"}) {
    if (absl::EndsWith(name, ext)) return name.substr(0, name.size() - std::strlen(ext));
  }
  return fs::path(path).stem().string();
}

absl::StatusOr<ModelFile> InspectModelFile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return ModelFileError(path,
                          fs::exists(path, ec) ? "not a regular file" : "no such file");
  }
  ModelFile file;
  file.path = path;
  file.format =
      absl::EndsWith(path, ".pt2") ? ModelFormat::kAoti : ModelFormat::kTorchScript;
#if !LTB_HAS_AOTI_PACKAGE
  if (file.format == ModelFormat::kAoti) {
    return ModelFileError(path,
                          "AOTInductor packages need LibTorch " LTB_AOTI_PACKAGE_VERSION
                          " or newer; this one is " TORCH_VERSION);
  }
#endif
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const c10::Error& e) {
    return ModelFileError(path, absl::StrCat("not a model file (not a PyTorch archive: ",
                                             e.what_without_backtrace(), ")"));
  }
  if (file.format == ModelFormat::kAoti) {
    try {
#if LTB_HAS_AOTI_PACKAGE_METADATA
      for (const auto& [k, v] :
           torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path,
                                                                               "model")) {
        file.metadata[k] = v;
      }
#else
      file.metadata = AotiMetadata(*reader);
#endif
    } catch (const c10::Error& e) {
      return ModelFileError(
          path, absl::StrCat("not an AOTInductor package: ", e.what_without_backtrace()));
    } catch (const std::exception& e) {
      return ModelFileError(path, absl::StrCat("not an AOTInductor package: ", e.what()));
    }
    return file;
  }
  if (!reader->hasRecord("constants.pkl") && !reader->hasRecord("code/__torch__.py")) {
    if (reader->hasRecord("data.pkl")) {
      return ModelFileError(
          path,
          "not a TorchScript module but saved tensors (torch.save: a state_dict or "
          "tensors, not a model); save the model with torch.jit.save, or compile it "
          "with AOTInductor into a .pt2");
    }
    return ModelFileError(
        path, "not a TorchScript module (torch.jit.save) nor an AOTInductor .pt2");
  }
  const std::string meta = std::string("extra/") + kTorchScriptMeta;
  if (reader->hasRecord(meta)) {
    auto [data, size] = reader->getRecord(meta);
    file.metadata =
        ParseMetadata(absl::string_view(static_cast<const char*>(data.get()), size));
  }
  return file;
}

absl::StatusOr<std::vector<InputSpec>> ParseInputSpecs(const std::string& text) {
  std::vector<InputSpec> out;
  for (absl::string_view item : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad --inputs item '", item, "': ", why,
          "; valid: DIMS:DTYPE with an optional [LOW,HIGH) for integers, e.g. "
          "8x3x224x224:fp32 or 4x128:int64[0,50257), several separated by ';'"));
    };
    const size_t colon = item.find(':');
    if (colon == absl::string_view::npos) return bad("no ':DTYPE'");
    InputSpec spec;
    for (absl::string_view d : absl::StrSplit(item.substr(0, colon), 'x')) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(d, &v) || v <= 0) return bad("dimensions must be positive");
      spec.shape.push_back(v);
    }
    absl::string_view type = item.substr(colon + 1);
    const size_t bracket = type.find('[');
    absl::string_view range;
    if (bracket != absl::string_view::npos) {
      range = type.substr(bracket);
      type = type.substr(0, bracket);
    }
    absl::StatusOr<c10::ScalarType> dtype = ParseInputDtype(type);
    if (!dtype.ok()) return bad(std::string(dtype.status().message()));
    spec.dtype = *dtype;
    if (!range.empty()) {
      if (at::isFloatingType(spec.dtype)) return bad("a range is for integer inputs");
      if (!absl::ConsumePrefix(&range, "[") || !absl::ConsumeSuffix(&range, ")")) {
        return bad("a range reads [LOW,HIGH)");
      }
      std::pair<std::string, std::string> lh = absl::StrSplit(range, ',');
      if (!absl::SimpleAtoi(lh.first, &spec.low) ||
          !absl::SimpleAtoi(lh.second, &spec.high) || spec.high <= spec.low) {
        return bad("a range needs LOW < HIGH");
      }
      // Values past the dtype's would wrap around when converted to it.
      const auto [lowest, above] = IntegerBounds(spec.dtype);
      if (spec.low < lowest || spec.high > above) {
        return bad(
            absl::StrCat("a range of ", type, " lies within [", lowest, ",", above, ")"));
      }
    }
    out.push_back(spec);
  }
  if (out.empty()) return absl::InvalidArgumentError("--inputs gives no input");
  return out;
}

std::string FormatInputSpec(const InputSpec& spec) {
  std::string out =
      absl::StrCat(absl::StrJoin(spec.shape, "x"), ":", InputDtypeName(spec.dtype));
  if (!at::isFloatingType(spec.dtype))
    absl::StrAppend(&out, "[", spec.low, ",", spec.high, ")");
  return out;
}

std::vector<at::Tensor> MakeInputs(const std::vector<InputSpec>& specs, int64_t batch,
                                   const c10::Device& device) {
  std::vector<at::Tensor> out;
  for (const InputSpec& s : specs) {
    std::vector<int64_t> shape = s.shape;
    if (batch > 0 && !shape.empty()) shape[0] = batch;
    const auto opts = at::TensorOptions().device(device);
    if (at::isFloatingType(s.dtype)) {
      out.push_back(at::randn(shape, opts.dtype(c10::kFloat)).to(s.dtype));
    } else {
      out.push_back(
          at::randint(s.low, s.high, shape, opts.dtype(c10::kLong)).to(s.dtype));
    }
  }
  return out;
}

absl::StatusOr<std::optional<SavedIO>> LoadSavedIO(const ModelFile& file) {
  const std::string path =
      (fs::path(file.path).parent_path() / (file.Stem() + ".io.pt")).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::optional<SavedIO>();
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  try {
    const c10::IValue value = torch::jit::pickle_load(bytes);
    SavedIO io;
    const c10::Dict<c10::IValue, c10::IValue> dict = value.toGenericDict();
    for (const char* key : {"inputs", "expected"}) {
      std::vector<at::Tensor>& into =
          std::string(key) == "inputs" ? io.inputs : io.expected;
      for (const c10::IValue& t : dict.at(key).toListRef()) into.push_back(t.toTensor());
    }
    if (dict.contains("compile_s")) io.compile_s = dict.at("compile_s").toDouble();
    return std::optional<SavedIO>(std::move(io));
  } catch (const c10::Error& e) {
    return ModelFileError(path,
                          absl::StrCat("not the inputs and outputs tools/export saves: ",
                                       e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return ModelFileError(
        path, absl::StrCat("not the inputs and outputs tools/export saves: ", e.what()));
  }
}

std::unique_ptr<Workload> MakeModelFileWorkload(const ModelFile& file,
                                                const BenchSpec& spec,
                                                std::vector<at::Tensor> inputs,
                                                const SavedIO* io, bool count_flops) {
  const auto compiled_for = file.metadata.find("AOTI_DEVICE_KEY");
  if (compiled_for != file.metadata.end() &&
      compiled_for->second !=
          c10::DeviceTypeName(spec.device.type(), /*lower_case=*/true)) {
    throw std::runtime_error(
        absl::StrCat(file.path, ": compiled for ", compiled_for->second, ", not for ",
                     DeviceName(spec.device), "; export it for this device"));
  }
  std::unique_ptr<ModelRunner> runner;
  try {
    runner = LoadRunner(file, spec.device);
  } catch (const c10::Error& e) {
    throw std::runtime_error(
        absl::StrCat(file.path, ": cannot load: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw std::runtime_error(absl::StrCat(file.path, ": cannot load: ", e.what()));
  }
  for (at::Tensor& t : inputs) t = t.to(spec.device);
  std::vector<std::pair<std::string, double>> counters;
  if (io != nullptr && io->compile_s >= 0)
    counters.emplace_back("compile_s", io->compile_s);
  auto workload =
      std::make_unique<ModelFileWorkload>(std::move(runner), inputs, std::move(counters));
  // One run now, outside the timed steps: a file that cannot run on these
  // inputs says so with the inputs it was given, and the eager outputs (when
  // given) measure how far compiling moved the results.
  at::Tensor out;
  const auto describe = [&](const std::string& why) {
    return std::runtime_error(
        absl::StrCat(file.path, ": cannot run on the inputs (",
                     absl::StrJoin(inputs, ", ",
                                   [](std::string* s, const at::Tensor& t) {
                                     absl::StrAppend(s, c10::str(t.sizes()), ":",
                                                     c10::toString(t.scalar_type()));
                                   }),
                     "): ", why));
  };
  try {
    out = workload->Evaluate();
  } catch (const c10::Error& e) {
    throw describe(e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw describe(e.what());
  }
  if (io != nullptr && !io->expected.empty() && out.defined()) {
    workload->AddCounter("rel_err", RelativeError(out, io->expected.front()));
  }
  // A package's own kernels would leave part of its FLOPs uncounted (the
  // convolutions it hands to LibTorch, not its fused matmuls): none is better
  // than part.
  if (count_flops && file.format == ModelFormat::kTorchScript) workload->CountFlops();
  return workload;
}

std::unique_ptr<Workload> BuildCompiledBenchmark(const BenchSpec& spec) {
  absl::StatusOr<ModelFile> file = InspectModelFile(spec.model_file);
  if (!file.ok()) throw std::runtime_error(std::string(file.status().message()));
  absl::StatusOr<std::optional<SavedIO>> io = LoadSavedIO(*file);
  if (!io.ok()) throw std::runtime_error(std::string(io.status().message()));
  if (!io->has_value()) {
    throw std::runtime_error(
        absl::StrCat(spec.model_file, ": no ", file->Stem(),
                     ".io.pt beside it with the inputs to run it on"));
  }
  return MakeModelFileWorkload(*file, spec, (*io)->inputs, &**io);
}

}  // namespace ltb
