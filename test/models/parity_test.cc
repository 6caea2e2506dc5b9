// The C++ model families and their Python definitions (tools/ltb/pysuite/)
// compute the same thing: each family's nano model runs its inference phase
// here, and `python -m ltb.pysuite.check` loads the same weights into the
// Python model, runs the same inputs and compares the outputs.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "family/family.h"
#include "models/cnn.h"
#include "models/decoder_family.h"
#include "models/encdec.h"
#include "models/encoder.h"
#include "models/resnet.h"
#include "models/whisper.h"

#ifndef LTB_PYTHON
#define LTB_PYTHON ""
#endif
#ifndef LTB_SOURCE_DIR
#define LTB_SOURCE_DIR ""
#endif

namespace ltb {
namespace {

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 16;

// What one family's inference phase saw and computed, as the dump names it:
// "param:NAME", "buffer:NAME", "input:I", "output", plus any extra tensors.
struct Dump {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};

// Moves every parameter, and batch norm's running statistics, away from
// their initialisation (norm weights of one, biases and means of zero), which
// would hide a norm or bias applied in the wrong place.
void Perturb(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (at::Tensor& p : module.parameters()) p.add_(torch::randn_like(p) * 0.1);
  for (const auto& b : module.named_buffers()) {
    if (absl::EndsWith(b.key(), "running_mean")) b.value().normal_(0, 0.1);
    if (absl::EndsWith(b.key(), "running_var")) b.value().uniform_(0.5, 1.5);
  }
}

// The default CPU generator's state ("rng:built" when taken right after the
// model is built): the Python model built from the same seed must leave it
// the same, so that what bench and tools/pybench draw next (the inputs) is
// the same too.
at::Tensor GeneratorState() { return at::detail::getDefaultCPUGenerator().get_state(); }

// Eval mode, then `forward` on `inputs` in inference mode, in fp32 on the CPU.
Dump Run(torch::nn::Module& module, const at::Tensor& built,
         const std::vector<at::Tensor>& inputs,
         const std::function<at::Tensor()>& forward) {
  // The parameters as the seed drew them ("init:param:NAME"): the Python
  // model built from the same seed must hold the very same values, so that
  // tools/pybench and bench measure the same weights.
  std::vector<std::pair<std::string, at::Tensor>> drawn;
  for (const auto& p : module.named_parameters()) {
    drawn.emplace_back(absl::StrCat("init:param:", p.key()), p.value().detach().clone());
  }
  Perturb(module);
  module.eval();
  Dump dump;
  dump.tensors = ModuleTensors(module);
  dump.tensors.insert(dump.tensors.end(), drawn.begin(), drawn.end());
  dump.tensors.emplace_back("rng:built", built);
  for (size_t i = 0; i < inputs.size(); ++i) {
    dump.tensors.emplace_back(absl::StrCat("input:", i), inputs[i]);
  }
  c10::InferenceMode guard;
  dump.tensors.emplace_back("output", forward());
  return dump;
}

// Token ids as BuildLanguageModel draws them: (B, T + 1), the first T the input.
at::Tensor TokenInputs(int64_t vocab) {
  return torch::randint(0, vocab, {kBatch, kSeq + 1}, torch::kLong)
      .narrow(1, 0, kSeq)
      .contiguous();
}

// One builder per family, mirroring the inputs of its Build* function.
const std::map<std::string, std::function<Dump()>>& Families() {
  static const auto* families = new std::map<std::string, std::function<Dump()>>{
      {"Transformer",
       [] {
         DecoderOptions o = DecoderSizeOptions("Transformer", "nano").value();
         o.max_positions(kSeq);  // as the benchmark sets it
         DecoderLM model = MakeDecoder("Transformer", o);
         const at::Tensor built = GeneratorState();
         const at::Tensor ids = TokenInputs(o.vocab_size());
         return Run(*model, built, {ids}, [&] { return model(ids); });
       }},
      {"GPT2",
       [] {
         DecoderLM model = MakeDecoder("GPT2", *DecoderSizeOptions("GPT2", "nano"));
         const at::Tensor built = GeneratorState();
         const at::Tensor ids = TokenInputs(model->options().vocab_size());
         return Run(*model, built, {ids}, [&] { return model(ids); });
       }},
      {"Llama",
       [] {
         const DecoderOptions o = DecoderSizeOptions("Llama", "nano").value();
         DecoderLM model = MakeDecoder("Llama", o);
         const at::Tensor built = GeneratorState();
         const at::Tensor ids = TokenInputs(o.vocab_size());
         return Run(*model, built, {ids}, [&] { return model(ids); });
       }},
      {"ResNet",
       [] {
         ResNet model(ResNetSizeOptions("nano").value());
         const at::Tensor built = GeneratorState();
         const at::Tensor images = torch::randn({kBatch, 3, 224, 224});
         return Run(*model, built, {images}, [&] { return model(images); });
       }},
      {"CNN",
       [] {
         CNN model(CNNSizeOptions("nano").value());
         const at::Tensor built = GeneratorState();
         const at::Tensor images = torch::randn({kBatch, 3, 32, 32});
         return Run(*model, built, {images}, [&] { return model(images); });
       }},
      {"Encoder",
       [] {
         const EncoderOptions o = EncoderSizeOptions("nano").value();
         Encoder model(o);
         const at::Tensor built = GeneratorState();
         const at::Tensor x = torch::randn({kSeq, kBatch, o.d_model()});  // (T, B, d)
         return Run(*model, built, {x}, [&] { return model(x); });
       }},
      {"Whisper",
       [] {
         const WhisperOptions o = WhisperSizeOptions("nano").value();
         Whisper model(o);
         const at::Tensor built = GeneratorState();
         const at::Tensor mel = torch::randn({1, o.mels(), o.frames()});
         const at::Tensor prompt = torch::randint(0, o.vocab(), {1, 4}, torch::kLong);
         Dump dump = Run(*model, built, {mel}, [&] { return model->Encode(mel); });
         // The decoder too (generate's phase), over the encoder output.
         c10::InferenceMode guard;
         const at::Tensor xa = dump.tensors.back().second;  // "output"
         dump.tensors.emplace_back("decode:input:0", prompt);
         dump.tensors.emplace_back("decode:output", model->Decode(prompt, xa));
         return dump;
       }},
      {"EncDec",
       [] {
         const EncDecOptions o = EncDecSizeOptions("nano").value();
         EncDec model(o);
         const at::Tensor built = GeneratorState();
         // As BuildEncDec: source then target in one sample; the forward
         // takes the source and the target without its last token.
         const at::Tensor pairs =
             torch::randint(0, o.vocab(), {kBatch, 2 * kSeq}, torch::kLong);
         const at::Tensor src = pairs.narrow(1, 0, kSeq).contiguous();
         const at::Tensor tgt = pairs.narrow(1, kSeq, kSeq - 1).contiguous();
         return Run(*model, built, {src, tgt}, [&] { return model(src, tgt); });
       }},
  };
  return *families;
}

void Save(const Dump& dump, const std::string& path) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : dump.tensors) dict.insert(name, tensor);
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// Runs `command`; its exit status, with stdout and stderr in `output`.
int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

constexpr const char* kFamilies[] = {"Transformer", "GPT2",    "Llama",   "ResNet",
                                     "CNN",         "Encoder", "Whisper", "EncDec"};

// Every family's dump checked by one Python process (starting Python and
// importing torch takes longer than a nano family's check): its exit status
// and output, which ends each family's lines with "FAMILY/nano: matches" or
// "FAMILY/nano: DIVERGES".
class ParityTest : public testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    python_ = LTB_PYTHON;
    if (python_.empty() || !std::filesystem::exists(python_)) return;
    dir_ =
        std::filesystem::path(testing::TempDir()) / absl::StrCat("ltb_parity_", getpid());
    std::filesystem::create_directories(dir_);
    std::string paths;
    for (const char* family : kFamilies) {
      torch::manual_seed(0);
      const std::string path = (dir_ / absl::StrCat(family, "-nano.pt")).string();
      Save(Families().at(family)(), path);
      absl::StrAppend(&paths, " '", path, "'");
    }
    output_ = new std::string;
    status_ = RunCommand(absl::StrCat("cd '", LTB_SOURCE_DIR, "/tools' && '", python_,
                                      "' -m ltb.pysuite.check", paths),
                         output_);
    std::cout << *output_;
  }
  static void TearDownTestSuite() {
    std::error_code ignored;  // none made where there is no Python
    std::filesystem::remove_all(dir_, ignored);
  }

  static std::string python_;
  static std::filesystem::path dir_;
  static std::string* output_;
  static int status_;
};

std::string ParityTest::python_;
std::filesystem::path ParityTest::dir_;
std::string* ParityTest::output_ = nullptr;
int ParityTest::status_ = -1;

TEST_P(ParityTest, PythonDefinitionComputesTheSameOutput) {
  if (output_ == nullptr) {
    GTEST_SKIP() << "no Python interpreter at '" << python_
                 << "' (configure with -DLTB_PYTHON=<venv>/bin/python)";
  }
  const std::string family = GetParam();
  // 1: a family diverges (which one, its own line says); else 0 or bad input.
  EXPECT_TRUE(status_ == 0 || status_ == 1) << *output_;
  EXPECT_TRUE(absl::StrContains(*output_, absl::StrCat("\n", family, "/nano: matches\n")))
      << *output_;
}

INSTANTIATE_TEST_SUITE_P(Families, ParityTest,
                         testing::ValuesIn(std::vector<std::string>(std::begin(kFamilies),
                                                                    std::end(kFamilies))),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace ltb
