// Continuous batching of generation: every request's tokens equal the same
// prompt's from generation at batch 1, whatever the arrival order, the
// slots and what a slot held before, with random weights and with the
// trained nano models (tools/train-nano, where LTB_NANO_TEXT_DIR names
// their folder); the lengths' flags, the refusals and one LoadGen test of
// each scenario that counts tokens.
#include "serve/text_serve.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "family/registry.h"
#include "measure/accuracy.h"
#include "models/decoder_family.h"
#include "models/weights.h"
#include "serve/slot_buckets.h"
#include "spec_for.h"
#include "workloads/phases.h"

namespace ltb {
namespace {

struct Case {
  at::Tensor prompt;  // (1, P)
  int64_t output_len;
};

// Prompts of 1 to 13 tokens, outputs of 1 to 11: requests end at different
// steps, so slots empty and fill while others decode. The prompts are the
// starts of `text`'s sequences where it is given, else random ids.
std::vector<Case> MakeCases(int n, int64_t vocab, const at::Tensor& text = {}) {
  std::vector<Case> cases;
  for (int i = 0; i < n; ++i) {
    const int64_t p = 1 + (i * 5) % 13, out = 1 + (i * 7) % 11;
    cases.push_back({text.defined() ? text.narrow(0, i, 1).narrow(1, 0, p).clone()
                                    : torch::randint(0, vocab, {1, p}),
                     out});
  }
  return cases;
}

// A SlotDecoder that counts the prompt tokens each prefill runs: in all, and
// the most in one of the batcher's steps (NextStep() between them).
class CountingSlots final : public ForwardingSlots {
 public:
  explicit CountingSlots(SlotDecoder& inner) : ForwardingSlots(inner) {}
  at::Tensor Prefill(const at::Tensor& tokens, int64_t slot, int64_t position) override {
    prompt_tokens += tokens.numel();
    most_rows = std::max(most_rows, tokens.size(0));
    this_step_ += tokens.numel();
    most_a_step = std::max(most_a_step, this_step_);
    return inner_.Prefill(tokens, slot, position);
  }
  void NextStep() { this_step_ = 0; }

  int64_t prompt_tokens = 0;
  int64_t most_a_step = 0;
  int64_t most_rows = 0;  // prompts in one forward

 private:
  int64_t this_step_ = 0;
};

// Graphs as CUDA records them: a capture keeps the step without running
// it, and each replay runs it again over the same tensors.
class RecordedSteps final : public StepGraphs {
 public:
  explicit RecordedSteps(size_t* replays) : replays_(replays) {}
  size_t Capture(const std::function<void()>& step) override {
    steps_.push_back(step);
    return steps_.size() - 1;
  }
  void Replay(size_t graph) override {
    ++*replays_;
    steps_.at(graph)();
  }

 private:
  std::vector<std::function<void()>> steps_;
  size_t* replays_;
};

// A decoder that notes the shape of every static-shape step it runs: the
// active slots, the keys attended over and one past the longest row's
// position.
class NotingSlots final : public ForwardingSlots {
 public:
  struct Step {
    int64_t slots, keys, longest;
  };
  explicit NotingSlots(SlotDecoder& inner) : ForwardingSlots(inner) {}
  at::Tensor DecodeOver(const at::Tensor& tokens, const at::Tensor& positions,
                        int64_t keys) override {
    steps.push_back({tokens.size(0), keys, positions.max().item<int64_t>() + 1});
    return inner_.DecodeOver(tokens, positions, keys);
  }
  std::vector<Step> steps;
};

// A decoder that notes the shape of every step it runs and the thread that
// ran it, those before the cache is first cleared (RunTextServe's
// preparation and warm-up) apart from those after (LoadGen's test): a
// prefill's rows, length and position; a decode step's slots and keys, or
// its exact keys where it ran unbucketed.
class ShapeNoting final : public ForwardingSlots {
 public:
  using Shape = std::tuple<std::string, int64_t, int64_t, int64_t, std::thread::id>;
  explicit ShapeNoting(SlotDecoder& inner) : ForwardingSlots(inner) {}
  at::Tensor Prefill(const at::Tensor& tokens, int64_t slot, int64_t position) override {
    Note({"prefill", tokens.size(0), tokens.size(1), position,
          std::this_thread::get_id()});
    return inner_.Prefill(tokens, slot, position);
  }
  at::Tensor Decode(const at::Tensor& tokens,
                    const std::vector<int64_t>& positions) override {
    Note({"exact decode", tokens.size(0),
          *std::max_element(positions.begin(), positions.end()) + 1, 0,
          std::this_thread::get_id()});
    return inner_.Decode(tokens, positions);
  }
  at::Tensor DecodeOver(const at::Tensor& tokens, const at::Tensor& positions,
                        int64_t keys) override {
    Note({"decode", tokens.size(0), keys, 0, std::this_thread::get_id()});
    return inner_.DecodeOver(tokens, positions, keys);
  }
  void Clear() override {
    testing_ = true;
    inner_.Clear();
  }
  std::set<Shape> before, during;

