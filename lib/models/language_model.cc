#include "models/language_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "models/decoder_generation.h"
#include "workloads/epoch.h"
#include "workloads/optimizers.h"
#include "workloads/phases.h"

namespace ltb {

std::unique_ptr<Workload> BuildLanguageModel(
    const BenchSpec& s, std::shared_ptr<torch::nn::Module> module,
    std::function<at::Tensor(const at::Tensor&)> forward, int64_t vocab) {
  PrepareModel(*module, s);
  // Cross-entropy of the logits of each position against the next token.
  const auto loss = [forward, vocab](const at::Tensor& batch) {
    const int64_t t = batch.size(1) - 1;
    const at::Tensor logits = forward(batch.narrow(1, 0, t));  // (B, T, V)
    return torch::nn::functional::cross_entropy(
        logits.reshape({-1, vocab}).to(at::kFloat), batch.narrow(1, 1, t).reshape({-1}));
  };
  const auto adamw = [module, device = s.device]() {
    return MakeAdamW(device, module->parameters(), torch::optim::AdamWOptions(1e-4));
  };
  const at::Tensor ids = torch::randint(0, vocab, {s.batch, s.seq + 1},
                                        torch::dtype(torch::kLong).device(s.device));
  if (s.data_parallel) {  // train_step, train_epoch
    TrainFns train;
    train.module = module;
    train.loss = loss;
    train.make_optimizer = adamw;
    if (s.iterations == Iterations::kEpochs) {
      return MakeEpochWorkload(s, std::move(train), DatasetShape{s.seq + 1, vocab});
    }
    return MakeTrainStepWorkload(s, std::move(train), ids);
  }
  ModelFns fns;
  fns.module = module;
  const at::Tensor inputs = ids.narrow(1, 0, s.seq).contiguous();
  const at::Tensor targets = ids.narrow(1, 1, s.seq).contiguous();
  fns.forward = [forward, inputs]() { return forward(inputs); };
  fns.loss = [targets, vocab](const at::Tensor& logits) {
    return torch::nn::functional::cross_entropy(
        logits.reshape({-1, vocab}).to(at::kFloat), targets.reshape({-1}));
  };
  fns.make_optimizer = adamw;
  return MakePhaseWorkload(s, std::move(fns));
}

uint32_t InitChunkSeed(uint64_t base, int64_t k) {
  uint32_t h = static_cast<uint32_t>(base + static_cast<uint64_t>(k));
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

void InitLikeHuggingFace(torch::nn::Module& module, double std, int64_t layers,
                         const std::vector<std::string>& residual) {
  c10::NoGradGuard no_grad;
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& p : module.named_parameters()) params.emplace_back(p.key(), p.value());
  std::sort(params.begin(), params.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const double residual_std = std / std::sqrt(2.0 * static_cast<double>(layers));
  // As a 64-bit integer's random_ draws it: the same call in Python.
  const auto base =
      static_cast<uint64_t>(at::empty({}, at::kLong).random_().item<int64_t>());
  struct Chunk {
    at::Tensor elements;  // a slice of a flattened matrix, detached
    double stddev;
  };
  std::vector<Chunk> chunks;
  for (auto& [name, p] : params) {
    if (p.dim() < 2) {  // a bias, or a norm's weight
      if (absl::EndsWith(name, "bias")) {
        p.zero_();
      } else {
        p.fill_(1);
      }
      continue;
    }
    TORCH_CHECK(p.is_contiguous(), name, " is not contiguous");
    const bool scaled =
        std::any_of(residual.begin(), residual.end(),
                    [&](const std::string& r) { return absl::EndsWith(name, r); });
    // Detached: the worker threads below run with grad mode on.
    const at::Tensor flat = p.detach().view({-1});
    for (int64_t start = 0; start < flat.numel(); start += kInitChunk) {
      chunks.push_back({flat.narrow(0, start, std::min(kInitChunk, flat.numel() - start)),
                        scaled ? residual_std : std});
    }
  }
  // On the run's intra-op threads, each taking the next chunk not yet
  // taken. Threads of its own: at::parallel_for would run inline here, in a
  // file built without OpenMP.
  const int64_t count = static_cast<int64_t>(chunks.size());
  std::atomic<int64_t> next{0};
  std::mutex mutex;
  std::exception_ptr error;
  const auto draw = [&] {
    try {
      for (int64_t k = next++; k < count; k = next++) {
        at::Generator generator =
            at::make_generator<at::CPUGeneratorImpl>(InitChunkSeed(base, k));
        chunks[k].elements.normal_(0, chunks[k].stddev, generator);
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      next = count;
    }
  };
  std::vector<std::thread> helpers;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), count);
  for (int64_t t = 1; t < threads; ++t) helpers.emplace_back(draw);
  draw();
  for (std::thread& t : helpers) t.join();
  if (error) std::rethrow_exception(error);
}

PackableLinear UndrawnLinear(const torch::nn::LinearOptions& options) {
  // Built with no output features: its initialisation fills no element and
  // draws nothing; then the parameters take their shapes, uninitialised.
  PackableLinear linear(
      torch::nn::LinearOptions(options.in_features(), 0).bias(options.bias()));
  c10::NoGradGuard no_grad;
  linear->options = options;
  const at::TensorOptions like = linear->weight.options();
  linear->weight.set_data(
      at::empty({options.out_features(), options.in_features()}, like));
  if (options.bias()) linear->bias.set_data(at::empty({options.out_features()}, like));
  return linear;
}

torch::nn::Embedding UndrawnEmbedding(int64_t count, int64_t dim) {
  // Given its weight, an embedding keeps it rather than drawing one.
  return torch::nn::Embedding(
      torch::nn::EmbeddingOptions(count, dim)._weight(at::empty({count, dim})));
}

Family DecoderFamily(std::string name, std::vector<std::string> sizes) {
  Family f;
  f.name = std::move(name);
  f.sizes = std::move(sizes);
  f.phases = {ForwardPhase(), ForwardBackwardPhase(), TrainStepPhase(), GeneratePhase()};
  f.packs_cpu_linears = true;
  f.quantizes = true;
  f.default_batch = 1;
  f.generates_at_depth = true;
  f.loads_weights = true;
  f.constants = {{"depth_chunk", static_cast<double>(kDepthChunk)}};
  return f;
}

absl::Status CheckGenerateShape(const BenchSpec& s, int64_t positions,
                                const std::string& limit) {
  if (s.batch <= 0 || s.prompt <= 0 || s.new_tokens <= 0) {
    return absl::InvalidArgumentError("batch, prompt and new tokens must be positive");
  }
  if (s.depth + s.prompt + s.new_tokens > positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "depth ", s.depth, " + prompt ", s.prompt, " + new tokens ", s.new_tokens, " = ",
        s.depth + s.prompt + s.new_tokens, " positions, but ", limit, " ", positions,
        ": lower --depth, --prompt or --new_tokens"));
  }
  return absl::OkStatus();
}

}  // namespace ltb
