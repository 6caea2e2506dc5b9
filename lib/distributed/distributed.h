// Data-parallel training over c10d: when the torchrun environment is set
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), the ranks meet at
// a TCPStore and average gradients with all-reduce (Gloo on CPU, NCCL on
// CUDA) after every backward.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ltb {

struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Set by torchrun (TORCHELASTIC_USE_AGENT_STORE): its agent already serves
  // the store at the master address, so every rank is a client, and keys go
  // under /worker/attempt_<restart count>, as PyTorch's own workers do.
  bool agent_store = false;
  int restart_count = 0;
};

// The torchrun environment, or rank 0 of 1 when it is absent; errors on
// malformed values.
absl::StatusOr<DistEnv> ReadDistEnv();

// Gradient averaging over the ranks for one model's parameters, around each
// training step: BeforeForward() before the forward, BeforeBackward() just
// before loss.backward(), AfterBackward() after it; the gradients are the
// ranks' mean once AfterBackward() returns.
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual void BeforeForward() {}
  virtual void BeforeBackward() {}
  virtual void AfterBackward() {}
  // How: "c10d::Reducer" (buckets all-reduced while the backward runs, as
  // Python's DDP), or "all-reduce after backward".
  virtual std::string Engine() const = 0;
  // The gradient buckets of the last step.
  virtual int64_t Buckets() const = 0;
};

// DDP's bucket cap (--bucket_mb): 25 MB, with a first bucket of 1 MB.
constexpr int64_t kDefaultBucketBytes = 25 << 20;

// Python DDP's broadcast_bucket_size: the most bytes a broadcast of the
// weights (at the start) or of the buffers (before each forward) carries.
constexpr int64_t kBroadcastBucketBytes = int64_t{250} << 20;

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // The device the collectives run on (each tensor given to them is there).
  virtual c10::Device device() const = 0;
  // Averages the gradients of `params` over the ranks, in buckets of about
  // `bucket_bytes`.
  virtual void AverageGradients(const std::vector<at::Tensor>& params,
                                int64_t bucket_bytes) = 0;
  // The gradient synchronisation of a model whose parameters are `params`
  // (every rank's in the same order): c10d::Reducer where this LibTorch has
  // it, else AverageGradients after the backward.
  virtual std::unique_ptr<GradientSync> SyncGradients(std::vector<at::Tensor> params,
                                                      int64_t bucket_bytes) = 0;
  // Element-wise sum or max over the ranks, in place.
  virtual void SumInPlace(at::Tensor& t) = 0;
  virtual void MaxInPlace(at::Tensor& t) = 0;
  // Rank 0's values into every rank's `tensors`, in place: flattened into
  // buckets of one dtype of at most `bucket_bytes` (a larger tensor is a
  // bucket of its own), one broadcast a bucket, as Python DDP's
  // _broadcast_coalesced.
  virtual void Broadcast(const std::vector<at::Tensor>& tensors,
                         int64_t bucket_bytes = kBroadcastBucketBytes) = 0;
  virtual void Barrier() = 0;
  // A mark on the group's store that every rank can see: Post sets `key`,
  // Posted says at once whether it is set (no collective, no timeout: a rank
  // may poll it for as long as another takes).
  virtual void Post(const std::string& key) = 0;
  virtual bool Posted(const std::string& key) = 0;
  // Shuts the collectives down, once the run is over; later collectives
  // fail. Also done when the group is destroyed.
  virtual void Shutdown() = 0;
  // Ends the collectives at once, work queued on them included (NCCL aborts
  // its communicators), so that the ranks waiting on this one see an error
  // instead of waiting out the timeout: what a rank does before it stops
  // early.
  virtual void Abort() = 0;
};

// Joins the process group of `env` with the collectives of `device`'s
// backend (Gloo for the CPU, NCCL for CUDA). Call once per process. A rank
// waits at most `timeout` for the others, to join and in every collective,
// then the collective throws: a rank that failed or hangs stops the others
// with an error instead of holding them forever.
absl::StatusOr<std::unique_ptr<DataParallel>> JoinProcessGroup(
    const DistEnv& env, const c10::Device& device,
    std::chrono::milliseconds timeout = std::chrono::minutes(5));

// The process group bench joined at start-up, or nullptr when single-process.
DataParallel* CurrentProcessGroup();
void SetCurrentProcessGroup(std::unique_ptr<DataParallel> group);
// This process's rank and the number of ranks: 0 and 1 when single-process.
int CurrentRank();
int CurrentWorldSize();

// Flattens tensors into buckets of at most `bucket_bytes` (a tensor larger
// than that is a bucket of its own); returns index ranges [begin, end).
std::vector<std::pair<size_t, size_t>> Buckets(const std::vector<at::Tensor>& tensors,
                                               int64_t bucket_bytes);

}  // namespace ltb
