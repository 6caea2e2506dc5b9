// The data of train_epoch: a synthetic token dataset, this rank's share of
// it, and the background loader that produces its batches from memory or
// from checked shards on disk.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "family/spec.h"
#include "workloads/shards.h"

namespace ltb {

// This rank's samples: a contiguous share of the dataset, whole batches only
// so that every rank takes the same number of steps.
struct Share {
  int64_t first = 0, count = 0;
};
Share RankShare(int64_t samples, int64_t batch);

// The share of `path`'s pages in the page cache, 0 to 1, from mincore over a
// mapping of it; -1 where the kernel will not say (for a file this process
// neither owns nor may write, mincore reports every page resident) or the
// file cannot be mapped.
double CachedFraction(const std::string& path);

// Batches of one epoch, produced by a background thread into a bounded
// queue: generated in memory, or read from shards (dropped from the page
// cache before the first epoch, and again after each read, so that every
// epoch reads storage). `shards` empty: memory.
class Loader {
 public:
  Loader(const BenchSpec& spec, DatasetSpec data, std::vector<std::string> shards);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t batches() const { return share_.count / batch_; }
  // Where shards dropped from the page cache stayed in it (a filesystem that
  // keeps its files in memory, as tmpfs does), so that the epochs read
  // memory, not storage: a sentence that says so; else "".
  const std::string& caveat() const { return caveat_; }

  // Starts producing this epoch's batches in the background.
  void StartEpoch();
  // The next batch on the device, or nullopt at the end of the epoch.
  std::optional<at::Tensor> Next();

 private:
  void Stop();
  bool Push(at::Tensor batch);
  void Produce();
  void ProduceFromShards();
  // The shards holding this rank's share: [first, last).
  std::pair<int64_t, int64_t> ShardRange() const;

  DatasetSpec data_;
  std::vector<std::string> shards_;
  int64_t batch_;
  c10::Device device_;
  bool pin_;
  Share share_;
  int capacity_;
  bool drop_cache_;
  at::Tensor memory_;
  std::string caveat_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<at::Tensor> queue_;
  std::exception_ptr error_;
  bool done_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace ltb
