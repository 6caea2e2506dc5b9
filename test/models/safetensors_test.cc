#include "models/safetensors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace ltb {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) /
           ("ltb_safetensors_" + std::to_string(::getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a file of `header` (its JSON as given) and `data`; `length`
  // overrides the header length field.
  std::string Write(const std::string& name, const std::string& header,
                    const std::string& data, int64_t length = -1) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    uint64_t n = length >= 0 ? static_cast<uint64_t>(length) : header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header << data;
    return path;
  }

  // A valid file: "a" F32 (2, 3) = 0..5, "b" BF16 (2) = 1.5, -2.
  std::string WriteValid(const std::string& name = "model.safetensors") {
    const at::Tensor a = at::arange(6, at::kFloat);
    const at::Tensor b = at::tensor({1.5f, -2.0f}).to(at::kBFloat16);
    std::string data(reinterpret_cast<const char*>(a.data_ptr()), 24);
    data.append(reinterpret_cast<const char*>(b.data_ptr()), 4);
    nlohmann::json h = {
        {"__metadata__", {{"format", "pt"}}},
        {"a", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
        {"b", {{"dtype", "BF16"}, {"shape", {2}}, {"data_offsets", {24, 28}}}}};
    return Write(name, h.dump(), data);
  }

  std::string Error(const std::string& path) {
    const absl::StatusOr<Checkpoint> c = Checkpoint::Open(path);
    EXPECT_FALSE(c.ok()) << path;
    return c.ok() ? "" : std::string(c.status().message());
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, TensorsLoadByNameMappedOrConverted) {
  const absl::StatusOr<Checkpoint> c = Checkpoint::Open(WriteValid());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->entries().size(), 2u);
  EXPECT_TRUE(c->Mapped("a", at::kFloat));
  EXPECT_FALSE(c->Mapped("b", at::kFloat));
  const at::Tensor a = c->Load("a", at::kFloat).value();
  EXPECT_TRUE(at::equal(a, at::arange(6, at::kFloat).reshape({2, 3})));
  const at::Tensor b = c->Load("b", at::kFloat).value();
  EXPECT_EQ(b.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(b, at::tensor({1.5f, -2.0f})));
  // A mapped tensor written in place changes neither the file nor a new load.
  at::Tensor w = c->Load("a", at::kFloat).value();
  w.add_(1);
  EXPECT_TRUE(at::equal(Checkpoint::Open(c->files()[0])->Load("a", at::kFloat).value(),
                        at::arange(6, at::kFloat).reshape({2, 3})));
  const absl::StatusOr<at::Tensor> missing = c->Load("c", at::kFloat);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no tensor named 'c'"), std::string::npos);
  // A folder with model.safetensors opens the same.
  EXPECT_TRUE(Checkpoint::Open(dir_.string()).ok());
}

TEST_F(SafetensorsTest, EachBadFileIsOneSentenceNamingItAndTheTensor) {
  const std::string f32 =
      R"("t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  const std::string eight(8, '\0');
  const struct {
    std::string name, header, data;
    int64_t length;
    std::string want;
  } cases[] = {
      {"short", "", "", -2, "fewer than the 8 of its header length"},
      {"cut", "{" + f32 + "}", eight, 1000, "but the file has only"},
      {"huge", "{}", "", 200'000'000, "over the format's limit of 100000000"},
      {"notjson", "{nope", "", -1, "its header is not JSON"},
      {"array", "[1, 2]", "", -1, "its header is not a JSON object"},
      {"dtype", R"({"t": {"dtype": "F8", "shape": [2], "data_offsets": [0, 2]}})", "xx",
       -1, "tensor 't' has dtype F8; readable: "},
      {"outside", "{" + f32 + "}", "1234", -1,
       "tensor 't' lies at [0, 8), outside the 4 bytes"},
      {"size", R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", eight,
       -1, "tensor 't' holds 8 bytes, but its shape and F32 need 12"},
      {"overlap",
       R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "u": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       eight, -1, "two tensors overlap at byte 4"},
      {"gap", R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", eight,
       -1, "bytes 0 to 4 of the data are no tensor's"},
      {"tail", R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", eight,
       -1, "bytes 4 to 8 of the data are no tensor's"},
      {"fields", R"({"t": {"dtype": "F32"}})", "", -1,
       "tensor 't' lacks dtype, shape or"},
      {"hugeoffset",
       R"({"t": {"dtype": "F32", "shape": [2],
                 "data_offsets": [9223372036854775808, 18446744073709551615]}})",
       eight, -1,
       "lies at [9223372036854775808, 18446744073709551615), outside the 8 bytes"},
      {"hugeshape",
       R"({"t": {"dtype": "F32", "shape": [18446744073709551615, 2], "data_offsets": [0, 8]}})",
       eight, -1, "tensor 't' is too large"},
  };
  for (const auto& c : cases) {
    std::string path;
    if (c.length == -2) {
      path = (dir_ / c.name).string();
      std::ofstream(path) << "abc";
    } else {
      path = Write(c.name, c.header, c.data, c.length);
    }
    const std::string message = Error(path);
    EXPECT_NE(message.find(path + " is not a valid safetensors file: "),
              std::string::npos)
        << c.name << ": " << message;
    EXPECT_NE(message.find(c.want), std::string::npos) << c.name << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << c.name;
  }
  EXPECT_NE(Error((dir_ / "none.safetensors").string()).find("no such checkpoint"),
            std::string::npos);
}

