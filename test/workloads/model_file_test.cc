#include "workloads/model_file.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "base/torch_compat.h"
#include "models/user_model.h"
#include "spec_for.h"
#include "suite/compiled.h"
#include "workloads/profiled_flops.h"

#if __has_include(<torch/csrc/inductor/aoti_package/model_package_loader.h>)
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#define LTB_TEST_AOTI_LOADER 1
#endif

namespace ltb {
namespace {

namespace fs = std::filesystem;

// The AOTInductor gates of torch_compat.h against this LibTorch's headers:
// each is on exactly where its API is there, so that a gate set too early
// fails to compile model_file.cc and one set too late fails here.
#ifdef LTB_TEST_AOTI_LOADER
template <typename Runner, typename = void>
struct ExtractsConstants : std::false_type {};
template <typename Runner>
struct ExtractsConstants<
    Runner, std::void_t<decltype(std::declval<Runner&>().extract_constants_map(false))>>
    : std::true_type {};
template <typename Loader, typename = void>
struct ReadsMetadataAlone : std::false_type {};
template <typename Loader>
struct ReadsMetadataAlone<Loader, std::void_t<decltype(Loader::load_metadata_from_package(
                                      std::string(), std::string()))>> : std::true_type {
};
using Loader = torch::inductor::AOTIModelPackageLoader;
static_assert(LTB_HAS_AOTI_PACKAGE ==
                  (std::is_constructible_v<Loader, std::string, std::string, bool, size_t,
                                           c10::DeviceIndex> &&
                   ExtractsConstants<torch::inductor::AOTIModelContainerRunner>::value),
              "LTB_HAS_AOTI_PACKAGE must be on exactly where the loader takes "
              "num_runners and device_index and its runner extracts its constants");
static_assert(LTB_HAS_AOTI_PACKAGE_METADATA == ReadsMetadataAlone<Loader>::value,
              "LTB_HAS_AOTI_PACKAGE_METADATA must be on exactly where the loader has "
              "load_metadata_from_package");
#else
static_assert(!LTB_HAS_AOTI_PACKAGE && !LTB_HAS_AOTI_PACKAGE_METADATA,
              "the AOTInductor gates are on, but this LibTorch has no package loader");
#endif

class ModelFileTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ltb_model_file_" + std::to_string(::getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A TorchScript module made in C++: forward(x) = 2 x + 1.
  std::string TorchScriptFile(const std::string& name) {
    torch::jit::Module m("Doubler");
    m.define("def forward(self, x):\n  return x * 2 + 1\n");
    const std::string path = Path(name);
    m.save(path);
    return path;
  }

  fs::path dir_;
};

TEST(ParseInputSpecs, ShapesDtypesAndRanges) {
  const auto specs = ParseInputSpecs("8x3x224x224:fp32; 4x128:int64[0,50257)").value();
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].shape, (std::vector<int64_t>{8, 3, 224, 224}));
  EXPECT_EQ(specs[0].dtype, c10::kFloat);
  EXPECT_EQ(specs[1].dtype, c10::kLong);
  EXPECT_EQ(specs[1].low, 0);
  EXPECT_EQ(specs[1].high, 50257);
  EXPECT_EQ(FormatInputSpec(specs[1]), "4x128:int64[0,50257)");
  EXPECT_EQ(FormatInputSpec(specs[0]), "8x3x224x224:fp32");
}

