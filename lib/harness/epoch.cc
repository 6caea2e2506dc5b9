#include "harness/epoch.h"

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "harness/cuda_support.h"
#include "harness/device.h"
#include "harness/distributed.h"
#include "harness/nvml.h"
#include "harness/phases.h"
#include "harness/shards.h"
#include "harness/timer.h"

namespace ltb {

const char kTrainEpoch[] = "train_epoch";

namespace {

EpochSettings& Settings() {
  static auto* settings = new EpochSettings;
  return *settings;
}

int Rank() { return CurrentProcessGroup() ? CurrentProcessGroup()->rank() : 0; }
int World() { return CurrentProcessGroup() ? CurrentProcessGroup()->world_size() : 1; }

// One optimizer step over one batch: forward and loss under autocast, loss
// scaling for fp16, backward, gradients averaged over the ranks, step.
class Trainer {
 public:
  Trainer(const BenchSpec& spec, TrainFns fns)
      : fns_(std::move(fns)), device_(spec.device.type()), dtype_(spec.dtype) {
    optimizer_ = fns_.make_optimizer();
    if (dtype_ == c10::kHalf) scaler_.emplace();
    if (DataParallel* group = CurrentProcessGroup()) {
      // Every rank starts from rank 0's weights.
      torch::NoGradGuard no_grad;
      group->Broadcast(fns_.module->parameters());
    }
  }

  void Step(const at::Tensor& batch) {
    c10::AutoGradMode grad(true);
    optimizer_->zero_grad();
    at::Tensor loss;
    {
      AutocastGuard autocast(device_, dtype_);
      loss = fns_.loss(batch);
    }
    (scaler_ ? scaler_->Scale(loss) : loss).backward();
    const std::vector<at::Tensor> params = fns_.module->parameters();
    if (DataParallel* group = CurrentProcessGroup()) group->AverageGradients(params);
    if (scaler_ && !scaler_->UnscaleAndCheck(params)) return;  // skipped: inf or nan
    optimizer_->step();
  }

 private:
  TrainFns fns_;
  c10::DeviceType device_;
  c10::ScalarType dtype_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::optional<LossScaler> scaler_;
};

class TrainStepWorkload final : public Workload {
 public:
  TrainStepWorkload(const BenchSpec& spec, TrainFns fns, at::Tensor batch)
      : trainer_(spec, std::move(fns)), batch_(std::move(batch)) {}
  void Step() override { trainer_.Step(batch_); }

 private:
  Trainer trainer_;
  at::Tensor batch_;
};

// This rank's samples: a contiguous share of the dataset, whole batches only
// so that every rank takes the same number of steps.
struct Share {
  int64_t first = 0, count = 0;
};
Share RankShare(int64_t samples, int64_t batch) {
  const int64_t per_rank = samples / World() / batch * batch;
  return {Rank() * (samples / World()), per_rank};
}

// Batches of one epoch, produced by a background thread into a bounded
// queue: generated in memory, or read from shards (checked, then dropped
// from the page cache so the next epoch reads storage again).
class Loader {
 public:
  Loader(const BenchSpec& spec, DatasetSpec data, std::vector<std::string> shards)
      : data_(data),
        shards_(std::move(shards)),
        batch_(spec.batch),
        device_(spec.device),
        pin_(spec.device.is_cuda()),
        share_(RankShare(data.samples, spec.batch)),
        capacity_(std::max(1, GetEpochSettings().prefetch_batches)),
        drop_cache_(GetEpochSettings().drop_page_cache) {
    if (shards_.empty()) {  // memory: the whole share generated once
      std::vector<at::Tensor> parts;
      for (int64_t i = 0; i < data_.Shards(); ++i)
        parts.push_back(GenerateShard(data_, i));
      memory_ = at::cat(parts).narrow(0, share_.first, share_.count).contiguous();
      if (pin_) memory_ = memory_.pin_memory();
    }
  }

  ~Loader() { Stop(); }

  int64_t batches() const { return share_.count / batch_; }

  void StartEpoch() {
    Stop();
    std::lock_guard<std::mutex> lock(mu_);
    queue_.clear();
    error_ = nullptr;
    done_ = stop_ = false;
    thread_ = std::thread([this] { Produce(); });
  }

