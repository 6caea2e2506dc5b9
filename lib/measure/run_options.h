// How every benchmark of a run is measured: warm-up, seed, peaks, profiling.
#pragma once

#include <cstdint>
#include <string>

#include "peaks/peaks.h"

namespace ltb {

struct RunOptions {
  double warmup_seconds = 0.5;  // warm up at least this long ...
  int warmup_steps = 1;         // ... and at least this many steps
  int warmup_epochs = 1;        // train_epoch: whole epochs instead
  uint64_t seed = 0;
  // Refuse what cannot fit before building it (--memory_guard); off, a
  // benchmark runs into the device's out-of-memory error, which is caught.
  bool memory_guard = true;
  // Peaks for the mfu and mbu counters; prepared before the run, a measured
  // one raised by a benchmark that beats it.
  Peaks* peaks = nullptr;
  // --profile: profile this many steps apart from the timed ones, into dir.
  std::string profile_dir;
  int profile_steps = 5;
  // --print_tokens: generate phases print the token ids of one generation
  // (outside the timed steps) to stderr, one line a sequence.
  bool print_tokens = false;
  // --eval_tokens: a held-out text's token ids (measure/accuracy.h,
  // ReadEvalTokens) that language models' accuracy check scores: ppl,
  // ppl_ratio, and the divergence over its positions. Empty: none.
  std::string eval_tokens;
};

}  // namespace ltb
