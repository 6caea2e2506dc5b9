"""What runs: the benchmarks the flags select, in bench's order
(lib/suite/sweep.cc ExpandSweep), each a Spec named as bench names it
(lib/family/spec.cc) with the runtime last."""
import argparse
import re

from ltb.pysuite import families, quant, weights
from ltb.pysuite.family import DEPTH_FAMILIES, FAMILIES, TRAINING_PHASES
from ltb.pysuite.flags import (DEFAULT_BATCH_TIMEOUT_US, DEFAULT_DATASET_SAMPLES,
                               DEFAULT_NEW_TOKENS, DEFAULT_OFFLINE_SAMPLES, DEFAULT_PROMPT,
                               LOADGEN_BOUND_MS, LOADGEN_SAMPLES_PER_QUERY, RUNTIMES, BadFlag)
from ltb.pysuite.serve import offline_query_samples


class Spec:
    """One benchmark, named as bench's BenchSpec::Name() with the runtime."""

    def __init__(self, family, size, device, phase, batch, dtype, runtime, seq=0, prompt=0,
                 new_tokens=0, depth=0, weights="", quant=quant.NONE):
        self.family, self.size, self.device, self.phase = family, size, device, phase
        self.batch, self.seq, self.prompt, self.new_tokens = batch, seq, prompt, new_tokens
        self.depth, self.weights, self.quant = depth, weights, quant
        self.dtype, self.runtime = dtype, runtime
        self.steps = None
        self.dataset_samples = DEFAULT_DATASET_SAMPLES  # train_epoch's
        # serve: scenario, qps, max_batch, phase (forward or generate) and
        # generate's (min, max) prompt and output lengths.
        self.serve = None

    @property
    def training(self):
        return self.phase in TRAINING_PHASES

    def name(self):
        if self.serve:  # lib/family/spec.cc
            sv = self.serve
            name = f"{self.family}/{self.size}/{self.device}/serve/scenario:{sv['scenario']}"
            if sv["scenario"] == "Server":
                name += f"/{'find_peak_from' if sv.get('find_peak') else 'qps'}:{sv['qps']:g}"
            # What Offline's one query holds sets every latency.
            if sv["scenario"] == "Offline":
                samples = offline_query_samples(sv["qps"], sv["min_s"], sv["min_queries"])
                if samples != DEFAULT_OFFLINE_SAMPLES:
                    name += f"/samples:{samples}"
            name += f"/max_batch:{sv['max_batch']}"
            if sv["scenario"] == "MultiStream" and sv.get("samples_per_query", 0) not in (
                    0, LOADGEN_SAMPLES_PER_QUERY):
                name += f"/samples_per_query:{sv['samples_per_query']}"
            # Served forwards wait to fill a batch (SingleStream's hold one sample).
            if (not self.prompt and sv["scenario"] != "SingleStream"
                    and sv.get("batch_timeout_us", DEFAULT_BATCH_TIMEOUT_US)
                    != DEFAULT_BATCH_TIMEOUT_US):
                name += f"/batch_timeout_us:{sv['batch_timeout_us']}"
        else:
            name = f"{self.family}/{self.size}/{self.device}/{self.phase}/batch:{self.batch}"
        if self.seq:
            name += f"/seq:{self.seq}"
        if self.prompt and self.serve:
            def span(lo, hi):
                return f"{lo}:{hi}" if lo > 0 and lo != hi else f"{hi}"
            name += (f"/prompt:{span(self.serve['prompt'][0], self.prompt)}"
                     f"/output:{span(self.serve['output'][0], self.new_tokens)}")
            if self.serve.get("prefill_chunk"):
                name += f"/prefill_chunk:{self.serve['prefill_chunk']}"
        elif self.prompt:
            name += f"/prompt:{self.prompt}/new:{self.new_tokens}"
        # Server's p99 bounds decide its validity, goodput and found peak.
        if self.serve and self.serve["scenario"] == "Server":
            for part in (("ttft_bound_ms", "tpot_bound_ms") if self.prompt
                         else ("latency_bound_ms",)):
                bound = self.serve.get(part) or 0
                if bound > 0 and bound != LOADGEN_BOUND_MS:
                    name += f"/{part}:{bound:g}"
        if self.depth:
            name += f"/depth:{self.depth}"
        name += f"/{self.dtype}"
        if not self.quant.none:
            name += f"/{self.quant.name()}"
        if self.phase == "train_epoch" and self.dataset_samples != DEFAULT_DATASET_SAMPLES:
            name += f"/dataset_samples:{self.dataset_samples}"
        if self.weights:
            name += f"/weights:{weights.weights_name(self.weights)}"
        return f"{name}/{RUNTIMES[self.runtime]}"

    def full_name(self):
        # Google Benchmark names a fixed iteration count (bench --steps).
        steps = f"/iterations:{self.steps}" if self.steps else ""
        return self.name() + steps + "/manual_time"


