#include "serve/text_serve.h"

#include <ATen/Parallel.h>
#include <ATen/ops/tensor.h>
#include <c10/core/InferenceMode.h>
#include <loadgen/loadgen.h>
#include <loadgen/query_sample_library.h>
#include <loadgen/system_under_test.h>
#include <loadgen/test_settings.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/format.h"
#include "base/interrupt.h"
#include "serve/serve.h"
#include "serve/slot_buckets.h"

namespace ltb {

// ------------------------------------------------------------- the scheduler

ContinuousBatcher::ContinuousBatcher(SlotDecoder& decoder, FirstToken first, Done done,
                                     int64_t prefill_chunk)
    : decoder_(decoder),
      first_(std::move(first)),
      done_(std::move(done)),
      prefill_chunk_(prefill_chunk) {}

void ContinuousBatcher::Add(TextRequest request) {
  waiting_.push_back(std::move(request));
}

void ContinuousBatcher::Leave(size_t i) {
  done_(active_[i].request, active_[i].tokens);
  const size_t last = active_.size() - 1;
  if (i != last) {
    decoder_.Move(static_cast<int64_t>(last), static_cast<int64_t>(i),
                  active_[last].position);
    active_[i] = std::move(active_[last]);
  }
  active_.pop_back();
  // A prompt part-way in follows the active rows down.
  if (prefilling_) {
    decoder_.Move(static_cast<int64_t>(last) + 1, static_cast<int64_t>(last),
                  prefilling_->position);
  }
}

void ContinuousBatcher::PrefillWhole() {
  using Clock = std::chrono::steady_clock;
  // The waiting requests at the front whose prompts are of one length (with
  // fixed lengths, all of them) join together, in one forward over their
  // rows, up to the free slots: a prompt's length never pads another's.
  while (!waiting_.empty() && active() < decoder_.slots()) {
    const int64_t length = waiting_.front().prompt.size(1);
    const size_t first_row = active_.size();
    std::vector<at::Tensor> prompts;
    while (!waiting_.empty() && active() < decoder_.slots() &&
           waiting_.front().prompt.size(1) == length) {
      prompts.push_back(waiting_.front().prompt);
      active_.push_back(Slot{std::move(waiting_.front()), {}, length});
      waiting_.pop_front();
    }
    const auto start = Clock::now();
    const at::Tensor batch = prompts.size() == 1 ? prompts[0] : at::cat(prompts, 0);
    const at::Tensor next =
        decoder_.Prefill(batch, static_cast<int64_t>(first_row), 0).cpu();  // waits
    stats_.prefill_s += std::chrono::duration<double>(Clock::now() - start).count();
    ++stats_.prefill_runs;
    const auto tokens = next.accessor<int64_t, 2>();
    for (size_t i = first_row; i < active_.size(); ++i) {
      active_[i].tokens.push_back(tokens[static_cast<int64_t>(i - first_row)][0]);
      ++stats_.prefills;
      first_(active_[i].request, active_[i].tokens.back());
    }
    // From the back, as after a decode step: one token may be all a request
    // asked for.
    for (size_t i = active_.size(); i-- > first_row;) {
      if (active_[i].request.output_len <= 1) Leave(i);
    }
  }
}

void ContinuousBatcher::PrefillChunks() {
  using Clock = std::chrono::steady_clock;
  // At most prefill_chunk_ prompt tokens a step, so that a long prompt
  // delays each decode step by a chunk rather than by itself; a request's
  // first token comes with its prompt's last chunk.
  int64_t budget = prefill_chunk_;
  while (budget > 0) {
    if (!prefilling_) {
      if (waiting_.empty() || active() >= decoder_.slots()) break;
      prefilling_ = Slot{std::move(waiting_.front()), {}, 0};
      waiting_.pop_front();
    }
    Slot& slot = *prefilling_;
    const int64_t prompt = slot.request.prompt.size(1);
    const int64_t n = std::min(budget, prompt - slot.position);
    const auto start = Clock::now();
    const at::Tensor next = decoder_.Prefill(
        slot.request.prompt.narrow(1, slot.position, n), active(), slot.position);
    slot.position += n;
    budget -= n;
    ++stats_.prefill_runs;
    // Read on every chunk (it waits): a chunk's time is the time the device
    // took, where a launch alone would leave its work to the next decode step.
    const int64_t read = next.item<int64_t>();
    const int64_t token = slot.position == prompt ? read : -1;
    stats_.prefill_s += std::chrono::duration<double>(Clock::now() - start).count();
    if (token < 0) continue;
    ++stats_.prefills;
    slot.tokens.push_back(token);
    first_(slot.request, token);
    active_.push_back(std::move(slot));
    prefilling_.reset();
    if (active_.back().request.output_len <= 1) Leave(active_.size() - 1);
  }
}

bool ContinuousBatcher::Step() {
  using Clock = std::chrono::steady_clock;
  // Arrivals join between decode steps; their first tokens come at once.
  if (prefill_chunk_ > 0) {
    PrefillChunks();
  } else {
    PrefillWhole();
  }
  if (active_.empty()) return !waiting_.empty() || prefilling_.has_value();
  const size_t s = active_.size();
  std::vector<int64_t> last(s), positions(s);
  for (size_t i = 0; i < s; ++i) {
    last[i] = active_[i].tokens.back();
    positions[i] = active_[i].position;
  }
  const auto start = Clock::now();
  const at::Tensor tokens = at::tensor(last, at::kLong)
                                .view({static_cast<int64_t>(s), 1})
                                .to(active_.front().request.prompt.device());
  const at::Tensor next = decoder_.Decode(tokens, positions).cpu();  // waits
  stats_.decode_s += std::chrono::duration<double>(Clock::now() - start).count();
  ++stats_.decode_steps;
  stats_.active_slot_steps += static_cast<int64_t>(s);
  const auto rows = next.accessor<int64_t, 2>();
  for (size_t i = 0; i < s; ++i) {
    active_[i].tokens.push_back(rows[static_cast<int64_t>(i)][0]);
    ++active_[i].position;
  }
  // From the back: the last slot, which fills a leaving one's, has been
  // looked at already.
  for (size_t i = s; i-- > 0;) {
    if (static_cast<int64_t>(active_[i].tokens.size()) >= active_[i].request.output_len) {
      Leave(i);
    }
  }
  return !active_.empty() || !waiting_.empty() || prefilling_.has_value();
}

void ContinuousBatcher::Abandon() {
  while (!active_.empty()) {
    done_(active_.back().request, active_.back().tokens);
    active_.pop_back();
  }
  if (prefilling_) done_(prefilling_->request, {});
  prefilling_.reset();
  while (!waiting_.empty()) {
    done_(waiting_.front(), {});
    waiting_.pop_front();
  }
}

ContinuousServer::ContinuousServer(SlotDecoder& decoder,
                                   ContinuousBatcher::FirstToken first,
                                   ContinuousBatcher::Done done, int64_t prefill_chunk)
    : batcher_(decoder, std::move(first), std::move(done), prefill_chunk),
      threads_(at::get_num_threads()),
      worker_([this] { Work(); }) {}

ContinuousServer::~ContinuousServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

void ContinuousServer::Submit(std::vector<TextRequest> requests) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (TextRequest& r : requests) incoming_.push_back(std::move(r));
  }
  wake_.notify_all();
}

