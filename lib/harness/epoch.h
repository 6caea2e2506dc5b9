// Training over a dataset: the train_step and train_epoch phases of the
// families that train on token batches (EncDec, Transformer), with mixed
// precision, dynamic loss scaling for fp16, data-parallel gradient averaging,
// and batches from memory or from shards on disk read by a background loader.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/family.h"

namespace ltb {

extern const char kTrainEpoch[];

struct TrainFns {
  std::shared_ptr<torch::nn::Module> module;
  // The scalar loss of a batch of samples (B, sample_tokens) on the device.
  std::function<at::Tensor(const at::Tensor& batch)> loss;
  std::function<std::unique_ptr<torch::optim::Optimizer>()> make_optimizer;
};

struct DatasetShape {
  int64_t sample_tokens = 0;  // tokens per sample
  int64_t vocab = 0;
};

// How epochs get their data (--data, --data_dir, --dataset_samples, ...).
struct EpochSettings {
  std::string data = "memory";  // memory or disk
  std::string data_dir;         // disk: where the shards live
  int64_t dataset_samples = 128;
  int64_t shard_mb = 128;
  bool regenerate = false;
  bool drop_page_cache = true;  // read shards from storage every epoch
  int prefetch_batches = 4;
  uint64_t seed = 0;
};
void SetEpochSettings(const EpochSettings& settings);
const EpochSettings& GetEpochSettings();

// GradScaler's dynamic loss scaling: multiply the loss by `scale`; when a
// gradient is inf or nan, skip the step and halve the scale; after
// `growth_interval` good steps in a row, double it.
class LossScaler {
 public:
  explicit LossScaler(double scale = 65536.0, int growth_interval = 2000)
      : scale_(scale), growth_interval_(growth_interval) {}
  at::Tensor Scale(const at::Tensor& loss) const { return loss * scale_; }
  // Unscales the gradients; returns false (and backs off) when any is not
  // finite, in which case the caller skips the optimizer step.
  bool UnscaleAndCheck(const std::vector<at::Tensor>& params);
  double scale() const { return scale_; }
  int64_t skipped() const { return skipped_; }

 private:
  double scale_;
  int growth_interval_;
  int good_steps_ = 0;
  int64_t skipped_ = 0;
};

std::unique_ptr<Workload> MakeTrainStepWorkload(const BenchSpec& spec, TrainFns fns,
                                                const at::Tensor& batch);
std::unique_ptr<Workload> MakeEpochWorkload(const BenchSpec& spec, TrainFns fns,
                                            const DatasetShape& shape);

// Samples per epoch on this rank and in total, for the plan.
int64_t EpochSamples(const BenchSpec& spec);

}  // namespace ltb