def default_suite_filter():
    return "^(" + "|".join(f"{f}/({s['suite']})" for f, s in FAMILIES.items()) + ")"


def specs(args):
    """Every benchmark the flags select, in bench's order (ExpandSweep)."""
    flt = default_suite_filter() if args.default_suite else args.benchmark_filter
    if flt == "all":  # bench's word for everything
        flt = "."
    negate = flt.startswith("-")
    try:
        pattern = re.compile(flt[1:] if negate else flt)
    except re.error as e:
        raise BadFlag(f"--benchmark_filter={flt}: not a regular expression: {e}")
    out = []
    for family, f in FAMILIES.items():
        served_names = set()  # generate: the lengths' flags repeat one
        # lib/suite/sweep.cc: the phase --serve_phase names where the family
        # serves it, else the family's first.
        served_phase = args.serve_phase or next(iter(f["serve_phases"]), None)
        if served_phase not in f["serve_phases"]:
            served_phase = None
        for size in families.sizes(family):
            for phase in f["phases"]:
                for device in args.device_list:
                    cpu = device == "cpu" and args.default_suite
                    batch = f["cpu_batch"] if cpu and f["cpu_batch"] else f["batch"]
                    batches = args.batches or [batch]
                    shape = f["shapes"][phase]
                    if shape == "generate":
                        new = f["cpu_new_tokens"] if cpu and f["cpu_new_tokens"] else \
                            DEFAULT_NEW_TOKENS
                        prompt = f["cpu_prompt"] if cpu and f["cpu_prompt"] else DEFAULT_PROMPT
                        prompts = ([f["fixed_prompt"]] if "fixed_prompt" in f
                                   else args.prompts or [prompt])
                        lengths = [(p, n) for p in prompts for n in (args.news or [new])]
                    elif shape == "batch":
                        lengths = [(0, 0)]
                    else:
                        lengths = [(t, 0) for t in
                                   (args.seqs or (cpu and f["cpu_seqs"]) or f["seqs"])]
                    # lib/suite/sweep.cc: --depth sweeps the decoders' generation.
                    depths = (args.depths if phase == "generate" and family in DEPTH_FAMILIES
                              else [0])
                    # The families that quantise sweep --quant in every phase
                    # (training says why it does not run).
                    quants = args.quants if f["quantizes"] else [quant.NONE]
                    axes = [(d, q, b, x, depth) for d in args.dtypes for q in quants
                            for b in batches for x in lengths for depth in depths]
                    for dtype, q, b, (first, second), depth in axes:
                        for runtime in args.runtimes:
                            s = (Spec(family, size, device, phase, b, dtype, runtime,
                                      prompt=first, new_tokens=second, depth=depth,
                                      weights=args.weights, quant=q)
                                 if shape == "generate" else
                                 Spec(family, size, device, phase, b, dtype, runtime,
                                      seq=first, weights=args.weights, quant=q))
                            # An epoch is one iteration (suite.cc FixedIterations).
                            s.steps = args.epochs if phase == "train_epoch" else args.steps
                            if phase == "train_epoch":
                                s.dataset_samples = args.dataset_samples
                            if (pattern.search(s.full_name()) is not None) != negate:
                                out.append(s)
                            if (phase != served_phase
                                    or b != batches[0] or depth > 0):
                                continue
                            # lib/suite/sweep.cc: one a scenario (Server: a rate).
                            for scenario in args.scenarios:
                                for qps in (args.serve_qps if scenario == "Server"
                                            else args.serve_qps[:1]):
                                    v = (Spec(family, size, device, phase, args.max_batch,
                                              dtype, runtime, weights=args.weights, quant=q,
                                              # The lengths' maxima size every slot's cache.
                                              prompt=args.prompt_range[1] or first,
                                              new_tokens=args.output_range[1] or second)
                                         if shape == "generate" else
                                         Spec(family, size, device, phase, args.max_batch,
                                              dtype, runtime, seq=first, weights=args.weights,
                                              quant=q))
                                    v.serve = {"scenario": scenario, "qps": qps,
                                               "min_s": args.serve_min_s,
                                               "min_queries": args.serve_min_queries,
                                               "max_batch": args.max_batch,
                                               "find_peak": args.find_peak and scenario == "Server",
                                               "phase": phase, "prompt": args.prompt_range,
                                               "output": args.output_range,
                                               "prefill_chunk": args.prefill_chunk,
                                               "samples_per_query": args.samples_per_query,
                                               "batch_timeout_us": args.batch_timeout_us,
                                               "latency_bound_ms": args.latency_bound_ms,
                                               "ttft_bound_ms": args.ttft_bound_ms,
                                               "tpot_bound_ms": args.tpot_bound_ms}
                                    v.steps = 1  # one LoadGen test
                                    if shape == "generate":
                                        if v.name() in served_names:
                                            continue
                                        served_names.add(v.name())
                                    if (pattern.search(v.full_name()) is not None) != negate:
                                        out.append(v)
    return out



