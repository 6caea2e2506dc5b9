#include "models/weights.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/digest.h"
#include "models/decoder_family.h"

#ifndef LTB_PYTHON
#define LTB_PYTHON ""
#endif

namespace ltb {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(LTB_SOURCE_DIR) / "test/models/fixtures";

at::Tensor Expected(const Checkpoint& c, const std::string& name) {
  return c.Load(name, c.entries().at(name).dtype).value();
}

// transformers' outputs for a checkpoint it wrote (tools/llama-fixtures):
// the model loaded by name gives the same logits (relative error <= 1e-5)
// and the same greedy tokens from generation with the cache.
void ExpectTransformersOutputs(const std::string& weights, const std::string& expected,
                               const DecoderOptions& o) {
  const absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(weights);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const absl::StatusOr<Checkpoint> want = Checkpoint::Open(expected);
  ASSERT_TRUE(want.ok()) << want.status();
  // Built undrawn, as bench builds a model for a checkpoint.
  DecoderNames names = FindDecoderRow("Llama").value()->names;
  names.draw = false;
  DecoderLM model(o, names);
  const absl::Status loaded = LoadWeights(*model, "Llama", *checkpoint, at::kFloat);
  ASSERT_TRUE(loaded.ok()) << loaded;
  // fp32 in the file: the parameters are the mapped file's bytes.
  EXPECT_TRUE(checkpoint->Mapped("model.embed_tokens.weight", at::kFloat));
  model->eval();
  at::NoGradGuard no_grad;
  const at::Tensor prompt = Expected(*want, "prompt");
  const at::Tensor logits = model(prompt);
  if (want->entries().count("logits")) {
    EXPECT_LE(RelativeError(logits, Expected(*want, "logits")), 1e-5);
  } else {
    EXPECT_LE(RelativeError(logits.select(1, prompt.size(1) - 1),
                            Expected(*want, "logits_last")),
              1e-5);
  }
  const at::Tensor tokens = Expected(*want, "tokens");
  const at::Tensor generated = GenerateWithCache(model, prompt, tokens.size(1));
  EXPECT_TRUE(generated.equal(tokens)) << generated << "\nwant\n" << tokens;
}

TEST(LlamaWeights, NanoCheckpointWrittenByTransformersGivesItsLogitsAndTokens) {
  ExpectTransformersOutputs((kFixtures / "llama-nano").string(),
                            (kFixtures / "llama-nano.expected.safetensors").string(),
                            *DecoderSizeOptions("Llama", "nano"));
}

TEST(LlamaWeights, OneBShapeWithTwoLayersGivesTransformersLogitsAndTokens) {
  // 1.5 GB of fp32 weights: regenerated bit for bit (numpy, no transformers)
  // rather than kept in the repository.
  const std::string python = LTB_PYTHON;
  if (python.empty() || !fs::exists(python)) {
    GTEST_SKIP() << "no Python interpreter at '" << python
                 << "' (configure with -DLTB_PYTHON=<venv>/bin/python)";
  }
  const fs::path dir = fs::path(testing::TempDir()) / absl::StrCat("ltb_1B2L_", getpid());
  const std::string command =
      absl::StrCat("'", python, "' '", LTB_SOURCE_DIR,
                   "/tools/llama-fixtures' weights 1B-2L '", dir.string(), "'");
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command;
  DecoderOptions o = DecoderSizeOptions("Llama", "1B").value();
  o.num_layers(2);
  ExpectTransformersOutputs(dir.string(),
                            (kFixtures / "llama-1B-2L.expected.safetensors").string(), o);
  fs::remove_all(dir);
}

class BadWeightsTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) /
           absl::StrCat("ltb_weights_", getpid(), "_",
                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `tensors` (fp32) as a safetensors file.
  std::string Write(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
    nlohmann::json header = nlohmann::json::object();
    std::string data;
    for (const auto& [name, t] : tensors) {
      const at::Tensor c = t.to(at::kFloat).contiguous();
      const size_t begin = data.size();
      data.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
      header[name] = {{"dtype", "F32"},
                      {"shape", c.sizes().vec()},
                      {"data_offsets", {begin, data.size()}}};
    }
    const std::string text = header.dump();
    const std::string path = (dir_ / "model.safetensors").string();
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << text << data;
    return path;
  }

  // The named parameters of a Llama nano, optionally edited.
  static std::vector<std::pair<std::string, at::Tensor>> Nano() {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& p :
         MakeDecoder("Llama", *DecoderSizeOptions("Llama", "nano"))->named_parameters())
      out.emplace_back(p.key(), p.value().detach());
    return out;
  }

  std::string LoadError(const std::string& path) {
    const absl::StatusOr<Checkpoint> c = Checkpoint::Open(path);
    if (!c.ok()) return std::string(c.status().message());
    DecoderLM model = MakeDecoder("Llama", *DecoderSizeOptions("Llama", "nano"));
    const absl::Status s = LoadWeights(*model, "Llama/nano", *c, at::kFloat);
    EXPECT_FALSE(s.ok());
    return std::string(s.message());
  }

  fs::path dir_;
};

