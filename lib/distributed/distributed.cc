#include "distributed/distributed.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <unordered_map>

#include "base/torch_compat.h"
#if LTB_HAS_C10D_BACKEND
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if LTB_HAS_REDUCER
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#endif

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "device/backend.h"

namespace ltb {
namespace {

// The backend's shutdown() where this LibTorch has one (2.3 and later);
// older ones close their connections when destroyed.
template <typename B>
auto ShutDown(B& backend, int) -> decltype(backend.shutdown(), void()) {
  backend.shutdown();
}
template <typename B>
void ShutDown(B&, long) {}
// The backend's abort() where it has one: ends its collectives at once, work
// queued on them included (NCCL aborts its communicators).
template <typename B>
auto AbortNow(B& backend, int) -> decltype(backend.abort(), void()) {
  backend.abort();
}
template <typename B>
void AbortNow(B& backend, long) {
  ShutDown(backend, 0);
}

std::unique_ptr<DataParallel>& Current() {
  static auto* group = new std::unique_ptr<DataParallel>();
  return *group;
}

// The simple path: after the whole backward, the gradients all-reduced in
// buckets of at most `bucket_bytes`, one after another.
class AfterBackwardSync final : public GradientSync {
 public:
  AfterBackwardSync(DataParallel* group, std::vector<at::Tensor> params,
                    int64_t bucket_bytes)
      : group_(group), params_(std::move(params)), bucket_bytes_(bucket_bytes) {}
  void AfterBackward() override {
    std::vector<at::Tensor> grads;
    for (const at::Tensor& p : params_) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    buckets_ = static_cast<int64_t>(ltb::Buckets(grads, bucket_bytes_).size());
    group_->AverageGradients(params_, bucket_bytes_);
  }
  std::string Engine() const override { return "all-reduce after backward"; }
  int64_t Buckets() const override { return buckets_; }