void ContinuousServer::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return incoming_.empty() && !busy_; });
}

void ContinuousServer::RunOnWorker(const std::function<void()>& f) {
  std::unique_lock<std::mutex> lock(mu_);
  call_.Hand(lock, wake_, idle_, f);
}

void ContinuousServer::Abandon() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    abandon_ = true;
  }
  wake_.notify_all();
}

std::string ContinuousServer::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

SchedulerStats ContinuousServer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ContinuousServer::Work() {
  // The run's intra-op threads (--threads): OpenMP's count is the calling
  // thread's, and a new thread starts from OpenMP's default.
  at::set_num_threads(threads_);
  c10::InferenceMode guard;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(
        lock, [this] { return stop_ || busy_ || !incoming_.empty() || call_.pending(); });
    if (call_.pending()) {
      call_.Run(lock, idle_);
      continue;
    }
    if (stop_ && !busy_ && incoming_.empty()) return;
    for (TextRequest& r : incoming_) batcher_.Add(std::move(r));
    incoming_.clear();
    // An interrupt completes what is left unrun, between steps, so that
    // LoadGen ends its test and writes its logs.
    const bool abandon = abandon_ || stop_ || StopRequested();
    lock.unlock();
    bool more = false;
    std::string error;
    if (abandon) {
      batcher_.Abandon();
    } else {
      try {
        more = batcher_.Step();
      } catch (const std::exception& e) {
        // The requests left complete unrun, so that LoadGen ends its test.
        error = e.what();
        batcher_.Abandon();
      }
    }
    lock.lock();
    if (!error.empty()) {
      if (error_.empty()) error_ = error;
      abandon_ = true;
    }
    busy_ = more;
    stats_ = batcher_.stats();
    if (!busy_ && incoming_.empty()) idle_.notify_all();
  }
}