 private:
  // The test's steps run on the server's thread, after Clear() on this one.
  void Note(Shape shape) { (testing_ ? during : before).insert(std::move(shape)); }
  bool testing_ = false;
};

// The folder of tools/train-nano's checkpoints and held-out text.
constexpr char kTrainedEnv[] = "LTB_NANO_TEXT_DIR";

// A decoder family, with random weights or with train-nano's trained ones,
// which predict their held-out text confidently.
struct Model {
  std::string family;
  bool trained = false;
};

std::string ModelName(const ::testing::TestParamInfo<Model>& info) {
  return info.param.family;
}

class ContinuousBatching : public ::testing::TestWithParam<Model> {
 protected:
  void SetUp() override {
    const Model& m = GetParam();
    torch::manual_seed(7);
    const DecoderOptions o = DecoderSizeOptions(m.family, "nano").value();
    model_ = MakeDecoder(m.family, o);
    at::Tensor text;
    if (m.trained) {
      const char* dir = std::getenv(kTrainedEnv);
      if (dir == nullptr || *dir == '\0') {
        GTEST_SKIP() << kTrainedEnv
                     << " is not set: set it to the folder of tools/train-nano's "
                        "checkpoints (~/.cache/libtorch-bench/nano-text) to serve the "
                        "trained models";
      }
      const std::filesystem::path folder(dir);
      BenchSpec s = SpecFor(m.family, "nano", kGenerate, 1);
      std::string file = m.family + "-nano-stdlib.safetensors";
      std::transform(file.begin(), file.end(), file.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      s.weights = (folder / file).string();
      LoadSpecWeights(*model_, s,
                      DecoderWeightNames(*FindDecoderRow(m.family).value(), o));
      text = ReadEvalTokens((folder / "stdlib-heldout.tokens").string()).value();
    }
    model_->eval();
    c10::InferenceMode guard;
    cases_ = MakeCases(12, model_->options().vocab_size(), text);
    for (const Case& c : cases_) {
      const at::Tensor tokens = GenerateWithCache(model_, c.prompt, c.output_len)[0];
      expected_.emplace_back(tokens.data_ptr<int64_t>(),
                             tokens.data_ptr<int64_t>() + tokens.numel());
      // Trained on bytes, the model writes bytes; random weights would draw
      // from the whole vocabulary.
      if (m.trained) EXPECT_LT(tokens.max().item<int64_t>(), 256) << m.family;
    }
  }

  // How decode steps run: at their exact keys, over key buckets
  // (BucketedSlots, as RunTextServe runs them), or over key buckets
  // replayed from graphs captured first.
  enum class Steps { kExact, kBucketed, kGraphed };

  // Serves the cases with `slots` slots, case order[k] arriving before step
  // arrive_at[k]; returns each case's tokens and checks the first tokens.
  std::vector<std::vector<int64_t>> Serve(int64_t slots, const std::vector<int>& order,
                                          const std::vector<int>& arrive_at,
                                          double stale = 0, Steps steps = Steps::kExact,
                                          int64_t prefill_chunk = 0) {
    c10::InferenceMode guard;
    auto cache = std::make_shared<KVCache>(model_->MakeCache(slots, kContext));
    std::shared_ptr<SlotDecoder> plain = MakeDecoderSlots(model_, cache);
    noted_ = std::make_unique<NotingSlots>(*plain);
    replays_ = 0;
    std::unique_ptr<BucketedSlots> bucketed;
    SlotDecoder* decoder = plain.get();
    if (steps != Steps::kExact) {
      bucketed = std::make_unique<BucketedSlots>(
          *noted_,
          steps == Steps::kGraphed ? std::make_unique<RecordedSteps>(&replays_) : nullptr,
          c10::kCPU, kLeastKeys);
      if (steps == Steps::kGraphed) {
        bucketed->Capture();
      } else {
        bucketed->RunEachShape();
      }
      prepared_ = noted_->steps.size();  // each shape's run before serving
      noted_->steps.clear();
      captured_ = bucketed->graphs();
      buckets_ = bucketed->buckets();
      decoder = bucketed.get();
    }
    CountingSlots counted(*decoder);
    decoder->Clear();
    if (stale != 0) {
      // What earlier sequences could have left: finite, and nothing like
      // this prompt's keys.
      for (auto* list : {&cache->keys, &cache->values}) {
        for (at::Tensor& t : *list) t.fill_(stale);
      }
    }
    std::vector<std::vector<int64_t>> got(cases_.size());
    std::vector<int64_t> first(cases_.size(), -1);
    std::vector<int> done(cases_.size(), 0);
    ContinuousBatcher batcher(
        counted, [&](const TextRequest& r, int64_t token) { first[r.id] = token; },
        [&](const TextRequest& r, const std::vector<int64_t>& tokens) {
          got[r.id] = tokens;
          ++done[r.id];
        },
        prefill_chunk);
    size_t next = 0;
    int64_t most_active = 0;
    for (int step = 0; step < 1000; ++step) {
      while (next < order.size() && arrive_at[next] <= step) {
        const Case& c = cases_[order[next]];
        batcher.Add({static_cast<uintptr_t>(order[next]), c.prompt, c.output_len, {}});
        ++next;
      }
      counted.NextStep();
      const bool more = batcher.Step();
      most_active = std::max(most_active, batcher.active());
      if (!more && next == order.size()) break;
    }
    EXPECT_LE(most_active, slots);
    for (size_t i = 0; i < cases_.size(); ++i) {
      EXPECT_EQ(done[i], 1) << "request " << i << " completed " << done[i] << " times";
      EXPECT_EQ(first[i], got[i].empty() ? -1 : got[i][0]) << "request " << i;
    }
    stats_ = batcher.stats();
    prompt_tokens_ = counted.prompt_tokens;
    most_a_step_ = counted.most_a_step;
    most_rows_ = counted.most_rows;
    return got;
  }

  void ExpectGenerated(const std::vector<std::vector<int64_t>>& got,
                       const std::string& how) {
    for (size_t i = 0; i < cases_.size(); ++i) {
      EXPECT_EQ(got[i], expected_[i])
          << how << ": request " << i << " (prompt " << cases_[i].prompt.size(1)
          << ", output " << cases_[i].output_len << ")";
    }
  }

  static constexpr int64_t kContext = 32;
  static constexpr int64_t kLeastKeys = 2;  // a prompt of 1, its first decode step
  DecoderLM model_{nullptr};
  std::vector<Case> cases_;
  std::vector<std::vector<int64_t>> expected_;
  SchedulerStats stats_;
  int64_t prompt_tokens_ = 0, most_a_step_ = 0, most_rows_ = 0;
  std::unique_ptr<NotingSlots> noted_;
  size_t replays_ = 0, captured_ = 0, prepared_ = 0;
  std::vector<int64_t> buckets_;
};

TEST_P(ContinuousBatching, EveryRequestsTokensEqualGenerationAtBatchOne) {
  const int n = static_cast<int>(cases_.size());
  std::vector<int> forward(n), reversed(n), shuffled(n);
  for (int i = 0; i < n; ++i) forward[i] = i, reversed[i] = n - 1 - i;
  shuffled = forward;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(3));
  const std::vector<int> at_once(n, 0);
  std::vector<int> staggered(n);  // one arrival every other step
  for (int i = 0; i < n; ++i) staggered[i] = 2 * i;
  for (const int64_t slots : {1, 3, 8}) {
    for (const auto& [name, order] :
         std::vector<std::pair<std::string, std::vector<int>>>{
             {"in order", forward}, {"reversed", reversed}, {"shuffled", shuffled}}) {
      for (const auto& [when, arrive] :
           std::vector<std::pair<std::string, std::vector<int>>>{
               {"at once", at_once}, {"staggered", staggered}}) {
        // At each step's exact keys, and over key buckets as served.
        for (const Steps steps : {Steps::kExact, Steps::kBucketed}) {
          ExpectGenerated(Serve(slots, order, arrive, /*stale=*/0, steps),
                          absl::StrCat(slots, " slots, ", name, ", ", when,
                                       steps == Steps::kExact ? "" : ", bucketed"));
        }
      }
    }
  }
}

TEST_P(ContinuousBatching, AReusedSlotNeverReadsWhatItsLastRequestLeft) {
  // Two slots for twelve requests: every slot is reused several times, and
  // the cache starts full of values no request wrote.
  const int n = static_cast<int>(cases_.size());
  std::vector<int> order(n), at_once(n, 0);
  for (int i = 0; i < n; ++i) order[i] = i;
  ExpectGenerated(Serve(2, order, at_once, /*stale=*/50.0), "2 slots over stale values");
  EXPECT_EQ(stats_.prefills, n);
  EXPECT_EQ(stats_.prefill_runs, n);  // prompts of twelve lengths: a forward each
  // Decode steps ran both slots most of the time: each slot took several
  // requests in turn.
  EXPECT_GT(stats_.active_slot_steps, stats_.decode_steps);
}

TEST_P(ContinuousBatching, DecodeStepsCountOneTokenPerActiveSlot) {
  const int n = static_cast<int>(cases_.size());
  std::vector<int> order(n), at_once(n, 0);
  for (int i = 0; i < n; ++i) order[i] = i;
  Serve(4, order, at_once);
  int64_t decoded = 0;  // tokens after each request's first
  for (const Case& c : cases_) decoded += c.output_len - 1;
  EXPECT_EQ(stats_.active_slot_steps, decoded);
  EXPECT_EQ(stats_.prefills, n);
}

TEST_P(ContinuousBatching, PromptsOfOneLengthArrivingTogetherPrefillInOneForward) {
  // Eight prompts of 6 tokens with outputs of 1 to 8, then the twelve of
  // other lengths: those of one length at the front of the queue join in
  // one forward over their rows, up to the free slots.
  {
    c10::InferenceMode guard;
    std::vector<Case> same;
    std::vector<std::vector<int64_t>> expected;
    for (int i = 0; i < 8; ++i) {
      same.push_back(
          {torch::randint(0, model_->options().vocab_size(), {1, 6}), 1 + (i * 3) % 8});
      const at::Tensor tokens =
          GenerateWithCache(model_, same.back().prompt, same.back().output_len)[0];
      expected.emplace_back(tokens.data_ptr<int64_t>(),
                            tokens.data_ptr<int64_t>() + tokens.numel());
    }
    cases_.insert(cases_.begin(), same.begin(), same.end());
    expected_.insert(expected_.begin(), expected.begin(), expected.end());
  }
  const int n = static_cast<int>(cases_.size());
  std::vector<int> order(n), at_once(n, 0);
  for (int i = 0; i < n; ++i) order[i] = i;
  for (const int64_t slots : {3, 8}) {
    ExpectGenerated(Serve(slots, order, at_once, /*stale=*/50.0),
                    absl::StrCat(slots, " slots"));
    // The first step prefills `slots` prompts of 6 in one forward; the
    // twelve of other lengths take a forward each.
    EXPECT_EQ(most_rows_, slots);
    EXPECT_EQ(stats_.prefills, n);
    EXPECT_LE(stats_.prefill_runs, n - slots + 1) << slots << " slots";
    EXPECT_GE(stats_.prefill_runs, 13) << slots << " slots";
    int64_t tokens = 0;
    for (const Case& c : cases_) tokens += c.prompt.size(1);
    EXPECT_EQ(prompt_tokens_, tokens);
  }
}

TEST_P(ContinuousBatching, PromptsInChunksGiveTheSameTokens) {
  // Chunks of 1 and 4 prompt tokens a step, with slots freed while a
  // prompt is part-way in (its rows then move down with the active ones),
  // over stale values.
  const int n = static_cast<int>(cases_.size());
  std::vector<int> order(n), at_once(n, 0), staggered(n);
  for (int i = 0; i < n; ++i) order[i] = i, staggered[i] = 2 * i;
  for (const int64_t chunk : {1, 4}) {
    for (const int64_t slots : {1, 3}) {
      for (const auto* arrive : {&at_once, &staggered}) {
        ExpectGenerated(
            Serve(slots, order, *arrive, /*stale=*/50.0, Steps::kExact, chunk),
            absl::StrCat("chunks of ", chunk, ", ", slots, " slots"));
        int64_t tokens = 0, least_runs = 0;  // every prompt once, a chunk a run
        for (const Case& c : cases_) {
          tokens += c.prompt.size(1);
          least_runs += (c.prompt.size(1) + chunk - 1) / chunk;
        }
        EXPECT_EQ(prompt_tokens_, tokens);
        EXPECT_EQ(most_a_step_, chunk) << "chunks of " << chunk;
        EXPECT_GE(stats_.prefill_runs, least_runs);
        EXPECT_EQ(stats_.prefills, n);
      }
    }
  }
}

TEST_P(ContinuousBatching, BucketedDecodeStepsGiveTheSameTokensEachShapeRunFirst) {
  {
    // Two requests whose steps reach past 16 keys, so that both buckets
    // (16 and the context's 32) serve.
    c10::InferenceMode guard;
    for (const auto& [prompt, output] : {std::pair<int64_t, int64_t>{14, 12}, {20, 10}}) {
      cases_.push_back(
          {torch::randint(0, model_->options().vocab_size(), {1, prompt}), output});
      const at::Tensor tokens =
          GenerateWithCache(model_, cases_.back().prompt, output)[0];
      expected_.emplace_back(tokens.data_ptr<int64_t>(),
                             tokens.data_ptr<int64_t>() + tokens.numel());
    }
  }
  const int n = static_cast<int>(cases_.size());
  std::vector<int> order(n), at_once(n, 0), staggered(n);
  for (int i = 0; i < n; ++i) order[i] = i, staggered[i] = 2 * i;
  for (const Steps steps : {Steps::kBucketed, Steps::kGraphed}) {
    const bool graphed = steps == Steps::kGraphed;
    for (const int64_t slots : {1, 3, 8}) {
      for (const auto& [when, arrive] :
           std::vector<std::pair<std::string, std::vector<int>>>{
               {"at once", at_once}, {"staggered", staggered}}) {
        const std::string how =
            absl::StrCat(slots, " slots, ", graphed ? "graphed" : "eager", ", ", when);
        ExpectGenerated(Serve(slots, order, arrive, /*stale=*/50.0, steps), how);
        // Every active-slot count with every bucket, run once (and
        // captured, graphed) before serving; then one step of those shapes
        // per decode step: one replay each, graphed.
        EXPECT_EQ(buckets_, (std::vector<int64_t>{16, 32}));
        const size_t shapes = static_cast<size_t>(slots) * buckets_.size();
        EXPECT_EQ(prepared_, shapes) << how;
        EXPECT_EQ(captured_, graphed ? shapes : 0) << how;
        EXPECT_EQ(replays_, graphed ? static_cast<size_t>(stats_.decode_steps) : 0)
            << how;
        ASSERT_EQ(noted_->steps.size(), static_cast<size_t>(stats_.decode_steps)) << how;
        std::set<std::pair<int64_t, int64_t>> used;
        for (const NotingSlots::Step& step : noted_->steps) {
          // The smallest bucket that holds the longest row.
          const int64_t bucket = step.longest <= 16 ? 16 : 32;
          EXPECT_EQ(step.keys, bucket)
              << how << ": " << step.slots << " slots, longest " << step.longest;
          used.insert({step.slots, step.keys});
        }
        std::set<int64_t> keys, active;
        for (const auto& [slots_used, keys_used] : used) {
          active.insert(slots_used);
          keys.insert(keys_used);
        }
        EXPECT_EQ(keys, (std::set<int64_t>{16, 32})) << how;
        EXPECT_EQ(active.size() > 1, slots > 1) << how;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Decoders, ContinuousBatching,
                         ::testing::Values(Model{"GPT2"}, Model{"Llama"}), ModelName);
// Run by tools/tests/test_train_nano.py, which trains the models first.
INSTANTIATE_TEST_SUITE_P(Trained, ContinuousBatching,
                         ::testing::Values(Model{"GPT2", true}, Model{"Llama", true}),
                         ModelName);

TEST(ContinuousServer, ServesFromAnotherThreadAndDrains) {
  torch::manual_seed(1);
  DecoderLM model = MakeDecoder("GPT2", DecoderSizeOptions("GPT2", "nano").value());
  c10::InferenceMode guard;
  auto cache = std::make_shared<KVCache>(model->MakeCache(3, 24));
  std::shared_ptr<SlotDecoder> decoder = MakeDecoderSlots(model, cache);
  decoder->Clear();
  std::mutex mu;
  std::map<uintptr_t, std::vector<int64_t>> got;
  std::vector<TextRequest> requests;
  for (uintptr_t i = 0; i < 7; ++i) {
    requests.push_back({i,
                        torch::randint(0, 1000, {1, 4 + static_cast<int64_t>(i)}),
                        static_cast<int64_t>(2 + i),
                        {}});
  }
  {
    ContinuousServer server(
        *decoder, [](const TextRequest&, int64_t) {},
        [&](const TextRequest& r, const std::vector<int64_t>& t) {
          std::lock_guard<std::mutex> lock(mu);
          got[r.id] = t;
        });
    server.Submit({requests.begin(), requests.begin() + 3});
    server.Submit({requests.begin() + 3, requests.end()});
    server.Drain();
    EXPECT_EQ(server.stats().prefills, 7);
  }
  ASSERT_EQ(got.size(), 7u);
  for (const TextRequest& r : requests) {
    const at::Tensor expected = GenerateWithCache(model, r.prompt, r.output_len)[0];
    EXPECT_EQ(got[r.id],
              std::vector<int64_t>(expected.data_ptr<int64_t>(),
                                   expected.data_ptr<int64_t>() + r.output_len));
  }
}

TEST(TextServeFlags, LengthsAreAValueOrARangeAndOutputsAtLeastTwo) {
  EXPECT_EQ(ParseLengthRange("prompt_len", "32", 1).value(),
            (std::pair<int64_t, int64_t>{32, 32}));
  EXPECT_EQ(ParseLengthRange("output_len", "16:64", 2).value(),
            (std::pair<int64_t, int64_t>{16, 64}));
  for (const char* bad : {"0", "1", "1:8", "8:4", "x", "4:", ":4", "2:3:4"}) {
    const absl::StatusOr<std::pair<int64_t, int64_t>> r =
        ParseLengthRange("output_len", bad, 2);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--output_len"), std::string::npos);
    EXPECT_NE(r.status().message().find("2 <= MIN <= MAX"), std::string::npos);
  }
  EXPECT_FALSE(ParseLengthRange("prompt_len", "0", 1).ok());
  ServeSettings serve;
  serve.scenario = "Offline";
  serve.phase = "generate";
  EXPECT_TRUE(ValidateServe(serve).ok());  // generate is a phase that serves
  serve.output_min = 1;
  EXPECT_FALSE(ValidateTextServe(serve).ok());
  serve.output_min = 2;
  EXPECT_TRUE(ValidateTextServe(serve).ok());
  serve.tpot_bound_ms = -1;
  EXPECT_FALSE(ValidateTextServe(serve).ok());
  serve.tpot_bound_ms = 0;
  serve.prefill_chunk = -1;
  const absl::Status chunk = ValidateTextServe(serve);
  EXPECT_NE(chunk.message().find("--prefill_chunk=-1: valid: a whole number of prompt "
                                 "tokens >= 1, or 0 for whole prompts"),
            std::string::npos)
      << chunk.message();
}

TEST(TextServeFlags, DrawsAreSeededAndWithinTheirRange) {
  std::vector<int64_t> seen;
  for (uint64_t i = 0; i < 200; ++i) {
    const int64_t n = DrawLength(kTextServeSeed, i, 1, 16, 64);
    EXPECT_GE(n, 16);
    EXPECT_LE(n, 64);
    EXPECT_EQ(n, DrawLength(kTextServeSeed, i, 1, 16, 64));
    seen.push_back(n);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_GT(std::unique(seen.begin(), seen.end()) - seen.begin(), 30);
  // pybench draws the same (tools/ltb/pysuite/textserve.py): pinned values.
  EXPECT_EQ(RequestDraw(55, 0, 0), 0x6e1351b2349f331cull);
}

TEST(TextServeName, CarriesTheSlotsAndTheLengthsOrTheirRanges) {
  BenchSpec s = TextServeSpec("GPT2", "Server");
  // Its test's bounds of 5 s, not LoadGen's 100 ms, are the name's too.
  EXPECT_EQ(
      s.Name(),
      "GPT2/nano/cpu/serve/scenario:Server/qps:50/max_batch:4/prompt:3:12/output:2:8/"
      "ttft_bound_ms:5000/tpot_bound_ms:5000/fp32");
  s.serve.prompt_min = 0;
  s.serve.output_min = 8;
  s.serve.scenario = "Offline";
  EXPECT_EQ(s.Name(),
            "GPT2/nano/cpu/serve/scenario:Offline/samples:16/max_batch:4/prompt:12/"
            "output:8/fp32");
}

TEST(TextServePlan, PromptsBeyondTheContextAreRefusedAndEverySlotsCacheCounted) {
  const Family f = DecoderFamily(*FindDecoderRow("GPT2").value());
  BenchSpec s = SpecFor("GPT2", "nano", kGenerate, 4);
  s.prompt = 1020;
  s.new_tokens = 8;
  const absl::StatusOr<Plan> beyond = f.plan(s);
  ASSERT_FALSE(beyond.ok());
  EXPECT_NE(beyond.status().message().find("has 1024"), std::string::npos)
      << beyond.status().message();
  s.prompt = 100;
  const int64_t four = f.plan(s).value().memory.activations;
  s.batch = 8;
  const int64_t eight = f.plan(s).value().memory.activations;
  const DecoderOptions o = DecoderSizeOptions("GPT2", "nano").value();
  // Four more slots: their keys and values at every layer and position.
  EXPECT_GE(eight - four, 2 * o.num_layers() * 4 * (100 + 8) * o.d_model() * 4);
}

// One LoadGen test of `spec` through the family's own build, as bench runs
// it: its status, counters and label.
struct TextServeRun {
  absl::Status status;
  std::map<std::string, double> counters;
  std::string label;
  std::string error;  // the benchmark's, as Google Benchmark reports it
};

// `wrap`, if given, decorates the workload's slots for the test.
TextServeRun RunOneTextServe(
    const BenchSpec& spec, const std::string& name,
    const std::function<SlotDecoder&(SlotDecoder&)>& wrap = nullptr) {
  BenchSpec served = spec;
  served.phase = kGenerate;
  served.serve = ServeSettings{};
  const Family f = DecoderFamily(*FindDecoderRow(spec.family).value());
  torch::manual_seed(0);
  std::unique_ptr<Workload> w = f.build(served);
  TextServeRun out;
  if (w->Slots() == nullptr) {
    out.status = absl::InternalError("no slots");
    return out;
  }
  EXPECT_EQ(w->Slots()->slots(), spec.serve.max_batch);
  EXPECT_EQ(w->Slots()->context(), spec.prompt + spec.new_tokens);
  benchmark::RegisterBenchmark(
      name.c_str(),
      [&](benchmark::State& state) {
        SlotDecoder& slots = *w->Slots();
        out.status = RunTextServe(state, wrap ? wrap(slots) : slots, spec);
        if (!out.status.ok()) {  // as the runner does
          state.SkipWithError(std::string(out.status.message()).c_str());
        }
      })
      ->Iterations(1)
      ->UseManualTime();
  struct Collect : benchmark::BenchmarkReporter {
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>& r) override {
      runs.insert(runs.end(), r.begin(), r.end());
    }
    std::vector<Run> runs;
  } reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter, "^" + name + "/");
  EXPECT_EQ(reporter.runs.size(), 1u);
  if (reporter.runs.size() != 1) return out;
  for (const auto& [key, c] : reporter.runs[0].counters) out.counters[key] = c.value;
  out.label = reporter.runs[0].report_label;
  out.error = reporter.runs[0].error_occurred ? reporter.runs[0].error_message : "";
  return out;
}

BenchSpec LoggedTextServeSpec(const std::string& family, const std::string& scenario) {
  BenchSpec spec = TextServeSpec(family, scenario);
  spec.serve.log_dir =
      (std::filesystem::temp_directory_path() / "ltb_text_serve").string();
  return spec;
}

// One LoadGen test per scenario: the tokens LoadGen counts and, Server, the
// token latencies.
TEST(RunTextServe, ReportsTokensAndTokenLatencies) {
  for (const std::string scenario : {"Offline", "Server"}) {
    TextServeRun run =
        RunOneTextServe(LoggedTextServeSpec("Llama", scenario), "TextServe_" + scenario);
    ASSERT_TRUE(run.status.ok()) << run.status.message();
    std::map<std::string, double>& counters = run.counters;
    EXPECT_GT(counters["tokens/s"], 0) << scenario;
    EXPECT_GT(counters["samples/s"], 0) << scenario;
    EXPECT_GT(counters["prefills"], 15) << scenario;
    EXPECT_GE(counters["mean_active_slots"], 1) << scenario;
    EXPECT_LE(counters["mean_active_slots"], 4) << scenario;
    EXPECT_NEAR(counters["prefill_share"] + counters["decode_share"], 1, 1e-9);
    if (scenario == "Server") {
      EXPECT_GT(counters["ttft_p99_ms"], 0);
      EXPECT_GE(counters["ttft_p99_ms"], counters["ttft_p50_ms"]);
      EXPECT_GT(counters["tpot_p99_ms"], 0);
      EXPECT_EQ(counters.count("goodput"), 1u);
      EXPECT_LE(counters["goodput"], counters["samples/s"] + 1e-9);
    }
  }
}

// Every shape LoadGen's test runs ran before it on the same thread
// (RunTextServe's warm-up, on the server's thread), so that a device that
// builds a plan for each new shape and keeps it per thread (cuDNN's
// attention) builds none inside a request's latency: prompts of one length,
// which join in up to max_batch rows (Offline), and of a range (Server).
TEST(RunTextServe, EveryShapeTheTestRunsRanBeforeIt) {
  for (const std::string scenario : {"Offline", "Server"}) {
    BenchSpec spec = LoggedTextServeSpec("GPT2", scenario);
    const bool fixed = scenario == "Offline";
    if (fixed) spec.serve.prompt_min = spec.serve.output_min = 0;
    std::unique_ptr<ShapeNoting> noting;
    const TextServeRun run = RunOneTextServe(
        spec, "TextServe_Shapes" + scenario, [&](SlotDecoder& slots) -> SlotDecoder& {
          noting = std::make_unique<ShapeNoting>(slots);
          return *noting;
        });
    ASSERT_TRUE(run.status.ok()) << run.status.message();
    ASSERT_NE(noting, nullptr);
    std::set<std::string> kinds;
    int64_t most_rows = 0;
    for (const ShapeNoting::Shape& shape : noting->during) {
      const auto& [kind, rows, length, position, thread] = shape;
      kinds.insert(kind);
      if (kind == "prefill") most_rows = std::max(most_rows, rows);
      EXPECT_NE(thread, std::this_thread::get_id()) << "served on the server's thread";
      EXPECT_EQ(noting->before.count(shape), 1u)
          << scenario << ": " << kind << " " << rows << " x " << length << " at "
          << position << " ran first in the test, or first on its thread";
    }
    EXPECT_EQ(kinds, (std::set<std::string>{"prefill", "decode"})) << scenario;
    if (fixed) EXPECT_GT(most_rows, 1) << "prompts of one length joined";
  }
}

// SingleStream's and MultiStream's expected latency is a query served to its
// end in the warm-up: LoadGen's 1 and 8 ms ran out of queries on a fast
// model, and the test ended early, invalid.
TEST(RunTextServe, TheStreamsExpectedLatencyIsAQueryServedInTheWarmUp) {
  for (const std::string scenario : {"SingleStream", "MultiStream"}) {
    BenchSpec spec = LoggedTextServeSpec("GPT2", scenario);
    spec.serve.samples_per_query = 3;
    spec.serve.output_min = spec.new_tokens;  // 8 tokens every request
    TextServeRun run = RunOneTextServe(spec, "TextServe_Stream" + scenario);
    ASSERT_TRUE(run.status.ok()) << run.status.message();
    std::ifstream in(std::filesystem::path(ServeLogFolder(spec.serve.log_dir, spec)) /
                     "mlperf_log_detail.txt");
    std::stringstream text;
    text << in.rdbuf();
    const std::map<std::string, std::string> detail = ParseDetailLog(text.str());
    const bool single = scenario == "SingleStream";
    EXPECT_EQ(detail.at("effective_samples_per_query"), single ? "1" : "3");
    const double expected = std::stod(detail.at(absl::StrCat(
        "requested_", single ? "single" : "multi", "_stream_expected_latency_ns")));
    EXPECT_GT(expected, 0) << scenario;
    EXPECT_NE(expected, single ? 1e6 : 8e6) << scenario;
    // MultiStream's tokens/s counts the span its samples/s does (a query's
    // samples over its mean latency, without the gaps between queries that
    // LoadGen's own tokens/s holds): 8 tokens a sample, exactly.
    if (!single) {
      EXPECT_NEAR(run.counters["tokens/s"], 8 * run.counters["samples/s"],
                  1e-9 * run.counters["tokens/s"]);
    }
  }
}

// --find_peak: LoadGen's FindPeakPerformance within the TTFT and TPOT
// bounds. A TPOT bound no step meets stops the search at its start, with
// LoadGen's reason (how a found peak is read: CountersFromLog's tests; a
// found peak's rate depends on the machine's speed, which a test here
// cannot know).
TEST(RunTextServe, FindPeakSearchesWithinTheTokenBoundsOrSaysWhyNot) {
  BenchSpec spec = LoggedTextServeSpec("GPT2", "Server");
  spec.serve.find_peak = true;
  spec.serve.tpot_bound_ms = 1e-6;
  TextServeRun missed = RunOneTextServe(spec, "TextServe_PeakMissed");
  // No peak: the benchmark's error (its time would read as a rate), which
  // names the starting test's figures (an error has no counters); the
  // label stays.
  ASSERT_FALSE(missed.status.ok());
  EXPECT_TRUE(absl::StartsWith(missed.error,
                               "no peak: the starting rate 50 QPS misses the bound: "))
      << missed.error;
  EXPECT_TRUE(absl::StrContains(missed.error, "ttft_p99_ms ")) << missed.error;
  EXPECT_TRUE(absl::StrContains(missed.error, "tpot_p99_ms ")) << missed.error;
  EXPECT_TRUE(absl::EndsWith(missed.error, "; search from a lower --target_qps"))
      << missed.error;
  EXPECT_TRUE(missed.counters.empty());
  EXPECT_TRUE(absl::StartsWith(
      missed.label,
      "scenario:Server no peak: the starting rate 50 QPS misses the bound: "))
      << missed.label;
  EXPECT_TRUE(absl::StrContains(missed.label, "TPOT constrain not met")) << missed.label;
}

}  // namespace
}  // namespace ltb
