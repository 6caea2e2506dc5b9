#include "suite/facts.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "device/backend.h"
#include "device/datasheets.h"
#include "device/device.h"
#include "measure/counters.h"
#include "measure/timed_loop.h"
#include "peaks/cpu_bandwidth.h"
#include "suite/sweep.h"
#include "workloads/generation.h"
#include "workloads/loader.h"

namespace ltb {
namespace {

const char* KindName(PhaseKind kind) {
  return kind == PhaseKind::kTraining ? "training" : "inference";
}

const char* ShapeName(Shape shape) {
  switch (shape) {
    case Shape::kNone:
      return "none";
    case Shape::kBatch:
      return "batch";
    case Shape::kSequence:
      return "sequence";
    case Shape::kGenerate:
      return "generate";
  }
  return "";
}

// A case on the CPU at the family's default shapes, as a filter runs it.
BenchSpec CaseSpec(const Family& family, const Case& c) {
  BenchSpec spec;
  spec.family = family.name;
  spec.phase_before_device = family.phase_before_device;
  spec.size = c.size;
  SetPhase(c.phase, &spec);
  spec.dtype = c.dtype.value_or(c10::kFloat);
  spec.batch =
      c.default_batch > 0 ? c.default_batch : std::max<int64_t>(family.default_batch, 1);
  spec.seq = family.default_seqs.empty() ? 0 : family.default_seqs.front();
  spec.prompt = c.fixed_prompt > 0 ? c.fixed_prompt : kDefaultPrompt;
  spec.new_tokens = kDefaultNewTokens;
  return spec;
}

// A size's parameter count, from the plan of its first case at the
// family's default shapes; -1 where no plan gives one.
int64_t ParamsOf(const Family& family, const std::string& size) {
  for (const Case& c : family.Cases()) {
    if (c.size != size) continue;
    absl::StatusOr<Plan> plan = family.PlanFor(CaseSpec(family, c));
    if (plan.ok()) return plan->params;
  }
  return -1;
}

// The counters a case reports on the CPU at its default shapes (its plan's,
// its workload's), and the utilisations it reports where a peak is known.
nlohmann::ordered_json CountersOf(const Family& family, const Case& c) {
  absl::StatusOr<Plan> plan = family.PlanFor(CaseSpec(family, c));
  CounterNames names = plan.ok() ? PlannedCounterNames(*plan) : CounterNames{};
  if (c.phase.name == kGenerate) {  // transcribe reports its own
    for (const std::string& name : GenerationCounterNames())
      names.counters.push_back(name);
  }
  if (c.phase.iterations == Iterations::kEpochs) names.counters.push_back("epoch_s");
  std::sort(names.counters.begin(), names.counters.end());
  names.counters.erase(std::unique(names.counters.begin(), names.counters.end()),
                       names.counters.end());
  return {{"counters", names.counters}, {"utilisation", names.utilisation}};
}

}  // namespace

std::string FamilyFactsJson(const std::vector<Family>& families) {
  nlohmann::ordered_json doc;
  doc["default_new_tokens"] = kDefaultNewTokens;
  doc["default_prompt"] = kDefaultPrompt;
  doc["default_dataset_samples"] = kDefaultDatasetSamples;
  doc["default_batch_timeout_us"] = kDefaultBatchTimeoutUs;
  doc["loadgen_samples_per_query"] = kLoadGenSamplesPerQuery;
  doc["default_target_qps"] = kDefaultTargetQps;
  doc["default_offline_samples"] = OfflineQuerySamples(ServeSettings{});
  doc["loadgen_bound_ms"] = kLoadGenBoundMs;
  doc["default_suite_min_time"] = kDefaultSuiteMinTime;
  // How a run measures, where the Python suite must do the same.
  doc["measurement"] = {{"kept_samples", Measured::kKeptSamples},
                        {"growth_window", kGrowthWindow},
                        {"prefetch_batches", EpochSettings{}.prefetch_batches},
                        {"caches_from_memory", kCachesFromMemory}};
  // What each device kind's kernels take (--quant): the activation dtypes.
  nlohmann::ordered_json devices;
  for (const char* kind : {"cpu", "cuda", "mps"}) {
    const absl::StatusOr<c10::Device> device = ParseDevice(kind);
    if (!device.ok()) continue;
    const Capabilities caps = BackendOf(*device).Caps();
    const auto names = [](const std::vector<c10::ScalarType>& dtypes) {
      std::vector<std::string> out;
      for (const c10::ScalarType d : dtypes) out.push_back(DtypeName(d));
      return out;
    };
    devices[kind] = {{"int8_weight_dtypes", names(caps.int8_weight_dtypes)},
                     {"int4_weight_dtypes", names(caps.int4_weight_dtypes)},
                     {"dynamic_int8_linear", caps.dynamic_int8_linear}};
  }
  doc["devices"] = devices;
  // The GPUs' datasheet peaks mfu and mbu divide by, in match order (see
  // LookupDatasheet): the Python suite divides by the same.
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (const KnownGpu& g : KnownGpus()) {
    const DatasheetPeaks& p = g.peaks;
    gpus.push_back({{"words", g.words},
                    {"fp32", p.fp32},
                    {"bf16", p.bf16},
                    {"fp16", p.fp16},
                    {"tf32", p.tf32},
                    {"bandwidth", p.bandwidth},
                    {"model", p.model},
                    {"source", p.source}});
  }
  doc["datasheets"] = gpus;
  // The words a name may hold beside an entry's own (and any memory size).
  doc["datasheet_neutral_words"] = NeutralNameWords();
  doc["dtypes"] = {"fp32", "bf16", "fp16"};
  doc["quants"] = kQuantNames;
  doc["quant_groups"] = kQuantGroups;
  doc["default_suite"] = DefaultSuiteFilter(families);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Family& family : families) {
    nlohmann::ordered_json f;
    f["name"] = family.name;
    nlohmann::ordered_json sizes = nlohmann::ordered_json::array();
    for (const std::string& size : family.sizes) {
      sizes.push_back({{"name", size}, {"params", ParamsOf(family, size)}});
    }
    f["sizes"] = sizes;
    // The size table, every option of each size's model: what the Python
    // twins must equal.
    f["size_cards"] = family.size_cards
                          ? nlohmann::ordered_json::parse(family.size_cards())
                          : nlohmann::ordered_json::array();
    // The phases in the order the family registers them.
    std::vector<std::string> phases;
    nlohmann::ordered_json cases = nlohmann::ordered_json::array();
    for (const Case& c : family.Cases()) {
      if (std::find(phases.begin(), phases.end(), c.phase.name) == phases.end())
        phases.push_back(c.phase.name);
      nlohmann::ordered_json one = {{"size", c.size},
                                    {"phase", c.phase.name},
                                    {"kind", KindName(c.phase.kind)},
                                    {"shape", ShapeName(c.phase.shape)},
                                    {"data_parallel", c.phase.data_parallel},
                                    {"epochs", c.phase.iterations == Iterations::kEpochs},
                                    {"sweeps_dtype", c.sweeps_dtype},
                                    {"tf32", c.tf32},
                                    {"graphs", c.graphs},
                                    {"fixed_prompt", c.fixed_prompt},
                                    {"default_batch", c.default_batch}};
      if (c.dtype.has_value()) one["dtype"] = DtypeName(*c.dtype);
      const nlohmann::ordered_json counters = CountersOf(family, c);
      one["counters"] = counters["counters"];
      one["utilisation"] = counters["utilisation"];
      cases.push_back(one);
    }
    f["phases"] = phases;
    f["cases"] = cases;
    f["suite"] = family.suite;
    f["default_batch"] = family.default_batch;
    f["default_seqs"] = family.default_seqs;
    f["suite_cpu_batch"] = family.suite_cpu_batch;
    f["suite_cpu_seqs"] = family.suite_cpu_seqs;
    f["suite_cpu_new_tokens"] = family.suite_cpu_new_tokens;
    f["suite_cpu_prompt"] = family.suite_cpu_prompt;
    f["generates_at_depth"] = family.generates_at_depth;
    f["loads_weights"] = family.loads_weights;
    f["packs_cpu_linears"] = family.packs_cpu_linears;
    f["quantizes"] = family.quantizes;
    // The phases --scenario serves, the first unless --serve_phase names
    // another; none: the family does not serve.
    f["serve_phases"] = family.serves ? family.serve_phases : std::vector<std::string>{};
    f["sweeps_memory_format"] = family.sweeps_memory_format;
    f["phase_before_device"] = family.phase_before_device;
    nlohmann::ordered_json constants = nlohmann::ordered_json::object();
    for (const auto& [name, value] : family.constants) constants[name] = value;
    f["constants"] = constants;
    list.push_back(f);
  }
  doc["families"] = list;
  return doc.dump(2);
}

}  // namespace ltb
