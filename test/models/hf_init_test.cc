// InitLikeHuggingFace (models/decoder.h): the weights of a seed, whatever
// the threads, chunk by chunk.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>

#include "models/decoder.h"
#include "models/decoder_family.h"

namespace ltb {
namespace {

// Every parameter of the module `build` makes from seed 3, on `threads`
// intra-op threads.
std::map<std::string, at::Tensor> WeightsOnThreads(
    int threads, const std::function<std::shared_ptr<torch::nn::Module>()>& build) {
  const int before = at::get_num_threads();
  at::set_num_threads(threads);
  torch::manual_seed(3);
  std::map<std::string, at::Tensor> weights;
  for (const auto& p : build()->named_parameters()) weights[p.key()] = p.value().detach();
  at::set_num_threads(before);
  return weights;
}

// Matrices of several chunks (the last one partial) and one too small for
// normal_'s vectorised path, beside a bias and a norm.
struct ChunkedImpl : torch::nn::Module {
  ChunkedImpl() {
    register_parameter("big_weight", torch::empty({3, 2 * kInitChunk / 3 + 7}));
    register_parameter("big_bias", torch::empty({5}));
    register_parameter("small_weight", torch::empty({3, 5}));
    register_parameter("norm_weight", torch::empty({5}));
    InitLikeHuggingFace(*this, 0.02, 2);
  }
};

// The weights of a seed are the same whether drawn on one thread or
// several: each chunk has its own generator, seeded from the seed and the
// chunk's number alone.
TEST(InitLikeHuggingFace, TheWeightsOfASeedDoNotDependOnTheThreads) {
  const std::map<std::string, std::function<std::shared_ptr<torch::nn::Module>()>>
      models = {
          {"GPT2",
           [] { return MakeDecoder("GPT2", *DecoderSizeOptions("GPT2", "nano")).ptr(); }},
          {"Llama",
           [] {
             return MakeDecoder("Llama", *DecoderSizeOptions("Llama", "nano")).ptr();
           }},
          {"chunked", [] { return std::make_shared<ChunkedImpl>(); }},
      };
  for (const auto& [name, build] : models) {
    const auto one = WeightsOnThreads(1, build);
    for (const int threads : {2, 3}) {
      const auto many = WeightsOnThreads(threads, build);
      ASSERT_EQ(many.size(), one.size()) << name;
      for (const auto& [param, w] : one) {
        EXPECT_TRUE(torch::equal(many.at(param), w))
            << name << " " << param << " on " << threads << " threads";
      }
    }
  }
}

TEST(InitLikeHuggingFace, EachChunkDrawsItsOwnValues) {
  torch::manual_seed(3);
  ChunkedImpl model;
  const at::Tensor big = model.named_parameters()["big_weight"].detach().view({-1});
  ASSERT_EQ(big.numel(), 2 * kInitChunk + 19);  // three chunks, the last of 19
  const at::Tensor first = big.narrow(0, 0, 1000);
  EXPECT_FALSE(torch::equal(first, big.narrow(0, kInitChunk, 1000)));
  EXPECT_FALSE(torch::equal(first.narrow(0, 0, 19), big.narrow(0, 2 * kInitChunk, 19)));
  EXPECT_NEAR(big.std().item<double>(), 0.02, 0.001);
  torch::manual_seed(4);
  EXPECT_FALSE(torch::equal(ChunkedImpl().named_parameters()["big_weight"].detach(),
                            model.named_parameters()["big_weight"].detach()));
}

TEST(InitLikeHuggingFace, NoTwoChunksOfAModelShareASeed) {
  for (const uint64_t base : {uint64_t{0}, uint64_t{0xfffffffffffffff0u}}) {
    std::set<uint32_t> seeds;
    for (int64_t k = 0; k < 100000; ++k) seeds.insert(InitChunkSeed(base, k));
    EXPECT_EQ(seeds.size(), 100000u) << base;
  }
}

}  // namespace
}  // namespace ltb