TEST(ParseInputSpecs, BadItemsSayWhatIsValid) {
  for (const char* bad : {"8x3", "8x0:fp32", "8:fp64x", "8:int64[5,2)", "8:fp32[0,1)",
                          "8:int64[0,", "axb:fp32", ""}) {
    const auto r = ParseInputSpecs(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--inputs"), std::string::npos) << bad;
  }
  EXPECT_NE(ParseInputSpecs("8:half").status().message().find("valid: fp32, bf16, fp16"),
            std::string::npos);
  // A range past the dtype's values would wrap around in it.
  for (const auto& [bad, why] : std::vector<std::pair<const char*, const char*>>{
           {"8:uint8[0,300)", "a range of uint8 lies within [0,256)"},
           {"8:int8[-200,5)", "a range of int8 lies within [-128,128)"},
           {"8:bool[0,3)", "a range of bool lies within [0,2)"},
           {"8:int32[0,3000000000)",
            "a range of int32 lies within [-2147483648,2147483648)"}}) {
    EXPECT_NE(ParseInputSpecs(bad).status().message().find(why), std::string::npos)
        << bad << ": " << ParseInputSpecs(bad).status();
  }
  EXPECT_TRUE(ParseInputSpecs("8:uint8[0,256);8:int8[-128,128);8:bool[0,2)").ok());
}

TEST(MakeInputs, ReplacesTheBatchAndKeepsIntegersInRange) {
  const auto specs = ParseInputSpecs("2x5:fp32;2x7:int64[3,9)").value();
  const std::vector<at::Tensor> t = MakeInputs(specs, 6, c10::Device(c10::kCPU));
  EXPECT_EQ(t[0].sizes(), (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(t[1].sizes(), (std::vector<int64_t>{6, 7}));
  EXPECT_GE(t[1].min().item<int64_t>(), 3);
  EXPECT_LT(t[1].max().item<int64_t>(), 9);
}

TEST_F(ModelFileTest, ATorchScriptModuleRunsWithItsSavedInputsAndIsComparedWithThem) {
  const std::string path = TorchScriptFile("double.pt");
  const ModelFile file = InspectModelFile(path).value();
  EXPECT_EQ(file.format, ModelFormat::kTorchScript);
  EXPECT_EQ(file.Stem(), "double");
  // The inputs and "eager" outputs tools/export saves beside a file; the
  // expected output is off by 0.5 somewhere, a relative error of 0.5 / 9.
  const at::Tensor x = torch::tensor({1.0f, 2.0f, 4.0f});
  c10::impl::GenericDict io(c10::StringType::get(), c10::AnyType::get());
  io.insert("inputs", c10::List<at::Tensor>({x}));
  io.insert("expected", c10::List<at::Tensor>({torch::tensor({3.0f, 5.0f, 8.5f})}));
  io.insert("compile_s", 1.5);
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(io));
  std::ofstream(Path("double.io.pt"), std::ios::binary).write(bytes.data(), bytes.size());
  const std::optional<SavedIO> saved = LoadSavedIO(file).value();
  ASSERT_TRUE(saved.has_value());
  EXPECT_DOUBLE_EQ(saved->compile_s, 1.5);
  std::unique_ptr<Workload> w = MakeModelFileWorkload(
      file, SpecFor("Model", "double", "forward", 3), saved->inputs, &*saved);
  w->Step();
  EXPECT_TRUE(torch::equal(w->Evaluate(), 2 * x + 1));
  std::map<std::string, double> counters;
  for (const auto& [k, v] : w->Counters()) counters[k] = v;
  EXPECT_DOUBLE_EQ(counters.at("compile_s"), 1.5);
  EXPECT_NEAR(counters.at("rel_err"), 0.5 / 8.5, 1e-6);
}

TEST_F(ModelFileTest, AStepsFlopsAreItsMatmulsConvolutionsAndAttentionOnly) {
  // A traced convolution (aten::_convolution, padding 1), a scripted one
  // (stride 2, two groups), a matmul followed by element-wise ops, and
  // fused attention: the FLOPs counted by hand, each 2 per multiply-add.
  torch::jit::Module m("Mixed");
  m.register_parameter("w1", torch::randn({4, 3, 3, 3}), false);
  m.register_parameter("w2", torch::randn({6, 2, 2, 2}), false);
  m.register_parameter("fc", torch::randn({96, 5}), false);
  m.define(R"(
def forward(self, x, q):
    y = torch._convolution(x, self.w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, False, False, True, True)
    z = torch.conv2d(y, self.w2, None, [2, 2], [0, 0], [1, 1], 2)
    h = torch.mm(torch.flatten(z, 1), self.fc) * 2.0 + 1.0
    a = torch.scaled_dot_product_attention(q, q, q)
    return h, a
)");
  const std::string path = Path("mixed.pt");
  m.save(path);
  const std::vector<at::Tensor> inputs = {torch::randn({2, 3, 8, 8}),
                                          torch::randn({1, 2, 5, 8})};
  std::unique_ptr<Workload> w =
      MakeModelFileWorkload(InspectModelFile(path).value(),
                            SpecFor("Model", "mixed", "forward", 2), inputs, nullptr,
                            /*count_flops=*/true);
  const double conv1 = 2.0 * (2 * 4 * 8 * 8) * (3 * 3 * 3);  // outputs x (C_in k k)
  const double conv2 = 2.0 * (2 * 6 * 4 * 4) * (2 * 2 * 2);  // C_in / groups = 2
  const double mm = 2.0 * 2 * 96 * 5;
  const double attention = 2.0 * (1 * 2 * 5) * 5 * (8 + 8);  // Q K^T and A V
  EXPECT_DOUBLE_EQ(w->FlopsPerStep(), conv1 + conv2 + mm + attention);
}

TEST(StepFlops, CountsWhatRunsOnOtherThreadsToo) {
  // As a forked task (torch.jit.fork) runs on an inter-op thread.
  const at::Tensor x = torch::randn({8, 64}), a = torch::randn({64, 32});
  const CountedFlops counted = StepFlops([&] {
    std::thread other([&] { at::mm(x, a); });
    at::mm(x, a);
    other.join();
  });
  EXPECT_DOUBLE_EQ(counted.flops, 2 * (2.0 * 8 * 64 * 32));
  EXPECT_TRUE(counted.uncounted.empty());
}

// Calls a registered operator by name, as a model's interpreter does.
c10::IValue CallOp(const char* name, torch::jit::Stack stack, const char* overload = "") {
  c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).callBoxed(&stack);
  return stack.front();
}

TEST(StepFlops, CountsQuantisedLinearsAndListsWhatItCannotCount) {
  const std::vector<at::QEngine> engines = at::globalContext().supportedQEngines();
  if (std::find(engines.begin(), engines.end(), at::QEngine::FBGEMM) == engines.end() &&
      std::find(engines.begin(), engines.end(), at::QEngine::X86) == engines.end()) {
    GTEST_SKIP() << "no x86 quantised engine in this LibTorch";
  }
  // A dynamically quantised linear (64 -> 48) over (8, 16, 64): 2 K N a row.
  const at::Tensor qw =
      at::quantize_per_tensor(torch::randn({48, 64}), 0.05, 0, c10::kQInt8);
  const c10::IValue linear = CallOp("quantized::linear_prepack", {qw, c10::IValue()});
  const at::Tensor x = torch::randn({8, 16, 64});
  CountedFlops counted = StepFlops([&] {
    CallOp("quantized::linear_dynamic", {x, linear, false});
  });
  EXPECT_DOUBLE_EQ(counted.flops, 2.0 * 8 * 16 * 64 * 48);
  EXPECT_TRUE(counted.uncounted.empty());
  // A quantised convolution's packed weights say nothing of its shape.
  const at::Tensor qk =
      at::quantize_per_tensor(torch::randn({4, 3, 3, 3}), 0.05, 0, c10::kQInt8);
  const c10::IValue conv =
      CallOp("quantized::conv2d_prepack",
             {qk, c10::IValue(), std::vector<int64_t>{1, 1}, std::vector<int64_t>{0, 0},
              std::vector<int64_t>{1, 1}, int64_t{1}});
  const at::Tensor qx =
      at::quantize_per_tensor(torch::randn({2, 3, 8, 8}), 0.05, 64, c10::kQUInt8);
  counted = StepFlops([&] {
    CallOp("quantized::conv2d", {qx, conv, 0.1, int64_t{0}}, "new");
  });
  EXPECT_EQ(counted.uncounted, std::vector<std::string>{"quantized::conv2d"});
}

TEST_F(ModelFileTest, AStepWhoseFlopsAreNotAllCountedReportsNoneAndSaysWhy) {
  if (!at::hasMKLDNN()) GTEST_SKIP() << "no oneDNN in this LibTorch";
  // A convolution called by oneDNN's own operator, whose FLOPs are not
  // counted, beside a counted matmul: no FLOPs rather than the matmul's
  // passing for the step's, and the reason.
  torch::jit::Module m("Partly");
  m.register_parameter("w", torch::randn({4, 3, 3, 3}), false);
  m.register_parameter("fc", torch::randn({4 * 6 * 6, 5}), false);
  m.define(R"(
def forward(self, x):
    y = torch.mkldnn_convolution(x, self.w, None, [0, 0], [1, 1], [1, 1], 1)
    return torch.mm(torch.flatten(y, 1), self.fc)
)");
  m.save(Path("partly.pt"));
  std::unique_ptr<Workload> w =
      MakeModelFileWorkload(InspectModelFile(Path("partly.pt")).value(),
                            SpecFor("Model", "partly", "forward", 2),
                            {torch::randn({2, 3, 8, 8})}, nullptr, /*count_flops=*/true);
  EXPECT_EQ(w->FlopsPerStep(), 0);
  EXPECT_NE(w->FlopsLeftOut().find(
                "FLOP/s and mfu left out: a step runs aten::mkldnn_convolution, whose "
                "FLOPs are not counted"),
            std::string::npos)
      << w->FlopsLeftOut();
  EXPECT_NE(w->FlopsLeftOut().find("; the rest count 2880; --flops_per_step gives them"),
            std::string::npos)
      << w->FlopsLeftOut();
}

TEST_F(ModelFileTest, AModelOfTokenIdsIsNamedByItsParametersDtype) {
  // Token ids in, bf16 weights: its dtype is its parameters', not fp32's.
  for (const auto& [dtype, name] :
       {std::pair<c10::ScalarType, const char*>{c10::kBFloat16, "bf16"},
        {c10::kFloat, "fp32"}}) {
    torch::jit::Module m("Tokens");
    m.register_parameter("embed", torch::randn({100, 8}).to(dtype), false);
    m.define(R"(
def forward(self, ids):
    return torch.embedding(self.embed, ids)
)");
    const std::string path = Path(absl::StrCat("tokens_", name, ".pt"));
    m.save(path);
    const ModelFile file = InspectModelFile(path).value();
    EXPECT_EQ(ModelParameterDtype(file), dtype) << name;
    FamilyOptions options;
    options.model_files = {path};
    options.model_inputs = "4x16:int64[0,100)";
    const Family f = ModelFamilyFromOptions(options).value();
    ASSERT_EQ(f.cases.size(), 1u);
    EXPECT_EQ(f.cases.front().dtype, dtype) << name;
  }
}

TEST_F(ModelFileTest, FilesThatAreNotModelsSayWhatTheyAre) {
  EXPECT_NE(InspectModelFile(Path("missing.pt2")).status().message().find("no such file"),
            std::string::npos);
  std::ofstream(Path("text.pt")) << "not a model";
  const auto text = InspectModelFile(Path("text.pt"));
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find(Path("text.pt") + ": not a model file"),
            std::string::npos)
      << text.status();
  const std::vector<char> tensors =
      torch::jit::pickle_save(c10::IValue(c10::List<at::Tensor>({torch::ones(3)})));
  std::ofstream(Path("weights.pt"), std::ios::binary)
      .write(tensors.data(), tensors.size());
  const auto weights = InspectModelFile(Path("weights.pt"));
  ASSERT_FALSE(weights.ok());
  EXPECT_NE(weights.status().message().find("not a TorchScript module but saved tensors"),
            std::string::npos)
      << weights.status();
}