// ------------------------------------------------------------------ settings

absl::StatusOr<std::pair<int64_t, int64_t>> ParseLengthRange(const std::string& flag,
                                                             const std::string& text,
                                                             int64_t least) {
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  int64_t lo = 0, hi = 0;
  const bool parsed =
      (parts.size() == 1 && absl::SimpleAtoi(parts[0], &lo) && ((hi = lo), true)) ||
      (parts.size() == 2 && absl::SimpleAtoi(parts[0], &lo) &&
       absl::SimpleAtoi(parts[1], &hi));
  if (!parsed || lo < least || hi < lo) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", text,
        ": valid: a length N or a range MIN:MAX of whole numbers, ", least,
        " <= MIN <= MAX",
        least == 2 ? " (LoadGen times the output tokens after the first, so a request "
                     "generates at least 2)"
                   : ""));
  }
  return std::pair<int64_t, int64_t>{lo, hi};
}

absl::Status ValidateTextServe(const ServeSettings& serve) {
  if (serve.phase != "generate") return absl::OkStatus();
  if (serve.output_min != 0 && serve.output_min < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--output_len: ", serve.output_min,
        " output tokens, but LoadGen times the output tokens after the first, so a "
        "request generates at least 2"));
  }
  if (serve.prefill_chunk < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefill_chunk=", serve.prefill_chunk,
                     ": valid: a whole number of prompt tokens >= 1, or 0 for whole "
                     "prompts"));
  }
  for (const auto& [flag, bound] :
       {std::pair<const char*, double>{"ttft_bound_ms", serve.ttft_bound_ms},
        {"tpot_bound_ms", serve.tpot_bound_ms}}) {
    if (bound < 0 || std::isnan(bound)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag,
                       " must be a number of milliseconds > 0, or left out "
                       "for LoadGen's 100 ms"));
    }
  }
  return absl::OkStatus();
}