  // The next batch on the device, or nullopt at the end of the epoch.
  std::optional<at::Tensor> Next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || done_; });
    if (error_) std::rethrow_exception(error_);
    if (queue_.empty()) return std::nullopt;
    at::Tensor host = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    lock.unlock();
    return host.to(device_, /*non_blocking=*/pin_);
  }

 private:
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  bool Push(at::Tensor batch) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock,
             [&] { return queue_.size() < static_cast<size_t>(capacity_) || stop_; });
    if (stop_) return false;
    queue_.push_back(pin_ ? batch.pin_memory() : std::move(batch));
    cv_.notify_all();
    return true;
  }

  void Produce() {
    try {
      if (shards_.empty()) {
        for (int64_t b = 0; b < batches(); ++b) {
          if (!Push(memory_.narrow(0, b * batch_, batch_))) return;
        }
      } else {
        ProduceFromShards();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

  void ProduceFromShards() {
    const int64_t per_shard = data_.SamplesPerShard();
    const int64_t end = share_.first + share_.count;
    at::Tensor carry;  // samples left over from the previous shard
    for (int64_t s = share_.first / per_shard; s * per_shard < end; ++s) {
      absl::StatusOr<at::Tensor> tokens =
          ReadShard(shards_[s], data_.sample_tokens, data_.vocab);
      if (!tokens.ok()) throw std::runtime_error(std::string(tokens.status().message()));
      const int64_t expected = std::min(per_shard, data_.samples - s * per_shard);
      if (tokens->size(0) != expected) {
        throw std::runtime_error(absl::StrCat("bad shard ", shards_[s], ": holds ",
                                              tokens->size(0),
                                              " samples, the dataset puts ", expected,
                                              " there; rewrite it with --regenerate"));
      }
      if (drop_cache_) DropFromPageCache(shards_[s]);
      const int64_t lo = std::max<int64_t>(share_.first - s * per_shard, 0);
      const int64_t hi = std::min<int64_t>(end - s * per_shard, tokens->size(0));
      at::Tensor mine = tokens->narrow(0, lo, hi - lo);
      if (carry.defined()) mine = at::cat({carry, mine});
      int64_t used = 0;
      for (; used + batch_ <= mine.size(0); used += batch_) {
        if (!Push(mine.narrow(0, used, batch_).contiguous())) return;
      }
      carry =
          used < mine.size(0) ? mine.narrow(0, used, mine.size(0) - used) : at::Tensor();
    }
  }

  static void DropFromPageCache(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }

  DatasetSpec data_;
  std::vector<std::string> shards_;
  int64_t batch_;
  c10::Device device_;
  bool pin_;
  Share share_;
  int capacity_;
  bool drop_cache_;
  at::Tensor memory_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<at::Tensor> queue_;
  std::exception_ptr error_;
  bool done_ = false, stop_ = false;
  std::thread thread_;
};

class EpochWorkload final : public Workload {
 public:
  EpochWorkload(const BenchSpec& spec, TrainFns fns, std::unique_ptr<Loader> loader)
      : trainer_(spec, std::move(fns)),
        loader_(std::move(loader)),
        timer_(spec.device, true) {
    if (spec.device.is_cuda()) {
      gpu_util_ = GpuUtilSampler::Create(
          cuda::PciBusId(spec.device.has_index() ? spec.device.index() : 0));
    }
  }

  void Step() override {
    if (gpu_util_) gpu_util_->Start();
    timer_.Start();
    loader_->StartEpoch();
    while (std::optional<at::Tensor> batch = loader_->Next()) trainer_.Step(*batch);
    epochs_.push_back(timer_.Stop());
    if (gpu_util_) gpu_util_->Stop();
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
    if (gpu_util_ && gpu_util_->Mean() >= 0)
      c.emplace_back("gpu_util_%", gpu_util_->Mean());
    return c;
  }

 private:
  Trainer trainer_;
  std::unique_ptr<Loader> loader_;
  StepTimer timer_;
  std::vector<double> epochs_;
  std::unique_ptr<GpuUtilSampler> gpu_util_;  // CUDA with NVML only
};

}  // namespace

void SetEpochSettings(const EpochSettings& settings) { Settings() = settings; }
const EpochSettings& GetEpochSettings() { return Settings(); }

bool LossScaler::UnscaleAndCheck(const std::vector<at::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> checks;
  for (const at::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    p.grad().mul_(1.0 / scale_);
    checks.push_back(p.grad().isfinite().all());
  }
  // One device sync for the whole check, not one per parameter.
  const bool finite = checks.empty() || at::stack(checks).all().item<bool>();
  if (!finite) {
    scale_ *= 0.5;
    good_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++good_steps_ >= growth_interval_) {
    scale_ *= 2.0;
    good_steps_ = 0;
  }
  return true;
}

std::unique_ptr<Workload> MakeTrainStepWorkload(const BenchSpec& spec, TrainFns fns,
                                                const at::Tensor& batch) {
  return std::make_unique<TrainStepWorkload>(spec, std::move(fns), batch);
}

int64_t EpochSamples(const BenchSpec& spec) {
  return RankShare(GetEpochSettings().dataset_samples, spec.batch).count * World();
}

std::unique_ptr<Workload> MakeEpochWorkload(const BenchSpec& spec, TrainFns fns,
                                            const DatasetShape& shape) {
  const EpochSettings& settings = GetEpochSettings();
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
    // others wait for it, then read.
    const char* local = std::getenv("LOCAL_RANK");
    const bool writer = local == nullptr || std::string(local) == "0";
    if (writer) {
      absl::StatusOr<std::vector<std::string>> paths =
          PrepareDataset(dir, data, settings.regenerate, &wrote);
      if (!paths.ok()) throw std::runtime_error(std::string(paths.status().message()));
      shards = *paths;
    }
    if (DataParallel* group = CurrentProcessGroup()) group->Barrier();
    if (Rank() != 0) {
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