TEST_F(ModelFileTest, InputsTheModelRejectsNameTheFileAndTheInputs) {
  const ModelFile file = InspectModelFile(TorchScriptFile("double.pt")).value();
  try {
    MakeModelFileWorkload(file, SpecFor("Model", "double", "forward", 1),
                          {torch::ones({2}), torch::ones({2})});
    FAIL() << "two inputs for a forward of one";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(
        std::string(e.what()).find(file.path + ": cannot run on the inputs ([2]:Float, "
                                               "[2]:Float)"),
        std::string::npos)
        << e.what();
  }
}

TEST_F(ModelFileTest, AnAotiPackagesMetadataIsReadWithoutLoadingItsModel) {
  // The archive of a package as AOTInductor writes it, holding only the
  // metadata beside the model's code: enough to inspect, nothing to load.
  const std::string path = Path("tiny.pt2");
  {
    caffe2::serialize::PyTorchStreamWriter writer(path);
    const std::string meta =
        R"({"AOTI_DEVICE_KEY": "cpu", "ltb_benchmark": "CNN/default/cpu/forward"})";
    writer.writeRecord("data/aotinductor/model/cabcwrapper_metadata.json", meta.data(),
                       meta.size());
    const std::string code = "// the model's code";
    writer.writeRecord("data/aotinductor/model/cabcwrapper.cpp", code.data(),
                       code.size());
    writer.writeEndOfFile();
  }
  const absl::StatusOr<ModelFile> file = InspectModelFile(path);
#if LTB_HAS_AOTI_PACKAGE
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->format, ModelFormat::kAoti);
  EXPECT_EQ(file->metadata.at("AOTI_DEVICE_KEY"), "cpu");
  EXPECT_EQ(file->metadata.at("ltb_benchmark"), "CNN/default/cpu/forward");
#else
  ASSERT_FALSE(file.ok());
  EXPECT_NE(
      file.status().message().find("AOTInductor packages need LibTorch 2.8 or newer"),
      std::string::npos)
      << file.status();
#endif
}

TEST_F(ModelFileTest, CompiledBenchmarksNeedTheNameTheyCompile) {
  TorchScriptFile("mine.pt");  // no ltb_benchmark: a file of the user's own
  std::vector<std::string> errors;
  EXPECT_TRUE(CompiledBenchmarks(dir_.string(), &errors).empty());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("no ltb_benchmark in its metadata"), std::string::npos);
}

}  // namespace
}  // namespace ltb