 private:
  DataParallel* group_;
  std::vector<at::Tensor> params_;
  int64_t bucket_bytes_;
  int64_t buckets_ = 0;
};

#if LTB_HAS_REDUCER
// A c10d::Reducer as Python's DistributedDataParallel makes it by default:
// dense gradients, every parameter used, gradients as views into the
// buckets, a first bucket of at most 1 MB. The constructor's arguments are
// those of this LibTorch's version (torch_compat.h).
std::unique_ptr<c10d::Reducer> MakeReducer(std::vector<at::Tensor> params,
                                           std::vector<std::vector<size_t>> buckets,
                                           std::vector<size_t> per_bucket,
                                           c10::intrusive_ptr<c10d::ProcessGroup> group,
                                           int64_t bucket_bytes) {
  std::vector<bool> sparse(params.size(), false);
  const bool find_unused = false, as_view = true;
  const int64_t first_bytes =
      std::min<int64_t>(c10d::kDefaultFirstBucketBytes, bucket_bytes);
#if LTB_TORCH_AT_LEAST(2, 7)
  (void)per_bucket;
#endif
#if LTB_TORCH_AT_LEAST(2, 11)
  return std::make_unique<c10d::Reducer>(
      std::move(params), std::move(buckets), std::move(group), std::move(sparse),
      bucket_bytes, find_unused, as_view, std::unordered_map<size_t, std::string>{},
      first_bytes, /*skip_all_reduce_unused_params=*/false,
      /*use_python_reducer=*/false, /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
#elif LTB_TORCH_AT_LEAST(2, 8)
  return std::make_unique<c10d::Reducer>(
      std::move(params), std::move(buckets), std::move(group), std::move(sparse),
      bucket_bytes, find_unused, as_view, std::unordered_map<size_t, std::string>{},
      first_bytes, /*skip_all_reduce_unused_params=*/false,
      /*use_python_reducer=*/false);
#elif LTB_TORCH_AT_LEAST(2, 7)
  return std::make_unique<c10d::Reducer>(
      std::move(params), std::move(buckets), std::move(group), std::move(sparse),
      bucket_bytes, find_unused, as_view, std::unordered_map<size_t, std::string>{},
      first_bytes);
#else
  return std::make_unique<c10d::Reducer>(
      std::move(params), std::move(buckets), std::move(per_bucket), std::move(group),
      std::move(sparse), bucket_bytes, find_unused, as_view,
      std::unordered_map<size_t, std::string>{}, first_bytes);
#endif
}

// Python's DistributedDataParallel engine with its defaults: one bucket for
// the first step, then buckets rebuilt in the order the backward produced
// the gradients (a first one of 1 MB, then `bucket_bytes`), each all-reduced
// by an autograd hook as soon as it is full, while the backward goes on;
// gradients are views into the buckets.
class ReducerSync final : public GradientSync {
 public:
  ReducerSync(std::vector<at::Tensor> params,
              c10::intrusive_ptr<c10d::ProcessGroup> group, int64_t bucket_bytes) {
    std::vector<size_t> limits = {std::numeric_limits<size_t>::max()};
    auto [buckets, per_bucket] = c10d::compute_bucket_assignment_by_size(params, limits);
    std::reverse(buckets.begin(), buckets.end());
    std::reverse(per_bucket.begin(), per_bucket.end());
    reducer_ = MakeReducer(std::move(params), std::move(buckets), std::move(per_bucket),
                           std::move(group), bucket_bytes);
  }
  void BeforeForward() override {
    reducer_->rebuild_buckets();  // once, after the first step
    reducer_->prepare_for_forward();
  }
  void BeforeBackward() override { reducer_->prepare_for_backward({}); }
  std::string Engine() const override { return "c10d::Reducer"; }
  int64_t Buckets() const override {
    return static_cast<int64_t>(reducer_->get_grad_buckets().size());
  }

 private:
  std::unique_ptr<c10d::Reducer> reducer_;
};
#endif

class BackendGroup final : public DataParallel {
 public:
  BackendGroup(c10::intrusive_ptr<c10d::Store> store,
               c10::intrusive_ptr<CommBackend> backend, int rank, int world,
               c10::Device device, std::chrono::milliseconds timeout)
      : store_(std::move(store)),
        backend_(std::move(backend)),
        rank_(rank),
        world_(world),
        device_(device),
        timeout_(timeout) {}

  int rank() const override { return rank_; }
  c10::Device device() const override { return device_; }
  int world_size() const override { return world_; }

  void AverageGradients(const std::vector<at::Tensor>& params,
                        int64_t bucket_bytes) override {
    std::vector<at::Tensor> grads;
    for (const at::Tensor& p : params) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    for (const auto& [begin, end] : Buckets(grads, bucket_bytes)) {
      std::vector<at::Tensor> flat;
      for (size_t i = begin; i < end; ++i) flat.push_back(grads[i].reshape({-1}));
      std::vector<at::Tensor> bucket = {at::cat(flat)};
      backend_->allreduce(bucket)->wait(timeout_);
      bucket[0].div_(world_);
      int64_t offset = 0;
      for (size_t i = begin; i < end; ++i) {
        const int64_t n = grads[i].numel();
        grads[i].copy_(bucket[0].narrow(0, offset, n).view_as(grads[i]));
        offset += n;
      }
    }
  }

  std::unique_ptr<GradientSync> SyncGradients(std::vector<at::Tensor> params,
                                              int64_t bucket_bytes) override {
#if LTB_HAS_REDUCER
    return std::make_unique<ReducerSync>(std::move(params), Group(), bucket_bytes);
#else
    return std::make_unique<AfterBackwardSync>(this, std::move(params), bucket_bytes);
#endif
  }

  void SumInPlace(at::Tensor& t) override { Reduce(t, c10d::ReduceOp::SUM); }
  void MaxInPlace(at::Tensor& t) override { Reduce(t, c10d::ReduceOp::MAX); }

  void Broadcast(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes) override {
    // One group a dtype, in the order of first appearance, as c10d's
    // take_tensors groups them.
    std::vector<std::vector<at::Tensor>> groups;
    for (const at::Tensor& t : tensors) {
      auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
        return g.front().scalar_type() == t.scalar_type();
      });
      if (same == groups.end()) {
        groups.push_back({t});
      } else {
        same->push_back(t);
      }
    }
    for (const std::vector<at::Tensor>& group : groups) {
      for (const auto& [begin, end] : Buckets(group, bucket_bytes)) {
        if (end - begin == 1 && group[begin].is_contiguous()) {
          std::vector<at::Tensor> one = {group[begin]};
          backend_->broadcast(one)->wait(timeout_);
          continue;
        }
        std::vector<at::Tensor> flat;
        for (size_t i = begin; i < end; ++i) flat.push_back(group[i].reshape({-1}));
        std::vector<at::Tensor> bucket = {at::cat(flat)};
        backend_->broadcast(bucket)->wait(timeout_);
        int64_t offset = 0;
        for (size_t i = begin; i < end; ++i) {
          const int64_t n = group[i].numel();
          group[i].copy_(bucket[0].narrow(0, offset, n).view_as(group[i]));
          offset += n;
        }
      }
    }
  }

  void Barrier() override { backend_->barrier()->wait(timeout_); }
  void Post(const std::string& key) override {
    store_->set(key, std::vector<uint8_t>{1});
  }
  bool Posted(const std::string& key) override { return store_->check({key}); }

  void Shutdown() override {
    if (shut_) return;
    shut_ = true;
    ShutDown(*backend_, 0);
  }
  void Abort() override {
    if (shut_) return;
    shut_ = true;
    AbortNow(*backend_, 0);
  }
  ~BackendGroup() override {
    try {
      Shutdown();
    } catch (...) {
      // Exiting: nothing is left to tell.
    }
  }