TEST_F(SafetensorsTest, AnIndexedFolderOfShardsLoadsEveryTensorFromItsShard) {
  const at::Tensor x = at::full({4}, 3.0f), y = at::full({2}, -1.0f);
  const auto shard = [&](const std::string& name, const std::string& tensor,
                         const at::Tensor& t) {
    nlohmann::json h = {{tensor,
                         {{"dtype", "F32"},
                          {"shape", {t.size(0)}},
                          {"data_offsets", {0, t.numel() * 4}}}}};
    Write(name, h.dump(),
          std::string(reinterpret_cast<const char*>(t.data_ptr()), t.numel() * 4));
  };
  shard("model-00001-of-00002.safetensors", "x", x);
  shard("model-00002-of-00002.safetensors", "y", y);
  const auto index = [&](const nlohmann::json& map) {
    std::ofstream((dir_ / "model.safetensors.index.json").string())
        << nlohmann::json({{"metadata", {{"total_size", 24}}}, {"weight_map", map}})
               .dump();
  };
  index({{"x", "model-00001-of-00002.safetensors"},
         {"y", "model-00002-of-00002.safetensors"}});
  const absl::StatusOr<Checkpoint> c = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->files().size(), 2u);
  EXPECT_TRUE(at::equal(c->Load("x", at::kFloat).value(), x));
  EXPECT_TRUE(at::equal(c->Load("y", at::kFloat).value(), y));
  // The index names a tensor its shard lacks; a shard holds one the index
  // places elsewhere; the index is not JSON.
  index({{"x", "model-00001-of-00002.safetensors"},
         {"y", "model-00002-of-00002.safetensors"},
         {"z", "model-00002-of-00002.safetensors"}});
  EXPECT_NE(Error(dir_.string())
                .find("places tensor 'z' in model-00002-of-00002.safetensors, "
                      "which lacks it"),
            std::string::npos);
  index({{"x", "model-00002-of-00002.safetensors"},
         {"y", "model-00001-of-00002.safetensors"}});
  EXPECT_NE(
      Error(dir_.string())
          .find("model-00001-of-00002.safetensors holds tensor 'x', which the index "
                "places in model-00002-of-00002.safetensors"),
      std::string::npos);
  index({{"x", "../model-00001-of-00002.safetensors"}});
  EXPECT_NE(Error(dir_.string()).find("which is not a file name beside the index"),
            std::string::npos);
  std::ofstream((dir_ / "model.safetensors.index.json").string()) << "{";
  EXPECT_NE(Error(dir_.string()).find("is not JSON"), std::string::npos);
}

}  // namespace
}  // namespace ltb