TEST_F(BadWeightsTest, AMissingTensorIsNamedWithTheFile) {
  auto tensors = Nano();
  tensors.erase(tensors.begin() + 3);
  const std::string missing = Nano()[3].first;
  const std::string path = Write(tensors);
  const std::string error = LoadError(path);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("has no tensor '" + missing + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("Llama/nano"), std::string::npos) << error;
}

TEST_F(BadWeightsTest, AnExtraTensorIsNamed) {
  auto tensors = Nano();
  tensors.emplace_back("model.layers.2.mlp.up_proj.weight", at::zeros({256, 64}));
  const std::string error = LoadError(Write(tensors));
  EXPECT_NE(error.find("holds tensor 'model.layers.2.mlp.up_proj.weight' of shape "
                       "[256, 64], which Llama/nano has no parameter or buffer for"),
            std::string::npos)
      << error;
}

TEST_F(BadWeightsTest, AMisShapedTensorSaysBothShapes) {
  auto tensors = Nano();
  for (auto& [name, t] : tensors) {
    if (name == "model.layers.1.self_attn.k_proj.weight") t = at::zeros({64, 64});
  }
  const std::string error = LoadError(Write(tensors));
  EXPECT_NE(error.find("tensor 'model.layers.1.self_attn.k_proj.weight' has shape "
                       "[64, 64], but Llama/nano needs [32, 64]"),
            std::string::npos)
      << error;
}

TEST_F(BadWeightsTest, ATruncatedOrForeignFileIsOneSentenceNamingIt) {
  const std::string path = Write(Nano());
  fs::resize_file(path, fs::file_size(path) - 100);
  EXPECT_NE(LoadError(path).find(path), std::string::npos);
  const std::string text = (dir_ / "notes.txt").string();
  std::ofstream(text) << "not a checkpoint at all";
  EXPECT_NE(LoadError(text).find(text), std::string::npos);
  const std::string missing = (dir_ / "absent.safetensors").string();
  EXPECT_NE(LoadError(missing).find(missing), std::string::npos);
}

TEST_F(BadWeightsTest, GPT2LoadsHuggingFacesConv1DLayoutTransposed) {
  // A checkpoint as Hugging Face's GPT2LMHeadModel saves it: names under
  // "transformer.", Conv1D weights (in, out), the old attention masks.
  torch::manual_seed(1);
  DecoderLM source = MakeDecoder("GPT2", *DecoderSizeOptions("GPT2", "nano"));
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& p : source->named_parameters()) {
    const std::string& name = p.key();
    const bool conv1d = absl::EndsWith(name, "c_attn.weight") ||
                        absl::EndsWith(name, "c_proj.weight") ||
                        absl::EndsWith(name, "c_fc.weight");
    tensors.emplace_back("transformer." + name,
                         conv1d ? p.value().detach().t() : p.value().detach());
  }
  tensors.emplace_back("transformer.h.0.attn.bias", at::ones({1, 1, 8, 8}));
  const absl::StatusOr<Checkpoint> c = Checkpoint::Open(Write(tensors));
  ASSERT_TRUE(c.ok()) << c.status();
  torch::manual_seed(2);
  DecoderLM model = MakeDecoder("GPT2", *DecoderSizeOptions("GPT2", "nano"));
  const absl::Status s = LoadWeights(*model, "GPT2/nano", *c, at::kFloat,
                                     FindDecoderRow("GPT2").value()->checkpoint);
  ASSERT_TRUE(s.ok()) << s;
  source->eval();
  model->eval();
  at::NoGradGuard no_grad;
  const at::Tensor tokens = at::randint(0, 100, {2, 7}, at::kLong);
  EXPECT_TRUE(model(tokens).equal(source(tokens)));
}

TEST(WeightsName, IsTheFileOrFolderName) {
  EXPECT_EQ(WeightsName("/m/Llama-3.2-1B/model.safetensors"), "Llama-3.2-1B");
  EXPECT_EQ(WeightsName("/m/Llama-3.1-8B/model.safetensors.index.json"), "Llama-3.1-8B");
  EXPECT_EQ(WeightsName("/m/Llama-3.1-8B/"), "Llama-3.1-8B");
  EXPECT_EQ(WeightsName("tiny.safetensors"), "tiny");
}

TEST(CheckpointSha256, IsTheFilesSha256) {
  // sha256sum of the committed nano checkpoint, computed independently.
  const std::string file = (kFixtures / "llama-nano/model.safetensors").string();
  std::string expected;
  FILE* pipe = popen(absl::StrCat("sha256sum '", file, "'").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[65] = {};
  ASSERT_EQ(fread(buffer, 1, 64, pipe), 64u);
  pclose(pipe);
  const absl::StatusOr<std::string> digest = CheckpointSha256(file);
  const absl::StatusOr<std::string> folder =
      CheckpointSha256((kFixtures / "llama-nano").string());
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(*digest, std::string(buffer, 64));
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(*folder, *digest);  // the folder's one checkpoint file
}

}  // namespace
}  // namespace ltb
