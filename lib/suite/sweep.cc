#include "suite/sweep.h"

#include <algorithm>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device/device.h"

namespace ltb {
namespace {

std::string EscapeRegex(const std::string& text) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(text, special, R"(\$&)");
}

// Batches and (seq, 0) or (prompt, new tokens) lengths: one (0, 0) where
// neither applies.
struct Shapes {
  std::vector<int64_t> batches;
  std::vector<std::pair<int64_t, int64_t>> lengths;
};

// The shapes a case runs at on `device`: the flags', else the family's
// defaults. The default suite alone runs smaller shapes on the CPU, so that
// it measures several steps of every benchmark on a few cores; the other
// devices measure those too there, beside their own, so that the speedup
// over the CPU compares the same work (`has_cpu`).
std::vector<Shapes> ShapesOn(const Family& family, const Case& c, const Sweep& sweep,
                             const c10::Device& device, bool has_cpu) {
  auto shapes = [&](int64_t batch, const std::vector<int64_t>& seqs, int64_t new_tokens) {
    Shapes out;
    out.batches = sweep.batches.empty() ? std::vector<int64_t>{batch} : sweep.batches;
    if (c.phase.shape == Shape::kNone) out.batches = {0};
    if (c.phase.shape == Shape::kSequence) {
      for (const int64_t t : sweep.seqs.empty() ? seqs : sweep.seqs) {
        out.lengths.emplace_back(t, 0);
      }
    } else if (c.phase.shape == Shape::kGenerate) {
      const std::vector<int64_t> prompts =
          c.fixed_prompt > 0 ? std::vector<int64_t>{c.fixed_prompt} : sweep.prompts;
      const std::vector<int64_t> news =
          !sweep.new_tokens.empty()
              ? sweep.new_tokens
              : std::vector<int64_t>{new_tokens > 0 ? new_tokens : kDefaultNewTokens};
      for (const int64_t p : prompts) {
        for (const int64_t n : news) out.lengths.emplace_back(p, n);
      }
    } else {
      out.lengths.emplace_back(0, 0);
    }
    return out;
  };
  const int64_t batch = c.default_batch > 0 ? c.default_batch : family.default_batch;
  const Shapes usual = shapes(batch, family.default_seqs, 0);
  if (!sweep.default_suite) return {usual};
  const Shapes cpu = shapes(
      c.default_batch > 0 || family.suite_cpu_batch <= 0 ? batch : family.suite_cpu_batch,
      family.suite_cpu_seqs.empty() ? family.default_seqs : family.suite_cpu_seqs,
      family.suite_cpu_new_tokens);
  const bool differ = cpu.batches != usual.batches || cpu.lengths != usual.lengths;
  if (BackendOf(device).Caps().host) return {cpu};
  if (has_cpu && differ) return {usual, cpu};
  return {usual};
}

}  // namespace