 private:
#if LTB_HAS_REDUCER
  // The c10d::ProcessGroup the Reducer needs, over this group's backend: as
  // Python's init_process_group makes it, whose arguments changed in 2.6.
  c10::intrusive_ptr<c10d::ProcessGroup> Group() {
    if (!group_) {
#if LTB_TORCH_AT_LEAST(2, 6)
      group_ = c10::make_intrusive<c10d::ProcessGroup>(store_, rank_, world_);
      group_->setBackend(device_.type(), c10d::ProcessGroup::BackendType::CUSTOM,
                         backend_);
      group_->setDefaultBackend(c10d::ProcessGroup::BackendType::CUSTOM);
#else
      group_ = c10::make_intrusive<c10d::ProcessGroup>(
          store_, rank_, world_,
          c10::make_intrusive<c10d::ProcessGroup::Options>(backend_->getBackendName(),
                                                           timeout_));
      group_->setBackend(device_.type(), group_->getBackendType(), backend_);
#endif
    }
    return group_;
  }
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
#endif

  void Reduce(at::Tensor& t, c10d::ReduceOp::RedOpType op) {
    std::vector<at::Tensor> one = {t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp(op);
    backend_->allreduce(one, opts)->wait(timeout_);
  }

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<CommBackend> backend_;
  int rank_, world_;
  c10::Device device_;
  // Every wait on a collective gives up after it (--dist_timeout_s), rather
  // than blocking on a rank that will never come.
  std::chrono::milliseconds timeout_;
  bool shut_ = false;
};

absl::StatusOr<int> EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  int out = 0;
  if (!absl::SimpleAtoi(v, &out) || out < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad ", name, "='", v, "': a whole number"));
  }
  return out;
}

}  // namespace

absl::StatusOr<DistEnv> ReadDistEnv() {
  DistEnv env;
  absl::StatusOr<int> rank = EnvInt("RANK", 0), world = EnvInt("WORLD_SIZE", 1),
                      local = EnvInt("LOCAL_RANK", 0),
                      port = EnvInt("MASTER_PORT", 29500),
                      restarts = EnvInt("TORCHELASTIC_RESTART_COUNT", 0);
  for (const auto* s : {&rank, &world, &local, &port, &restarts}) {
    if (!s->ok()) return s->status();
  }
  env.rank = *rank;
  env.world_size = *world;
  env.local_rank = *local;
  env.master_port = *port;
  env.restart_count = *restarts;
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE")) {
    env.agent_store = absl::AsciiStrToLower(agent) == "true";
  }
  if (const char* addr = std::getenv("MASTER_ADDR")) env.master_addr = addr;
  if (env.master_port < 1 || env.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_PORT=", env.master_port, " is not a TCP port (1 to 65535)"));
  }
  if (env.world_size < 1 || env.rank >= env.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("RANK=", env.rank, " must be below WORLD_SIZE=", env.world_size));
  }
  return env;
}

absl::StatusOr<std::unique_ptr<DataParallel>> JoinProcessGroup(
    const DistEnv& env, const c10::Device& device, std::chrono::milliseconds timeout) {
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env.master_port);
    opts.isServer = env.rank == 0 && !env.agent_store;
    opts.numWorkers = env.world_size;
    opts.waitWorkers = !env.agent_store;
    opts.timeout = timeout;
    c10::intrusive_ptr<c10d::Store> store =
        c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    if (env.agent_store) {
      store = c10::make_intrusive<c10d::PrefixStore>(
          absl::StrCat("/worker/attempt_", env.restart_count), store);
    }
    absl::StatusOr<c10::intrusive_ptr<CommBackend>> backend =
        BackendOf(device).MakeCollectives(store, env.rank, env.world_size,
                                          env.master_addr, timeout);
    if (!backend.ok()) return backend.status();
    std::unique_ptr<DataParallel> group = std::make_unique<BackendGroup>(
        store, *std::move(backend), env.rank, env.world_size, device, timeout);
    return group;
  } catch (const std::exception& e) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    return absl::UnavailableError(absl::StrCat(
        "cannot join the process group of ", env.world_size, " ranks at ",
        env.master_addr, ":", env.master_port, " as rank ", env.rank, ": ",
        c10_error ? c10_error->what_without_backtrace() : e.what(),
        " (every machine must start its ranks within the timeout, with the same "
        "master address and port and the same number of nodes)"));
  }
}

DataParallel* CurrentProcessGroup() { return Current().get(); }
int CurrentRank() { return Current() ? Current()->rank() : 0; }
int CurrentWorldSize() { return Current() ? Current()->world_size() : 1; }
void SetCurrentProcessGroup(std::unique_ptr<DataParallel> group) {
  Current() = std::move(group);
}

std::vector<std::pair<size_t, size_t>> Buckets(const std::vector<at::Tensor>& tensors,
                                               int64_t bucket_bytes) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0;
  int64_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t n =
        tensors[i].numel() * static_cast<int64_t>(tensors[i].element_size());
    if (i > begin && bytes + n > bucket_bytes) {
      out.emplace_back(begin, i);
      begin = i;
      bytes = 0;
    }
    bytes += n;
  }
  if (begin < tensors.size()) out.emplace_back(begin, tensors.size());
  return out;
}

}  // namespace ltb
