#include "workloads/epoch.h"

#include <optional>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "device/backend.h"
#include "device/timer.h"
#include "distributed/distributed.h"

namespace ltb {
namespace {

// Samples gpu_util_% needs (10 samples: a second of measured epochs).
constexpr long kMinUtilSamples = 10;

class EpochWorkload final : public Workload {
 public:
  EpochWorkload(const BenchSpec& spec, TrainFns fns, std::unique_ptr<Loader> loader)
      : trainer_(spec, std::move(fns)),
        loader_(std::move(loader)),
        timer_(spec.device, true) {
    gpu_util_ = BackendOf(spec.device).MakeUtilSampler(spec.device);
  }

  void Step() override {
    timer_.Start();
    loader_->StartEpoch();
    while (std::optional<at::Tensor> batch = loader_->Next()) trainer_.Step(*batch);
    epochs_.push_back(timer_.Stop());
  }

  // The sampler's thread starts, and is joined (which can wait out its
  // sampling interval), outside the timed epochs.
  void BeginMeasurement() override {
    skipped_from_ = trainer_.skipped();
    if (gpu_util_) gpu_util_->Start();
  }
  void EndMeasurement() override {
    skipped_ = trainer_.skipped() - skipped_from_;
    if (gpu_util_) gpu_util_->Stop();
  }

  std::vector<std::pair<std::string, at::Tensor>> Tensors() const override {
    return ModuleTensors(trainer_.module());
  }

  std::string Caveat() const override {
    const std::string skipped = Trainer::SkippedCaveat(skipped_);
    const std::string loader = loader_->caveat();
    return loader.empty() || skipped.empty() ? loader + skipped
                                             : absl::StrCat(loader, "; ", skipped);
  }

  void ResetStats() override {
    epochs_.clear();
    if (gpu_util_) gpu_util_->Reset();
  }

  std::vector<std::pair<std::string, double>> Counters() const override {
    std::vector<std::pair<std::string, double>> c;
    double total = 0;
    for (size_t i = 0; i < epochs_.size(); ++i) {
      c.emplace_back(absl::StrCat("epoch_", i + 1, "_s"), epochs_[i]);
      total += epochs_[i];
    }
    if (!epochs_.empty()) c.emplace_back("epoch_s", total / epochs_.size());
    // A mean of a few 100 ms samples says little: an epoch of milliseconds
    // has none or one.
    if (gpu_util_ && gpu_util_->Samples() >= kMinUtilSamples && gpu_util_->Mean() >= 0)
      c.emplace_back("gpu_util_%", gpu_util_->Mean());
    if (trainer_.sync() != nullptr)
      c.emplace_back("grad_buckets", static_cast<double>(trainer_.sync()->Buckets()));
    return c;
  }

 private:
  Trainer trainer_;
  std::unique_ptr<Loader> loader_;
  StepTimer timer_;
  std::vector<double> epochs_;
  std::unique_ptr<UtilSampler> gpu_util_;   // where the device's backend has one
  int64_t skipped_from_ = 0, skipped_ = 0;  // the scaler's, over the measured epochs
};

}  // namespace

int64_t EpochSamples(const BenchSpec& spec) {
  return RankShare(spec.epochs.dataset_samples, spec.batch).count * CurrentWorldSize();
}

void AddEpochData(const BenchSpec& spec, int64_t sample_tokens, int64_t params,
                  MemoryEstimate* m) {
  if (spec.iterations != Iterations::kEpochs || spec.epochs.data != "memory") return;
  const int64_t bytes = 2 * spec.epochs.dataset_samples * sample_tokens *
                        static_cast<int64_t>(sizeof(int64_t));
  if (BackendOf(spec.device).Caps().host) {
    m->activations += bytes;
  } else {
    m->host_build = (m->host_build > 0 ? m->host_build : params * 4) + bytes;
  }
}

std::unique_ptr<Workload> MakeEpochWorkload(const BenchSpec& spec, TrainFns fns,
                                            const DatasetShape& shape) {
  const EpochSettings& settings = spec.epochs;
  DatasetSpec data;
  data.samples = settings.dataset_samples;
  data.sample_tokens = shape.sample_tokens;
  data.vocab = shape.vocab;
  data.shard_mb = settings.shard_mb;
  data.seed = settings.seed;
  std::vector<std::string> shards;
  if (settings.data == "disk") {
    const std::string dir =
        absl::StrCat(settings.data_dir, "/", spec.family, "-", data.sample_tokens, "x",
                     data.samples, "-v", data.vocab);
    bool wrote = false;
    // One process per machine writes (the data directory may be local); the
    // others wait for it, then read. A process alone writes whatever its
    // LOCAL_RANK says: no other would.
    const char* local = std::getenv("LOCAL_RANK");
    DataParallel* group = CurrentProcessGroup();
    const bool writer = group == nullptr || local == nullptr || std::string(local) == "0";
    if (writer) {
      absl::StatusOr<std::vector<std::string>> paths =
          PrepareDataset(dir, data, settings.regenerate, &wrote);
      if (!paths.ok()) throw std::runtime_error(std::string(paths.status().message()));
      shards = *paths;
    }
    if (group != nullptr) group->Barrier();
    if (!writer) {
      absl::StatusOr<std::vector<std::string>> paths =
          PrepareDataset(dir, data, false, &wrote);
      if (!paths.ok()) throw std::runtime_error(std::string(paths.status().message()));
      shards = *paths;
    }
  }
  auto loader = std::make_unique<Loader>(spec, data, shards);
  if (loader->batches() == 0) {
    throw std::runtime_error(absl::StrCat("--dataset_samples=", data.samples,
                                          " gives no whole batch of ", spec.batch,
                                          " per rank"));
  }
  return std::make_unique<EpochWorkload>(spec, std::move(fns), std::move(loader));
}

}  // namespace ltb
