#include "suite/sweep.h"

#include <algorithm>
#include <functional>
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
  auto shapes = [&](int64_t batch, const std::vector<int64_t>& seqs, int64_t new_tokens,
                    int64_t prompt) {
    Shapes out;
    out.batches = sweep.batches.empty() ? std::vector<int64_t>{batch} : sweep.batches;
    if (c.phase.shape == Shape::kNone) out.batches = {0};
    if (c.phase.shape == Shape::kSequence) {
      for (const int64_t t : sweep.seqs.empty() ? seqs : sweep.seqs) {
        out.lengths.emplace_back(t, 0);
      }
    } else if (c.phase.shape == Shape::kGenerate) {
      const std::vector<int64_t> prompts =
          c.fixed_prompt > 0 ? std::vector<int64_t>{c.fixed_prompt}
          : !sweep.prompts.empty()
              ? sweep.prompts
              : std::vector<int64_t>{prompt > 0 ? prompt : kDefaultPrompt};
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
  const Shapes usual = shapes(batch, family.default_seqs, 0, 0);
  if (!sweep.default_suite) return {usual};
  const Shapes cpu = shapes(
      c.default_batch > 0 || family.suite_cpu_batch <= 0 ? batch : family.suite_cpu_batch,
      family.suite_cpu_seqs.empty() ? family.default_seqs : family.suite_cpu_seqs,
      family.suite_cpu_new_tokens, family.suite_cpu_prompt);
  const bool differ = cpu.batches != usual.batches || cpu.lengths != usual.lengths;
  if (BackendOf(device).Caps().host) return {cpu};
  if (has_cpu && differ) return {usual, cpu};
  return {usual};
}

// A point of the sweep's product: the benchmark so far, and the shapes its
// device runs (which its batch and lengths axes take their values from).
struct Point {
  BenchSpec spec;
  Shapes shapes;
};
// One axis: given the point so far (an axis may depend on those before it),
// the ways to set its value.
using Setter = std::function<void(Point*)>;
using Axis = std::function<std::vector<Setter>(const Point&)>;

// A setter for each of `values`, setting it by `set`.
template <typename T, typename Set>
std::vector<Setter> SettersOf(const std::vector<T>& values, Set set) {
  std::vector<Setter> out;
  for (const T& v : values) out.push_back([v, set](Point* p) { set(p, v); });
  return out;
}

// `values` where the axis applies, else the one value `otherwise`.
template <typename T>
std::vector<T> SweptIf(bool applies, const std::vector<T>& values, T otherwise) {
  return applies ? values : std::vector<T>{otherwise};
}

// Every combination of one value of each axis, from `at` on, the first axis
// outermost, each emitted in that order.
void Product(const std::vector<Axis>& axes, size_t at, const Point& point,
             const std::function<void(const Point&)>& emit) {
  if (at == axes.size()) {
    emit(point);
    return;
  }
  for (const Setter& set : axes[at](point)) {
    Point next = point;
    set(&next);
    Product(axes, at + 1, next, emit);
  }
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
    for (const Case& c : family.Cases()) {
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
      const bool inference = c.phase.kind == PhaseKind::kInference;
      const auto caps = [](const Point& p) { return BackendOf(p.spec.device).Caps(); };
      // The axes, outermost first: a new setting is one more line.
      const std::vector<Axis> axes = {
          [&](const Point&) {
            std::vector<c10::Device> devices;
            for (const c10::Device& d : sweep.devices) {
              if (!c.needs_host_transfers || BackendOf(d).Caps().host_transfers)
                devices.push_back(d);
            }
            return SettersOf(devices,
                             [](Point* p, c10::Device d) { p->spec.device = d; });
          },
          [&](const Point& p) {
            return SettersOf(ShapesOn(family, c, sweep, p.spec.device, has_cpu),
                             [](Point* q, const Shapes& s) { q->shapes = s; });
          },
          [&](const Point&) {
            return SettersOf(dtypes,
                             [](Point* p, c10::ScalarType t) { p->spec.dtype = t; });
          },
          [&](const Point&) {
            return SettersOf(
                SweptIf(family.sweeps_memory_format, sweep.channels_last, false),
                [](Point* p, bool v) { p->spec.channels_last = v; });
          },
          // Quantised weights: the families that quantise their linear
          // layers, every phase (training and devices without the kernel
          // say why they cannot), eager models only.
          [&](const Point&) {
            return SettersOf(
                SweptIf(family.quantizes && c.backend.empty(), sweep.quants, Quant{}),
                [](Point* q, const Quant& v) { q->spec.quant = v; });
          },
          // Packed linears: CPU inference of the families whose models have
          // them, unquantised.
          [&](const Point& p) {
            return SettersOf(SweptIf(family.packs_cpu_linears && caps(p).packed_linears &&
                                         inference && p.spec.quant.none(),
                                     sweep.pack_cpu_linears, false),
                             [](Point* q, bool v) { q->spec.pack_cpu_linears = v; });
          },
          // TF32: fp32 matmuls and convolutions on devices that have it.
          [&](const Point& p) {
            return SettersOf(SweptIf(p.spec.dtype == c10::kFloat && c.tf32 &&
                                         !c.dtype.has_value() && caps(p).tf32,
                                     sweep.tf32, false),
                             [](Point* q, bool v) { q->spec.tf32 = v; });
          },
          // Graphs: inference steps captured once on devices that have them.
          [&](const Point& p) {
            return SettersOf(
                SweptIf(inference && c.graphs && c.backend.empty() && caps(p).graphs,
                        sweep.graphs, false),
                [](Point* q, bool v) { q->spec.graph = v; });
          },
          [&](const Point& p) {
            return SettersOf(p.shapes.batches,
                             [](Point* q, int64_t b) { q->spec.batch = b; });
          },
          [&](const Point& p) {
            return SettersOf(p.shapes.lengths,
                             [generate = c.phase.shape == Shape::kGenerate](
                                 Point* q, const std::pair<int64_t, int64_t>& l) {
                               if (generate) {
                                 q->spec.prompt = l.first;
                                 q->spec.new_tokens = l.second;
                               } else {
                                 q->spec.seq = l.first;
                               }
                             });
          },
          [&](const Point&) {
            return SettersOf(
                SweptIf(c.phase.shape == Shape::kGenerate && family.generates_at_depth,
                        sweep.depths, int64_t{0}),
                [](Point* p, int64_t d) { p->spec.depth = d; });
          },
      };
      // What every benchmark of the case shares; the axes set the rest.
      Point base;
      base.spec.family = family.name;
      base.spec.phase_before_device = family.phase_before_device;
      base.spec.size = c.size;
      SetPhase(c.phase, &base.spec);
      base.spec.sync = sweep.sync;
      if (c.phase.data_parallel) {
        base.spec.bucket_mb = sweep.bucket_mb;
        base.spec.world_size = sweep.world_size;
        base.spec.process_group = sweep.process_group;
      }
      base.spec.backend = c.backend;
      base.spec.inputs = c.inputs;
      base.spec.weights = sweep.weights;
      base.spec.epochs = sweep.epochs;
      // serve: one benchmark a scenario (and Server's rates) beside each of
      // the served phase's, batch aside (the batcher's max_batch replaces it);
      // graphed for continuous batching alone, whose decode steps have a
      // static shape for each number of active slots (a batch has none).
      const bool serves =
          family.serves && c.serves && !sweep.serve_scenarios.empty() && inference &&
          (sweep.serve.phase.empty()
               ? c.phase.name == family.serve_phases.front()
               : c.phase.name == sweep.serve.phase &&
                     std::find(family.serve_phases.begin(), family.serve_phases.end(),
                               c.phase.name) != family.serve_phases.end()) &&
          (c.phase.shape == Shape::kBatch || c.phase.shape == Shape::kSequence ||
           c.phase.shape == Shape::kGenerate);
      // Generation served by continuous batching over the phase's own workload.
      const bool continuous = c.phase.shape == Shape::kGenerate;
      std::vector<std::string> served_names;  // generate: the lengths' flags repeat one
      Product(axes, 0, base, [&](const Point& p) {
        out.push_back({&family, p.spec, c.unit});
        if (!serves || (p.spec.graph && !continuous) ||
            p.spec.batch != p.shapes.batches.front()) {
          return;
        }
        if (p.spec.depth > 0) return;  // every request starts from an empty slot
        for (const std::string& scenario : sweep.serve_scenarios) {
          const std::vector<double> rates =
              scenario == "Server" ? sweep.serve_qps
                                   : std::vector<double>{sweep.serve_qps.front()};
          for (const double qps : rates) {
            BenchSpec served = p.spec;
            served.phase = kServe;
            served.serve = sweep.serve;
            served.serve.scenario = scenario;
            served.serve.phase = c.phase.name;
            served.serve.target_qps = qps;
            served.serve.find_peak = sweep.serve.find_peak && scenario == "Server";
            if (served.batch > 0) served.batch = served.serve.max_batch;
            if (c.phase.shape == Shape::kGenerate) {
              // The lengths' maxima size every slot's cache.
              if (served.serve.prompt_max > 0) served.prompt = served.serve.prompt_max;
              if (served.serve.output_max > 0) {
                served.new_tokens = served.serve.output_max;
              }
              const std::string name = served.Name();
              if (std::find(served_names.begin(), served_names.end(), name) !=
                  served_names.end()) {
                continue;
              }
              served_names.push_back(name);
            }
            out.push_back({&family, served, c.unit});
          }
        }
      });
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

absl::StatusOr<std::string> DefaultSuiteFilter(const std::vector<Family>& families,
                                               const std::vector<std::string>& skip) {
  std::vector<std::string> members;
  std::vector<Family> kept = families;
  for (Family& family : kept) {
    std::vector<std::string> suite;
    for (const std::string& entry : family.suite) {
      const std::string member =
          absl::StrCat(family.name, "/", entry.substr(0, entry.find('/')));
      if (std::find(members.begin(), members.end(), member) == members.end()) {
        members.push_back(member);
      }
      if (std::find(skip.begin(), skip.end(), member) == skip.end())
        suite.push_back(entry);
    }
    family.suite = std::move(suite);
  }
  for (const std::string& s : skip) {
    if (std::find(members.begin(), members.end(), s) == members.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--suite_skip: ", s, " is not a member of the default suite; its members: ",
          absl::StrJoin(members, ", ")));
    }
  }
  if (std::all_of(kept.begin(), kept.end(),
                  [](const Family& f) { return f.suite.empty(); })) {
    return absl::InvalidArgumentError(
        absl::StrCat("--suite_skip=", absl::StrJoin(skip, ","),
                     " leaves nothing of the default suite"));
  }
  return DefaultSuiteFilter(kept);
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