std::vector<Registration> ExpandSweep(const std::vector<Family>& families,
                                      const Sweep& sweep) {
  std::vector<Registration> out;
  const bool has_cpu =
      sweep.default_suite &&
      std::any_of(sweep.devices.begin(), sweep.devices.end(),
                  [](const c10::Device& d) { return BackendOf(d).Caps().host; });
  for (const Family& family : families) {
    const std::vector<bool> formats =
        family.sweeps_memory_format ? sweep.channels_last : std::vector<bool>{false};
    for (const Case& c : family.Cases()) {
      const std::vector<int64_t> depths =
          c.phase.shape == Shape::kGenerate && family.generates_at_depth
              ? sweep.depths
              : std::vector<int64_t>{0};
      // A case whose dtype its model fixes runs in that one; others sweep
      // --dtype, or run in fp32 when they do not sweep it.
      std::vector<c10::ScalarType> dtypes;
      if (c.dtype.has_value()) {
        dtypes = {*c.dtype};
      } else {
        for (const c10::ScalarType d : sweep.dtypes) {
          if (c.sweeps_dtype || d == c10::kFloat) dtypes.push_back(d);
        }
      }
      // What every benchmark of the case shares; the loops below set the rest.
      BenchSpec base;
      base.family = family.name;
      base.phase_before_device = family.phase_before_device;
      base.size = c.size;
      SetPhase(c.phase, &base);
      base.sync = sweep.sync;
      if (c.phase.data_parallel) base.bucket_mb = sweep.bucket_mb;
      base.backend = c.backend;
      for (const c10::Device& device : sweep.devices) {
        if (c.needs_host_transfers && !BackendOf(device).Caps().host_transfers) continue;
        for (const auto& [case_batches, lengths] :
             ShapesOn(family, c, sweep, device, has_cpu)) {
          for (const c10::ScalarType dtype : dtypes) {
            // Packed linears: CPU inference of the families whose models have them.
            const bool linears = family.packs_cpu_linears &&
                                 BackendOf(device).Caps().packed_linears &&
                                 c.phase.kind == PhaseKind::kInference;
            const std::vector<bool> packs =
                linears ? sweep.pack_cpu_linears : std::vector<bool>{false};
            // TF32: fp32 matmuls and convolutions on devices that have it.
            const std::vector<bool> tf32s = dtype == c10::kFloat && c.tf32 &&
                                                    !c.dtype.has_value() &&
                                                    BackendOf(device).Caps().tf32
                                                ? sweep.tf32
                                                : std::vector<bool>{false};
            // Graphs: inference steps captured once on devices that have them.
            const std::vector<bool> graphs = c.phase.kind == PhaseKind::kInference &&
                                                     c.graphs && c.backend.empty() &&
                                                     BackendOf(device).Caps().graphs
                                                 ? sweep.graphs
                                                 : std::vector<bool>{false};
            for (const bool channels_last : formats) {
              for (const bool pack : packs) {
                for (const bool tf32 : tf32s) {
                  for (const bool graph : graphs) {
                    for (const int64_t batch : case_batches) {
                      for (const auto& [first, second] : lengths) {
                        for (const int64_t depth : depths) {
                          BenchSpec spec = base;
                          spec.device = device;
                          spec.dtype = dtype;
                          spec.batch = batch;
                          if (c.phase.shape == Shape::kGenerate) {
                            spec.prompt = first;
                            spec.new_tokens = second;
                          } else {
                            spec.seq = first;
                          }
                          spec.channels_last = channels_last;
                          spec.pack_cpu_linears = pack;
                          spec.tf32 = tf32;
                          spec.graph = graph;
                          spec.depth = depth;
                          spec.weights = sweep.weights;
                          out.push_back({&family, spec, c.unit});
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

std::string DefaultSuiteFilter(const std::vector<Family>& families) {
  std::vector<std::string> parts;
  for (const Family& family : families) {
    if (family.replaces_default_suite) {
      return absl::StrCat("^", EscapeRegex(family.name), "/(",
                          absl::StrJoin(family.suite, "|"), ")");
    }
  }
  for (const Family& family : families) {
    if (family.suite.empty()) continue;
    parts.push_back(absl::StrCat(EscapeRegex(family.name), "/(",
                                 absl::StrJoin(family.suite, "|"), ")"));
  }
  return absl::StrCat("^(", absl::StrJoin(parts, "|"), ")");
}

bool FilterSelects(const std::string& filter, const std::string& full_name) {
  if (filter.empty() || filter == "all") return true;
  const bool negate = filter[0] == '-';
  const std::regex re(negate ? filter.substr(1) : filter, std::regex::extended);
  return std::regex_search(full_name, re) != negate;
}

std::vector<c10::Device> DevicesNamedIn(const std::string& filter) {
  std::vector<c10::Device> devices;
  static const std::regex named(R"(cuda:(\d+)|cuda|mps)");
  for (auto it = std::sregex_iterator(filter.begin(), filter.end(), named);
       it != std::sregex_iterator(); ++it) {
    absl::StatusOr<c10::Device> device = ParseDevice(it->str());
    if (device.ok() &&
        std::find(devices.begin(), devices.end(), *device) == devices.end()) {
      devices.push_back(*device);
    }
  }
  return devices;
}

std::vector<c10::ScalarType> DtypesNamedIn(const std::string& filter) {
  std::vector<c10::ScalarType> dtypes;
  for (const c10::ScalarType t : {c10::kFloat, c10::kBFloat16, c10::kHalf}) {
    const std::regex named("(^|/)" + DtypeName(t) + "($|/)");
    if (std::regex_search(filter, named)) dtypes.push_back(t);
  }
  return dtypes;
}

}  // namespace ltb
