"""C++ beside Python under load: the table of tools/pybench --compare
BENCH.json PYBENCH.json, a bench file's and a tools/pybench file's serve
results paired by name, with the figure MLPerf judges each scenario by and
how many times better C++ is. The figures and the ratio: docs/serving.md
("Python through the same LoadGen")."""

from ltb.base import BadInput
from ltb.results.entries import iterations, median_entry
from ltb.results.format import markdown_table
from ltb.results.load import load
from ltb.results.names import base_name, parse_name
from ltb.results.runtimes import CPP_EAGER, REFERENCE, runtime_of, split_runtime

HEADERS = ("Benchmark", "Scenario", "Figure", "C++", "Python", "C++ vs Python")
SCENARIO_ORDER = ("SingleStream", "MultiStream", "Server", "Offline")
# The name's settings that say how the load was made, shown in its own column.
_LOAD_SETTINGS = ("scenario", "qps", "samples", "find_peak_from")


def served(doc):
    """name without runtime -> entry, for a document's measured serve
    entries and its peak searches that found no peak (an error whose
    counters are kept: shown as no peak); a benchmark's repetitions merged
    into their medians."""
    runs = {}
    no_peak = [e for e in doc["benchmarks"] if e.get("run_type", "iteration") == "iteration"
               and str(e.get("error_message", "")).startswith("no peak:")]
    for e in iterations(doc) + no_peak:
        name, _ = split_runtime(base_name(e))
        if parse_name(name)["phase"] == "serve":
            runs.setdefault(name, []).append(e)
    return {name: r[0] if len(r) == 1 else median_entry(r) for name, r in runs.items()}


def _benchmark(name):
    """The name without the scenario and rate: the model, shapes and batcher."""
    parts = name.split("/")
    kept = [p for p in parts if p.split(":", 1)[0] not in _LOAD_SETTINGS or ":" not in p]
    return "/".join(p for p in kept if p != "serve")


def _number(v):
    return f"{v:.4g}"


def _ratio(cpp, py, bigger_is_better):
    if not cpp or not py:
        return "—"
    return f"{(cpp / py if bigger_is_better else py / cpp):.2f}x"


def _row(name, cpp, py):
    settings = parse_name(name)["settings"]
    scenario = settings.get("scenario", "")
    if "samples" in settings:  # Offline's query, where not the default's
        scenario += f" of {settings['samples']} samples"
    benchmark = _benchmark(name)
    if "find_peak_from" in settings:
        return _peak_row(benchmark, settings, cpp, py)
    if "output" in settings:  # served generation: tokens, and token latencies
        if scenario.startswith("Offline"):
            return (benchmark, scenario, "tokens/s", _number(cpp["tokens/s"]),
                    _number(py["tokens/s"]), _ratio(cpp["tokens/s"], py["tokens/s"], True))
        if scenario == "Server":
            keys = ("ttft_p99_ms", "tpot_p99_ms")
            return (benchmark, f"Server at {settings.get('qps')} QPS",
                    "TTFT, TPOT p99 ms", *(", ".join(_number(e[k]) for k in keys)
                                           for e in (cpp, py)),
                    ", ".join(_ratio(cpp[k], py[k], False) for k in keys))
    if scenario.startswith("Offline"):
        return (benchmark, scenario, "samples/s", _number(cpp["samples/s"]),
                _number(py["samples/s"]), _ratio(cpp["samples/s"], py["samples/s"], True))
    if scenario == "SingleStream":
        return (benchmark, scenario, "p90 ms", _number(cpp["p90_ms"]), _number(py["p90_ms"]),
                _ratio(cpp["p90_ms"], py["p90_ms"], False))
    if scenario == "MultiStream":
        # A query's p99 (until its last sample completes), not its samples':
        # a file written before bench reported it shows none.
        key = "query_p99_ms"
        return (benchmark, scenario, "query p99 ms",
                *(_number(e[key]) if key in e else "—" for e in (cpp, py)),
                _ratio(cpp.get(key), py.get(key), False))
    return (benchmark, f"Server at {settings.get('qps')} QPS", "p99 ms", _number(cpp["p99_ms"]),
            _number(py["p99_ms"]), _ratio(cpp["p99_ms"], py["p99_ms"], False))


def _peak_row(benchmark, settings, cpp, py):
    """Server's peak QPS within the same bounds: a sample's p99 latency, or
    served generation's TTFT and TPOT p99."""
    keys = ("ttft_bound_ms", "tpot_bound_ms") if "output" in settings else ("bound_ms",)
    # A search with no peak is an error entry, with no counter: no bounds.
    bounds = [tuple(e.get(k) for k in keys) for e in (cpp, py)]
    known = [b for b in bounds if all(x is not None for x in b)]
    names = {"bound_ms": "p99", "ttft_bound_ms": "TTFT p99", "tpot_bound_ms": "TPOT p99"}
    figure = "peak QPS"
    if known:
        figure += " at " + ", ".join(f"{names[k]} <= {_number(b)} ms"
                                     for k, b in zip(keys, known[0]))
    values = [_number(e["peak_qps"]) if e.get("peak_qps") else "no peak" for e in (cpp, py)]
    if len(known) == 2 and bounds[0] != bounds[1]:
        ratio = "bounds differ: " + " and ".join(
            ", ".join(_number(b) for b in side) for side in bounds) + " ms"
    else:
        ratio = _ratio(cpp.get("peak_qps"), py.get("peak_qps"), True)
    return (benchmark, f"Server, search from {settings['find_peak_from']} QPS", figure,
            *values, ratio)


def rows(cpp_doc, py_doc):
    """One row a serve benchmark in both documents, by benchmark then
    scenario (LoadGen's order) then name."""
    cpp, py = served(cpp_doc), served(py_doc)
    names = set(cpp) & set(py)
    if not names:
        raise BadInput("no serve benchmark is in both files (run bench and tools/pybench "
                       "with the same --scenario, filter and serve flags)")

    def order(name):
        scenario = parse_name(name)["settings"].get("scenario", "")
        rank = SCENARIO_ORDER.index(scenario) if scenario in SCENARIO_ORDER else 9
        return (_benchmark(name), rank, name)
    return [_row(n, cpp[n], py[n]) for n in sorted(names, key=order)]


def table(cpp_doc, py_doc):
    return markdown_table(HEADERS, rows(cpp_doc, py_doc))


def compare(paths):
    """The table of a bench file and a tools/pybench file, given in either
    order; BadInput when they are not one of each."""
    if len(paths) != 2:
        raise BadInput("--compare takes two result files: BENCH.json PYBENCH.json")
    docs = [load(p) for p in paths]
    kinds = [runtime_of(d) for d in docs]
    if sorted(kinds) != sorted((CPP_EAGER, REFERENCE)):
        raise BadInput("--compare takes one bench file and one tools/pybench file; "
                       f"{paths[0]} and {paths[1]} are both "
                       f"{'tools/pybench' if kinds[0] == REFERENCE else 'bench'}'s")
    if kinds[0] == REFERENCE:
        docs.reverse()
    return table(*docs)


def compare_main(paths):
    """Prints compare(paths); the exit code (2 on bad input)."""
    import sys
    try:
        print(compare(paths))
    except BadInput as e:
        print(f"pybench: {e}", file=sys.stderr)
        return 2
    return 0