uint64_t RequestDraw(uint64_t seed, uint64_t i, uint64_t k) {
  uint64_t z = seed + (i << 32) + k + 0x9e3779b97f4a7c15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t DrawLength(uint64_t seed, uint64_t i, uint64_t k, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(RequestDraw(seed, i, k) %
                                   static_cast<uint64_t>(hi - lo + 1));
}

// ------------------------------------------------------------------ counters

namespace {

double TextDetailNumber(const std::map<std::string, std::string>& detail,
                        const std::string& key) {
  const auto it = detail.find(key);
  if (it == detail.end()) return -1;
  double v = -1;
  return absl::SimpleAtod(it->second, &v) ? v : -1;
}

}  // namespace

ServeCounters TextCountersFromDetail(const std::map<std::string, std::string>& detail,
                                     const ServeSettings& serve,
                                     const SchedulerStats& stats, double good,
                                     double tokens_per_sample) {
  ServeCounters out = CountersFromDetail(detail, serve, 0);
  // LoadGen's over-latency count is of whole requests against the sample
  // bound, which token latencies replace: goodput is counted below.
  auto& counters = out.counters;
  counters.erase(std::remove_if(counters.begin(), counters.end(),
                                [](const auto& c) {
                                  return c.first == "goodput" || c.first == "bound_ms";
                                }),
                 counters.end());
  auto add = [&](const std::string& name, double value) {
    if (value >= 0) out.counters.emplace_back(name, value);
  };
  double samples_per_s = -1;
  for (const auto& [name, value] : out.counters) {
    if (name == "samples/s") samples_per_s = value;
  }
  const bool offline = serve.scenario == "Offline";
  if (serve.scenario == "MultiStream") {
    if (samples_per_s >= 0 && tokens_per_sample > 0) {
      add("tokens/s", samples_per_s * tokens_per_sample);
    }
  } else {
    add("tokens/s",
        TextDetailNumber(detail, offline ? "result_tokens_per_second"
                                         : "result_completed_tokens_per_second"));
  }
  for (const char* p : {"50.00", "90.00", "99.00"}) {
    const std::string q = std::string(p).substr(0, 2);
    const double ttft = TextDetailNumber(
        detail, absl::StrCat("result_first_token_", p, "_percentile_latency_ns"));
    if (ttft >= 0) add(absl::StrCat("ttft_p", q, "_ms"), ttft * 1e-6);
    const double tpot = TextDetailNumber(
        detail, absl::StrCat("result_time_per_output_token_", p, "_percentile_ns"));
    if (tpot >= 0) add(absl::StrCat("tpot_p", q, "_ms"), tpot * 1e-6);
  }
  if (serve.scenario == "Server") {
    add("ttft_bound_ms", serve.ttft_bound_ms > 0 ? serve.ttft_bound_ms : 100);
    add("tpot_bound_ms", serve.tpot_bound_ms > 0 ? serve.tpot_bound_ms : 100);
    if (samples_per_s >= 0 && good >= 0) add("goodput", samples_per_s * good);
  }
  if (stats.decode_steps > 0) {
    add("mean_active_slots", static_cast<double>(stats.active_slot_steps) /
                                 static_cast<double>(stats.decode_steps));
  }
  const double busy = stats.prefill_s + stats.decode_s;
  if (busy > 0) {
    add("prefill_share", stats.prefill_s / busy);
    add("decode_share", stats.decode_s / busy);
  }
  add("prefills", static_cast<double>(stats.prefills));
  add("decode_steps", static_cast<double>(stats.decode_steps));
  return out;
}

// ------------------------------------------------------------------ the test

namespace {

// Requests' prompts and output lengths, drawn from kTextServeSeed and the
// sample's index when LoadGen loads them (outside the timed test).
class TextLibrary : public mlperf::QuerySampleLibrary {
 public:
  TextLibrary(const BenchSpec& spec, int64_t vocab, size_t count)
      : spec_(spec), vocab_(vocab), prompts_(count), outputs_(count) {}
  const std::string& Name() override { return name_; }
  size_t TotalSampleCount() override { return prompts_.size(); }
  size_t PerformanceSampleCount() override { return prompts_.size(); }
  void LoadSamplesToRam(const std::vector<mlperf::QuerySampleIndex>& indices) override {
    const ServeSettings& serve = spec_.serve;
    for (const auto i : indices) {
      const int64_t p = DrawLength(kTextServeSeed, i, 0,
                                   serve.prompt_min > 0 ? serve.prompt_min : spec_.prompt,
                                   spec_.prompt);
      std::vector<int64_t> ids(static_cast<size_t>(p));
      for (int64_t j = 0; j < p; ++j) {
        ids[j] =
            DrawLength(kTextServeSeed, i, 2 + static_cast<uint64_t>(j), 0, vocab_ - 1);
      }
      prompts_.at(i) = at::tensor(ids, at::kLong).view({1, p}).to(spec_.device);
      outputs_.at(i) = DrawLength(
          kTextServeSeed, i, 1,
          serve.output_min > 0 ? serve.output_min : spec_.new_tokens, spec_.new_tokens);
    }
  }
  void UnloadSamplesFromRam(
      const std::vector<mlperf::QuerySampleIndex>& indices) override {
    for (const auto i : indices) prompts_.at(i) = at::Tensor();
  }
  TextRequest Request(uintptr_t id, size_t index) const {
    return {id, prompts_.at(index), outputs_.at(index), std::chrono::steady_clock::now()};
  }

 private:
  std::string name_ = "ltb-prompts";
  const BenchSpec& spec_;
  int64_t vocab_;
  std::vector<at::Tensor> prompts_;
  std::vector<int64_t> outputs_;
};

class TextSut : public mlperf::SystemUnderTest {
 public:
  TextSut(ContinuousServer* server, const TextLibrary* library)
      : server_(server), library_(library) {}
  const std::string& Name() override { return name_; }
  void IssueQuery(const std::vector<mlperf::QuerySample>& samples) override {
    std::vector<TextRequest> requests;
    requests.reserve(samples.size());
    for (const mlperf::QuerySample& s : samples) {
      requests.push_back(library_->Request(s.id, s.index));
    }
    server_->Submit(std::move(requests));
  }
  void FlushQueries() override {}

 private:
  std::string name_ = "ltb-continuous-batching";
  ContinuousServer* server_;
  const TextLibrary* library_;
};

constexpr size_t kTextServeSamples = 64;

}  // namespace

absl::Status RunTextServe(benchmark::State& state, SlotDecoder& decoder,
                          const BenchSpec& spec) {
  const ServeSettings& serve = spec.serve;
  absl::StatusOr<std::string> made = MakeServeLogFolder(spec);
  if (!made.ok()) return made.status();
  const std::string& folder = *made;
  mlperf::TestSettings settings;
  SetLoadGenSettings(serve, kTextServeSamples, settings);
  settings.use_token_latencies = true;
  if (serve.ttft_bound_ms > 0) {
    settings.server_ttft_latency = BoundNanoseconds(serve.ttft_bound_ms);
  }
  if (serve.tpot_bound_ms > 0) {
    settings.server_tpot_latency = BoundNanoseconds(serve.tpot_bound_ms);
  }
  mlperf::LogSettings log;
  log.log_output.outdir = folder;
  log.enable_trace = false;

  // Decode steps over a few key buckets; with --cuda_graphs, each shape
  // captured here, outside LoadGen's test, so that no request's latency
  // holds a capture.
  BucketedSlots slots(
      decoder, spec.graph ? BackendOf(spec.device).MakeGraphs(spec.device) : nullptr,
      spec.device, (serve.prompt_min > 0 ? serve.prompt_min : spec.prompt) + 1);
  if (spec.graph) slots.Capture();
  TextLibrary library(spec, decoder.vocab(), kTextServeSamples);

  const double ttft_bound_s =
      (serve.ttft_bound_ms > 0 ? serve.ttft_bound_ms : 100) * 1e-3;
  const double tpot_bound_s =
      (serve.tpot_bound_ms > 0 ? serve.tpot_bound_ms : 100) * 1e-3;
  std::mutex mu;
  std::map<uintptr_t, std::chrono::steady_clock::time_point> first_at;
  int64_t completed = 0, within = 0, tokens_done = 0;
  bool interrupted = false;
  ContinuousServer* server_ptr = nullptr;
  ContinuousServer server(
      slots,
      [&](const TextRequest& r, int64_t) {
        {
          std::lock_guard<std::mutex> lock(mu);
          first_at[r.id] = std::chrono::steady_clock::now();
        }
        mlperf::QuerySampleResponse response(r.id, 0, 0, 1);
        mlperf::FirstTokenComplete(&response, 1);
        if (StopRequested() && server_ptr != nullptr) {
          {
            std::lock_guard<std::mutex> lock(mu);
            interrupted = true;
          }
          server_ptr->Abandon();
        }
      },
      [&](const TextRequest& r, const std::vector<int64_t>& tokens) {
        const auto now = std::chrono::steady_clock::now();
        // An abandoned request counts as long as it was drawn, so that LoadGen
        // records a TPOT (it needs 2 tokens or more) and ends its test.
        const auto n = static_cast<int64_t>(std::max(tokens.size(), size_t{2}));
        {
          std::lock_guard<std::mutex> lock(mu);
          ++completed;
          tokens_done += n;
          const auto first = first_at.find(r.id);
          if (first != first_at.end()) {
            const double ttft =
                std::chrono::duration<double>(first->second - r.arrived).count();
            const double tpot =
                tokens.size() > 1
                    ? std::chrono::duration<double>(now - first->second).count() /
                          static_cast<double>(tokens.size() - 1)
                    : 0;
            if (ttft <= ttft_bound_s && tpot <= tpot_bound_s) ++within;
            first_at.erase(first);
          }
        }
        mlperf::QuerySampleResponse response(r.id, 0, 0, n);
        mlperf::QuerySamplesComplete(&response, 1);
      },
      serve.prefill_chunk);
  server_ptr = &server;
  double query_s = 0;  // the warm-up's fastest query, for its expected latency
  // The warm-up, on the server's own thread (cuDNN keeps its attention
  // plans per thread), outside LoadGen's test: every shape the test can
  // meet runs once, so that no request's latency holds a shape's first run.
  server.RunOnWorker([&] {
    std::vector<mlperf::QuerySampleIndex> all(kTextServeSamples);
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    library.LoadSamplesToRam(all);
    slots.RunEachShape();  // each decode step's shape
    // Whole prompts: each prompt length of the library in as many rows as
    // that many prompts of it can join (up to the slots). Chunked prefill's
    // shapes follow each chunk's position and are left to the warm-up below.
    if (serve.prefill_chunk == 0) {
      std::map<int64_t, std::vector<at::Tensor>> by_length;
      for (const auto i : all) {
        const at::Tensor prompt = library.Request(i, i).prompt;
        by_length[prompt.size(1)].push_back(prompt);
      }
      for (const auto& [length, prompts] : by_length) {
        const size_t most = std::min(prompts.size(), static_cast<size_t>(slots.slots()));
        for (size_t rows = 1; rows <= most && !StopRequested(); ++rows) {
          slots.Prefill(
              at::cat(std::vector<at::Tensor>(prompts.begin(), prompts.begin() + rows),
                      0),
              0, 0);
        }
      }
    }
    // Then, as the other phases warm up, the library's first max_batch
    // requests served to their end (memory grown, first calls made); the
    // cache is cleared before the test.
    ContinuousBatcher warm(
        slots, [](const TextRequest&, int64_t) {},
        [](const TextRequest&, const std::vector<int64_t>&) {}, serve.prefill_chunk);
    for (size_t i = 0;
         i < std::min<size_t>(static_cast<size_t>(serve.max_batch), all.size()); ++i) {
      warm.Add(library.Request(i, i));
    }
    while (warm.Step() && !StopRequested()) {
    }
    // SingleStream's and MultiStream's query (a request, or samples per
    // query of them together) served to its end, three times, each of
    // other requests, for LoadGen's expected latency: the fastest.
    if (serve.scenario == "SingleStream" || serve.scenario == "MultiStream") {
      const size_t per_query =
          serve.scenario == "SingleStream" ? 1 : settings.multi_stream_samples_per_query;
      for (size_t trial = 0; trial < 3 && !StopRequested(); ++trial) {
        ContinuousBatcher query(
            slots, [](const TextRequest&, int64_t) {},
            [](const TextRequest&, const std::vector<int64_t>&) {}, serve.prefill_chunk);
        const auto start = std::chrono::steady_clock::now();
        for (size_t j = 0; j < per_query; ++j) {
          const size_t i = (trial * per_query + j) % all.size();
          query.Add(library.Request(i, i));
        }
        while (query.Step() && !StopRequested()) {
        }
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                .count();
        query_s = trial == 0 ? s : std::min(query_s, s);
      }
    }
    library.UnloadSamplesFromRam(all);
  });
  SetExpectedLatency(query_s, serve, settings);
  TextSut sut(&server, &library);

  for (auto _ : state) {
    slots.Clear();
    mlperf::StartTest(&sut, &library, settings, log);
    server.Drain();
    std::ifstream in(std::filesystem::path(folder) / "mlperf_log_detail.txt");
    std::stringstream text;
    text << in.rdbuf();
    double good = -1, tokens_per_sample = -1;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (const std::string error = server.error(); !error.empty()) {
        return absl::InternalError(
            absl::StrCat("serve: ", error, " (LoadGen's logs: ", folder, ")"));
      }
      if (interrupted || StopRequested()) {
        return absl::CancelledError(
            absl::StrCat(StopReason(), " during LoadGen's test; its logs: ", folder));
      }
      // A peak search's requests span every rate it tried: no one goodput.
      if (completed > 0 && !serve.find_peak)
        good = static_cast<double>(within) / static_cast<double>(completed);
      if (completed > 0) {
        tokens_per_sample =
            static_cast<double>(tokens_done) / static_cast<double>(completed);
      }
    }
    const ServeCounters counters =
        WithPeak(TextCountersFromDetail(ParseDetailLog(text.str()), serve, server.stats(),
                                        good, tokens_per_sample),
                 text.str(), serve);
    state.SetIterationTime(counters.seconds_per_sample);
    for (const auto& [name, value] : counters.counters) state.counters[name] = value;
    state.counters["max_batch"] = static_cast<double>(serve.max_batch);
    state.SetLabel(ValidUtf8(counters.label));
    if (!counters.error.empty()) return absl::NotFoundError(counters.error);
  }
  return absl::OkStatus();
}

}  // namespace ltb
