// The train_epoch phase of the families that train on token batches
// (EncDec, Transformer): epochs of Trainer steps over a dataset in memory or
// in shards on disk (prepared once, by one process a machine), with GPU
// utilisation sampled between the measured epochs.
#pragma once

#include <memory>

#include "family/family.h"
#include "workloads/loader.h"
#include "workloads/trainer.h"

namespace ltb {

struct DatasetShape {
  int64_t sample_tokens = 0;  // tokens per sample
  int64_t vocab = 0;
};

std::unique_ptr<Workload> MakeEpochWorkload(const BenchSpec& spec, TrainFns fns,
                                            const DatasetShape& shape);

// Samples per epoch on this rank and in total, for the plan.
int64_t EpochSamples(const BenchSpec& spec);

// Adds to `m` the host memory an epoch's dataset of `sample_tokens` a sample
// takes when it is held in memory (--data=memory): its shards and then
// their concatenation, int64 tokens, while it is made. On the CPU that is
// the run's memory; elsewhere the host's, beside the model's build there
// (`params` fp32 unless the plan says otherwise). Nothing for other phases,
// nor from disk (a few prefetched batches).
void AddEpochData(const BenchSpec& spec, int64_t sample_tokens, int64_t params,
                  MemoryEstimate* m);

}  // namespace ltb
