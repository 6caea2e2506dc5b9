// Text generation under load: serve of the generate phase with continuous
// (iteration-level) batching. A fixed number of sequence slots share one
// key/value cache, a region per slot; between decode steps finished
// requests leave and waiting ones are prefilled (one at a time) and join;
// one decode step runs every active slot, each at its own position. LoadGen
// hears of each request's first token (FirstTokenComplete: TTFT) and of its
// end with its token count (QuerySamplesComplete: TPOT).
#pragma once

#include <ATen/core/Tensor.h>
#include <benchmark/benchmark.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "family/family.h"
#include "serve/serve.h"

namespace ltb {

// One request: LoadGen's response id, its prompt (1, P) on the device, the
// tokens to generate (greedy, exactly so many), and when it arrived.
struct TextRequest {
  uintptr_t id = 0;
  at::Tensor prompt;
  int64_t output_len = 0;
  std::chrono::steady_clock::time_point arrived;
};

// What the scheduler did: prefills (whole prompts; prefill_runs: the
// forwards they took, one a chunk) and decode steps, the active slots summed
// over decode steps, and the time in each (by the host's clock, the device
// waited for).
struct SchedulerStats {
  int64_t prefills = 0;
  int64_t prefill_runs = 0;
  int64_t decode_steps = 0;
  int64_t active_slot_steps = 0;
  double prefill_s = 0;
  double decode_s = 0;
};

// Continuous batching over a SlotDecoder, driven one step at a time (the
// tests drive it; ContinuousServer drives it on a thread). Active requests
// hold slots [0, S) in the order they joined, except that a request leaving
// a slot hands it to the last active one (its cache moved), so that a
// decode step reads S rows of the cache and no more. With a prefill chunk
// of N tokens, at most N prompt tokens run between two decode steps: a
// request part-way through its prompt holds row S until its prompt is in.
class ContinuousBatcher {
 public:
  using FirstToken = std::function<void(const TextRequest&, int64_t token)>;
  using Done =
      std::function<void(const TextRequest&, const std::vector<int64_t>& tokens)>;
  // prefill_chunk: prompt tokens a step at most; 0: whole prompts.
  ContinuousBatcher(SlotDecoder& decoder, FirstToken first, Done done,
                    int64_t prefill_chunk = 0);

  // Queues a request; requests join in the order they were added.
  void Add(TextRequest request);
  // Prefills waiting requests into free slots (whole prompts: those of one
  // length at the front of the queue together, in one forward; with a
  // chunk, one prompt at a time within the chunk's tokens), then runs one
  // decode step of every active slot; requests that have all their tokens
  // leave. Returns whether any request is left, active, part-way through
  // its prompt or waiting.
  bool Step();
  // Completes every request now with the tokens it has (an interrupt).
  void Abandon();

  int64_t active() const { return static_cast<int64_t>(active_.size()); }
  size_t waiting() const { return waiting_.size(); }
  const SchedulerStats& stats() const { return stats_; }

 private:
  struct Slot {
    TextRequest request;
    std::vector<int64_t> tokens;  // generated so far
    int64_t position = 0;         // where the next token is fed: cache [0, position)
  };
  void Leave(size_t i);
  void PrefillWhole();
  void PrefillChunks();

  SlotDecoder& decoder_;
  FirstToken first_;
  Done done_;
  int64_t prefill_chunk_;
  std::deque<TextRequest> waiting_;
  std::vector<Slot> active_;        // active_[i] holds slot i
  std::optional<Slot> prefilling_;  // part-way through its prompt, in slot S
  SchedulerStats stats_;
};

// A ContinuousBatcher on a worker thread, in inference mode: Submit() from
// any thread; the worker steps while any request is left, and after an
// interrupt (StopRequested) completes every request unrun.
class ContinuousServer {
 public:
  ContinuousServer(SlotDecoder& decoder, ContinuousBatcher::FirstToken first,
                   ContinuousBatcher::Done done, int64_t prefill_chunk = 0);
  ~ContinuousServer();
  ContinuousServer(const ContinuousServer&) = delete;
  ContinuousServer& operator=(const ContinuousServer&) = delete;

  void Submit(std::vector<TextRequest> requests);
  // Returns once every request submitted so far is complete.
  void Drain();
  // Runs `f` on the worker thread, between steps (with the run's threads,
  // in inference mode), and returns once it has.
  void RunOnWorker(const std::function<void()>& f);
  // Completes every request left at once, unrun, and every one submitted
  // after (an interrupt): LoadGen ends its test and writes its logs.
  void Abandon();
  SchedulerStats stats() const;
  // What a step threw, if one did (the requests left were then abandoned).
  std::string error() const;

 private:
  void Work();

  ContinuousBatcher batcher_;
  mutable std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::vector<TextRequest> incoming_;
  bool busy_ = false;  // the batcher has requests
  bool stop_ = false;
  bool abandon_ = false;
  std::string error_;
  SchedulerStats stats_;  // a copy, updated after each step
  int threads_;           // the constructing thread's intra-op threads
  HandedCall call_;
  std::thread worker_;
};

// N or MIN:MAX, each at least `least`: a length flag's range, or an error
// naming the flag and the valid forms.
absl::StatusOr<std::pair<int64_t, int64_t>> ParseLengthRange(const std::string& flag,
                                                             const std::string& text,
                                                             int64_t least);

// An error for serve settings of generation that cannot run: an output
// length under 2 (LoadGen times output tokens after the first), a bound <= 0.
absl::Status ValidateTextServe(const ServeSettings& serve);

// Request `i`'s draws, the same in pybench: splitmix64 of seed + i * 2^32 +
// k; k = 0 its prompt length, 1 its output length, 2 + j its prompt's
// token j. A length is lo + draw % (hi - lo + 1).
uint64_t RequestDraw(uint64_t seed, uint64_t i, uint64_t k);
int64_t DrawLength(uint64_t seed, uint64_t i, uint64_t k, int64_t lo, int64_t hi);

// The seed of serve's requests.
inline constexpr uint64_t kTextServeSeed = 55;

// The counters of one LoadGen test of generation: CountersFromDetail's
// (samples/s, QPS, latencies, valid and the label), then tokens/s, TTFT and
// TPOT percentiles (Server), goodput against the TTFT and TPOT bounds
// (`good`: the share of requests within both, by the server's clock) and
// the scheduler's own: mean active slots a decode step, prefill and decode
// shares of the time. MultiStream's tokens/s is its samples/s (a query's
// samples over its mean latency) times `tokens_per_sample`, the mean output
// of the requests the server completed (-1: unknown), so that both count
// the same span: LoadGen's own is over the test's wall time, with the gaps
// between queries.
ServeCounters TextCountersFromDetail(const std::map<std::string, std::string>& detail,
                                     const ServeSettings& serve,
                                     const SchedulerStats& stats, double good,
                                     double tokens_per_sample = -1);

// One serve benchmark of generation: one LoadGen test over `decoder`'s
// slots (spec.batch of them, spec.prompt + spec.new_tokens positions each),
// its counters set on `state`. Its decode steps run over key buckets
// (BucketedSlots), and every decode and whole-prompt prefill shape the test
// can meet runs once before it; with spec.graph, the decode steps replay
// graphs captured then. Returns an error to report instead.
absl::Status RunTextServe(benchmark::State& state, SlotDecoder& decoder,
                          const BenchSpec& spec);

}  // namespace ltb
