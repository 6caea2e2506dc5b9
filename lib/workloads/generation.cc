#include "workloads/generation.h"

#include <ATen/ops/cat.h>
#include <c10/core/InferenceMode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <string>

#include "device/device.h"
#include "device/timer.h"

namespace ltb {

namespace {

// The q-quantile of `values` interpolated linearly between the two nearest
// ranks (numpy's default), 0 when empty.
double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  const double rank = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(rank);
  std::nth_element(values.begin(), values.begin() + lo, values.end());
  const double below = values[lo];
  if (lo + 1 >= values.size()) return below;
  const double above = *std::min_element(values.begin() + lo + 1, values.end());
  return below + (rank - static_cast<double>(lo)) * (above - below);
}

class GenerateWorkload final : public Workload {
 public:
  GenerateWorkload(const BenchSpec& spec, GenerateFns fns, double weight_bytes)
      : fns_(std::move(fns)),
        timeline_(spec.device, spec.sync),
        device_(spec.device),
        graphed_(spec.graph),
        batch_(spec.batch),
        prompt_(spec.prompt),
        new_tokens_(spec.new_tokens),
        depth_(spec.depth),
        weight_bytes_(weight_bytes) {}

  bool ReplaysItsOwnGraphs() const override { return true; }
  // The decode graphs' pool: what their replays write.
  int64_t UntrackedBytes() const override { return graphs_ ? graphs_->PoolBytes() : 0; }

  void Step() override {
    c10::InferenceMode guard;
    if (graphed_ && !graphs_) CaptureDecodes();
    timeline_.Clear();
    timeline_.Mark();
    at::Tensor token = fns_.prefill();
    if (graphed_) token_.copy_(token);
    timeline_.Mark();
    for (int64_t i = 1; i < new_tokens_; ++i) {
      if (graphed_) {
        graphs_->Replay(static_cast<size_t>(i - 1));
      } else {
        token = fns_.decode(token, depth_ + prompt_ + i - 1);
      }
      timeline_.Mark();
    }
    const std::vector<double> t = timeline_.Intervals();
    prefill_s_ += t.front();
    const int64_t decodes = static_cast<int64_t>(t.size()) - 1;
    const int64_t window = std::min(kGrowthWindow, decodes / 2);
    for (int64_t i = 0; i < decodes; ++i) {
      const double s = t[1 + i];
      decode_s_ += s;
      decode_steps_.push_back(s);
      if (i < window) early_s_ += s;
      if (i >= decodes - window) late_s_ += s;
    }
    ++steps_;
  }

  at::Tensor Evaluate() override {
    c10::InferenceMode guard;
    if (graphed_ && !graphs_) CaptureDecodes();
    std::vector<at::Tensor> tokens = {fns_.prefill()};
    if (graphed_) token_.copy_(tokens.back());
    for (int64_t i = 1; i < new_tokens_; ++i) {
      if (graphed_) {
        graphs_->Replay(static_cast<size_t>(i - 1));
        tokens.push_back(token_.clone());
      } else {
        tokens.push_back(fns_.decode(tokens.back(), depth_ + prompt_ + i - 1));
      }
    }
    return at::cat(tokens, 1);  // (B, N)
  }

  at::Tensor Prompt() const override { return fns_.prompt; }

  SlotDecoder* Slots() override { return fns_.slots.get(); }

  at::Tensor Logits() override {
    return fns_.prompt.defined() ? Score(fns_.prompt) : at::Tensor();
  }

  at::Tensor Score(const at::Tensor& tokens) override {
    if (!fns_.score) return {};
    c10::InferenceMode guard;
    return fns_.score(tokens);
  }

  std::vector<std::pair<std::string, at::Tensor>> Tensors() const override {
    std::vector<std::pair<std::string, at::Tensor>> out = ModuleTensors(*fns_.module);
    if (fns_.cache) {
      const std::vector<at::Tensor> cache = fns_.cache();
      for (size_t i = 0; i < cache.size(); ++i) {
        out.emplace_back("cache:" + std::to_string(i), cache[i]);
      }
    }
    return out;
  }

