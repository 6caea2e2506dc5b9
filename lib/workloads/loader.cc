#include "workloads/loader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/device.h"
#include "distributed/distributed.h"

namespace ltb {
namespace {

void DropFromPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

double CachedFraction(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  double fraction = -1;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0 &&
      (st.st_uid == ::geteuid() || ::access(path.c_str(), W_OK) == 0)) {
    const size_t bytes = static_cast<size_t>(st.st_size);
    void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      std::vector<unsigned char> resident((bytes + page - 1) / page);
      if (::mincore(map, bytes, resident.data()) == 0) {
        size_t cached = 0;
        for (const unsigned char r : resident) cached += r & 1;
        fraction = static_cast<double>(cached) / static_cast<double>(resident.size());
      }
      ::munmap(map, bytes);
    }
  }
  ::close(fd);
  return fraction;
}

Share RankShare(int64_t samples, int64_t batch) {
  const int64_t per_rank = samples / CurrentWorldSize() / batch * batch;
  return {CurrentRank() * (samples / CurrentWorldSize()), per_rank};
}

Loader::Loader(const BenchSpec& spec, DatasetSpec data, std::vector<std::string> shards)
    : data_(data),
      shards_(std::move(shards)),
      batch_(spec.batch),
      device_(spec.device),
      pin_(BackendOf(spec.device).Caps().pinned_host_memory),
      share_(RankShare(data.samples, spec.batch)),
      capacity_(std::max(1, spec.epochs.prefetch_batches)),
      drop_cache_(spec.epochs.drop_page_cache) {
  if (shards_.empty()) {  // memory: the whole share generated once
    std::vector<at::Tensor> parts;
    for (int64_t i = 0; i < data_.Shards(); ++i) parts.push_back(GenerateShard(data_, i));
    memory_ = at::cat(parts).narrow(0, share_.first, share_.count).contiguous();
    if (pin_) memory_ = memory_.pin_memory();
  } else if (drop_cache_) {
    // Shards just written, or read by an earlier benchmark, are in the page
    // cache: the first epoch would read them from memory.
    const auto [first, last] = ShardRange();
    int64_t checked = 0, kept = 0;
    for (int64_t s = first; s < last; ++s) {
      DropFromPageCache(shards_[s]);
      const double cached = CachedFraction(shards_[s]);
      if (cached < 0) continue;
      ++checked;
      if (cached > 0.5) ++kept;
    }
    if (kept > 0) {
      caveat_ = absl::StrCat(
          "the epochs read their shards from memory, not from storage: ", kept, " of ",
          checked,
          " stayed in the page cache when dropped from it (their filesystem keeps files "
          "in memory, as tmpfs does)");
    }
  }
}

std::pair<int64_t, int64_t> Loader::ShardRange() const {
  const int64_t per_shard = data_.SamplesPerShard();
  const int64_t end = share_.first + share_.count;
  return {share_.first / per_shard, (end + per_shard - 1) / per_shard};
}

Loader::~Loader() { Stop(); }

void Loader::StartEpoch() {
  Stop();
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
  error_ = nullptr;
  done_ = stop_ = false;
  thread_ = std::thread([this] { Produce(); });
}

std::optional<at::Tensor> Loader::Next() {
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

void Loader::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Loader::Push(at::Tensor batch) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.size() < static_cast<size_t>(capacity_) || stop_; });
  if (stop_) return false;
  queue_.push_back(pin_ ? batch.pin_memory() : std::move(batch));
  cv_.notify_all();
  return true;
}

void Loader::Produce() {
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

void Loader::ProduceFromShards() {
  const int64_t per_shard = data_.SamplesPerShard();
  const int64_t end = share_.first + share_.count;
  at::Tensor carry;  // samples left over from the previous shard
  const auto [first, last] = ShardRange();
  for (int64_t s = first; s < last; ++s) {
    absl::StatusOr<at::Tensor> tokens =
        ReadShard(shards_[s], data_.sample_tokens, data_.vocab);
    if (!tokens.ok()) throw std::runtime_error(std::string(tokens.status().message()));
    const int64_t expected = std::min(per_shard, data_.samples - s * per_shard);
    if (tokens->size(0) != expected) {
      throw std::runtime_error(absl::StrCat("bad shard ", shards_[s], ": holds ",
                                            tokens->size(0),
                                            " samples, the dataset puts ", expected,
                                            " there; rewrite it with --regenerate=true"));
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

}  // namespace ltb