def untaken_settings(args, selected):
    """lib/suite/suite.cc UntakenSettings, in bench's words: what the flags
    set that no benchmark of `selected` takes, naming the families that take
    it; and the selected generation whose family fixes the prompt or the
    depth that --prompt or --depth would set."""
    chosen = sorted({s.family for s in selected})
    if not chosen:
        return []
    given = [(f"--dtype={d}", lambda s, d=d: s.dtype == d)
             for d in (args.dtypes if args.dtypes_given else [])]
    given += [(f"--quant={q.kind}" + (f" --quant_group={q.group}" if q.group else ""),
               lambda s, q=q: s.quant == q) for q in args.quants if not q.none]
    for flag, values, field in (("batch", args.batches, "batch"), ("seq", args.seqs, "seq"),
                                ("prompt", args.prompts, "prompt"),
                                ("new_tokens", args.news, "new_tokens"),
                                ("depth", args.depths, "depth")):
        given += [(f"--{flag}={v}", lambda s, v=v, field=field: getattr(s, field) == v)
                  for v in values or [] if v != 0]
    given = [(flag, takes, None) for flag, takes in given]
    # Serving's: what one scenario reads, given where it is not the default.
    if args.scenarios:
        def scenario(s, name):
            return bool(s.serve) and s.serve["scenario"] == name
        if args.samples_per_query not in (0, LOADGEN_SAMPLES_PER_QUERY):
            given.append((f"--samples_per_query={args.samples_per_query}",
                          lambda s: scenario(s, "MultiStream"), "it sets MultiStream's queries"))
        if args.latency_bound_ms:
            given.append((f"--latency_bound_ms={args.latency_bound_ms:g}",
                          lambda s: scenario(s, "Server"), "it bounds Server's p99"))
        for flag in ("ttft_bound_ms", "tpot_bound_ms"):  # served generation's Server's
            if getattr(args, flag):
                given.append((f"--{flag}={getattr(args, flag):g}",
                              lambda s: scenario(s, "Server") and bool(s.prompt),
                              "it bounds the token latencies of served generation's Server"))
        if args.batch_timeout_us != DEFAULT_BATCH_TIMEOUT_US:
            given.append((f"--batch_timeout_us={args.batch_timeout_us}",
                          lambda s: bool(s.serve) and not s.prompt
                          and s.serve["scenario"] != "SingleStream",
                          "it sets the batcher of a served forward, but SingleStream's"))
        given += [(f"--target_qps={qps:g}",
                   lambda s, qps=qps: scenario(s, "Server") and s.serve["qps"] == qps,
                   "a rate after the first is Server's alone") for qps in args.serve_qps[1:]]
    out, every = [], None
    for flag, takes, applies in given:
        if any(takes(s) for s in selected):
            continue
        if every is None:  # every benchmark the flags make, whatever the filter
            every = specs(argparse.Namespace(**dict(vars(args), default_suite=False,
                                                    benchmark_filter=".")))
        takers = sorted({s.family for s in every if takes(s)})
        out.append(f"{flag} adds no benchmark that the filter selects ({', '.join(chosen)}): "
                   + (applies or (f"it applies to {', '.join(takers)}" if takers
                                  else "no family here takes it")))
    for flag, values, fixed in (
            ("prompt", args.prompts, "its family fixes the prompt"),
            ("depth", args.depths, "its family generates from position 0 alone")):
        if not values or values == [0]:
            continue
        ran = {}
        for s in selected:
            if s.phase == "generate" and not s.serve:
                ran.setdefault(s.family, set()).add(getattr(s, flag))
        families = [f"{family} ({','.join(str(v) for v in sorted(its))})"
                    for family, its in sorted(ran.items()) if not set(values) <= its]
        if families:
            out.append(f"--{flag} does not set the generation of {', '.join(families)}: "
                       f"{fixed}")
    return out