  void ResetStats() override {
    prefill_s_ = decode_s_ = early_s_ = late_s_ = 0;
    decode_steps_.clear();
    steps_ = 0;
  }

  std::vector<std::pair<std::string, double>> Counters() const override {
    if (steps_ == 0) return {};
    const double prefill = prefill_s_ / steps_;
    std::vector<std::pair<std::string, double>> c = {
        {"ttft_ms", prefill * 1e3},
        {"pp_tok/s", batch_ * prompt_ / prefill},
    };
    if (fns_.cache) {
      double bytes = 0;
      for (const at::Tensor& t : fns_.cache()) bytes += static_cast<double>(t.nbytes());
      c.emplace_back("kv_cache_bytes", bytes);
    }
    // What a decode step reads of the weights (packed quantised ones, with
    // their scales and zeros, under --quant).
    c.emplace_back("weight_bytes", weight_bytes_);
    if (new_tokens_ > 1) {
      const double decode = decode_s_ / steps_;
      const double decodes = static_cast<double>(new_tokens_ - 1);
      c.emplace_back("tpot_ms", decode / decodes * 1e3);
      for (const auto& [name, q] : {std::pair<const char*, double>{"tpot_p50_ms", 0.5},
                                    {"tpot_p90_ms", 0.9},
                                    {"tpot_p99_ms", 0.99}}) {
        c.emplace_back(name, Quantile(decode_steps_, q) * 1e3);
      }
      c.emplace_back("tg_tok/s", batch_ * decodes / decode);
      c.emplace_back("weight_GB/s", weight_bytes_ * decodes / decode / 1e9);
      // Step i (1..N-1) feeds the token at depth + prompt + i - 1, which
      // attends to depth + prompt + i positions.
      // Only where the cache's reads are counted: elsewhere mbu is the
      // weights' alone, and a read_GB/s equal to weight_GB/s would claim more.
      if (fns_.cache_read_bytes) {
        double cache_bytes = 0;
        for (int64_t i = 1; i < new_tokens_; ++i)
          cache_bytes += fns_.cache_read_bytes(depth_ + prompt_ + i);
        c.emplace_back("read_GB/s",
                       (weight_bytes_ * decodes + cache_bytes) / decode / 1e9);
      }
      if (early_s_ > 0 && late_s_ > 0) {
        c.emplace_back("tpot_growth_%", (late_s_ / early_s_ - 1) * 100);
      }
    }
    return c;
  }

 private:
  // --cuda_graphs: one graph per decode position (each attends over its own
  // number of cached positions), all reading and writing token_. A prefill
  // runs first so that every cache the decode steps read exists.
  void CaptureDecodes() {
    graphs_ = BackendOf(device_).MakeGraphs(device_);
    token_ = fns_.prefill().clone();
    for (int64_t i = 1; i < new_tokens_; ++i) {
      const int64_t position = depth_ + prompt_ + i - 1;
      graphs_->Capture([this, position] { token_.copy_(fns_.decode(token_, position)); });
    }
  }

  GenerateFns fns_;
  Timeline timeline_;
  c10::Device device_;
  bool graphed_;
  std::unique_ptr<StepGraphs> graphs_;
  at::Tensor token_;  // graphs: the token each decode graph reads and replaces
  int64_t batch_, prompt_, new_tokens_, depth_;
  double weight_bytes_;
  double prefill_s_ = 0, decode_s_ = 0, early_s_ = 0, late_s_ = 0;
  std::vector<double> decode_steps_;  // every measured decode step, seconds
  int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<Workload> MakeGenerateWorkload(const BenchSpec& spec, GenerateFns fns,
                                               double weight_bytes) {
  return std::make_unique<GenerateWorkload>(spec, std::move(fns), weight_bytes);
}

const std::vector<std::string>& GenerationCounterNames() {
  static const auto* names = new std::vector<std::string>{
      "ttft_ms",     "pp_tok/s",    "weight_bytes", "tpot_ms",    "tpot_p50_ms",
      "tpot_p90_ms", "tpot_p99_ms", "tg_tok/s",     "weight_GB/s"};
  return *names;
}

}  // namespace ltb
