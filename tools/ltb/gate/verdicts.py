"""The gate's comparison: per benchmark and metric, the change between two
result files, the Mann-Whitney U test over their repetitions, and the
verdict against the threshold; the benchmarks lost, new or errored; the
Markdown the gate prints. tools/gate's documentation says how it judges."""
import dataclasses
import math
import os
import typing
from statistics import median

from ltb.results.entries import (BIGGER_IS_BETTER, SERVED_ONLY, SMALLER_IS_BETTER,
                                 aggregates_only, all_names, collect, errors)
from ltb.results.format import format_change, format_value, markdown_table, relative_change

REGRESSION, IMPROVEMENT, NOISE, OK = "regression", "improvement", "not significant", "ok"
# A metric the baseline measured that the contender lacks, or has as no
# finite number: like a lost benchmark, it fails the gate unless
# --allow-missing is given.
LOST = "lost"


def threshold_for(name, rules, default):
    for regex, value in rules:
        if regex.search(name):
            return value
    return default


# The most values a side the U test's exact distribution is computed for;
# beyond, its normal approximation (as close as it needs to be there).
EXACT_UP_TO = 100


def u_test(a, b):
    """Two-sided Mann-Whitney U p-value, or None unless both sides repeat:
    exact wherever no value repeats (scipy's "auto" would approximate it
    above 8 a side, where 9 repetitions could then reach no lower p than 8),
    else the normal approximation with its tie correction."""
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy.stats import mannwhitneyu  # only when needed: it takes a second to load
    ties = len(set(a) | set(b)) < len(a) + len(b)
    exact = not ties and max(len(a), len(b)) <= EXACT_UP_TO
    return float(mannwhitneyu(a, b, alternative="two-sided",
                              method="exact" if exact else "asymptotic").pvalue)


def smallest_p(n1, n2):
    """The smallest two-sided p-value the U test gives n1 and n2 distinct
    values: every one of one side beyond every one of the other."""
    if max(n1, n2) <= EXACT_UP_TO:
        return 2 / math.comb(n1 + n2, n1)
    return u_test(list(range(n1)), list(range(n1, n1 + n2)))


def verdict(change, p, bigger_is_better, threshold, alpha):
    worse = -change if bigger_is_better else change
    if abs(worse) <= threshold:
        return OK
    if p is not None and not p < alpha:
        return NOISE
    return REGRESSION if worse > 0 else IMPROVEMENT


def metrics(base, new):
    """(metric, baseline values, contender values, bigger is better) of
    everything the baseline measured; the contender's values are empty where
    it lacks the metric."""
    yield "time", base.times, new.times, False
    served = base.fields["phase"] == "serve"
    for counter in BIGGER_IS_BETTER + SMALLER_IS_BETTER:
        if counter in SERVED_ONLY and not served:
            continue
        if base.has(counter):
            yield (counter, base.values(counter), new.values(counter),
                   counter in BIGGER_IS_BETTER)


@dataclasses.dataclass(frozen=True)
class Row:
    """One benchmark's metric, compared."""
    name: str
    metric: str  # "time" or a counter
    baseline: float  # the median of each side
    contender: typing.Optional[float]  # None when LOST
    change: typing.Optional[float]  # contender / baseline - 1; None when LOST
    p: typing.Optional[float]  # the U test's, where both sides repeat
    verdict: str  # REGRESSION, IMPROVEMENT, NOISE, OK or LOST


def compare(base_doc, new_doc, rules, default, alpha):
    """One Row per benchmark measured in both files and metric the baseline
    measured: LOST where the contender lacks it."""
    base, new = collect(base_doc), collect(new_doc)
    rows = []
    for name in base:
        if name not in new:
            continue
        threshold = threshold_for(name, rules, default)
        for metric, a, b, bigger in metrics(base[name], new[name]):
            if not b:
                rows.append(Row(name, metric, median(a), None, None, None, LOST))
                continue
            change = relative_change(median(a), median(b))
            p = u_test(a, b)
            rows.append(Row(name, metric, median(a), median(b), change, p,
                            verdict(change, p, bigger, threshold, alpha)))
    return rows


def differences(base_doc, new_doc):
    """(lost, appeared, disappeared, errored, uncompared) benchmarks. Lost:
    ran without an error in the baseline but errored in, or are missing
    from, the contender, as (name, contender's status). Disappeared and
    errored are the others: missing from the contender, and errors as
    (name, 'baseline' or 'contender', message). Uncompared: in both files,
    but the baseline holds only their aggregates, with no repetition to
    compare."""
    base_names, new_names = all_names(base_doc), all_names(new_doc)
    base_errors, new_errors = errors(base_doc), errors(new_doc)
    base_measured, new_measured = collect(base_doc), collect(new_doc)

    def status(n):
        """The contender's status of a benchmark the baseline ran, or None when it ran."""
        if n not in new_names:
            return "missing"
        if n in new_errors:
            return f"error: {new_errors[n]}"
        if n in base_measured and n not in new_measured:
            return "aggregates only: no repetition to compare"
        return None
    lost = [(n, status(n)) for n in base_names if n not in base_errors and status(n)]
    lost_names = {n for n, _ in lost}
    appeared = [n for n in new_names if n not in base_names]
    disappeared = [n for n in base_names if n not in new_names and n not in lost_names]
    errored = [(n, side, message)
               for side, doc in (("baseline", base_doc), ("contender", new_doc))
               for n, message in errors(doc).items() if n not in lost_names]
    uncompared = [n for n in aggregates_only(base_doc)
                  if n in new_names and n not in base_errors and n not in lost_names]
    return lost, appeared, disappeared, errored, uncompared


def repetition_note(base_doc, new_doc, alpha):
    """A note on the benchmarks compared whose repetitions (on both sides,
    two or more each) are too few for the U test to reach alpha, or None."""
    base, new = collect(base_doc), collect(new_doc)
    pairs = [(base[n].repetitions, new[n].repetitions) for n in base if n in new]
    short = [(a, b) for a, b in pairs if a >= 2 and b >= 2 and smallest_p(a, b) >= alpha]
    if not short:
        return None
    a, b = max(short, key=lambda pair: smallest_p(*pair))
    counts = f"{a} repetitions per side" if a == b else \
        f"{a} repetitions in the baseline and {b} in the contender"
    which = ("no time change can be called significant" if len(short) == len(pairs) else
             f"the time changes of {plural(len(short), 'benchmark')} (of {len(pairs)}) "
             f"cannot be called significant")
    return (f"Note: with {counts} the U test's smallest p-value for times is "
            f"{smallest_p(a, b):.3g}, not below alpha {alpha}: {which}. "
            f"Use 9 or more repetitions.")


def render(rows, lists, args, note):
    lost, appeared, disappeared, errored, uncompared = lists
    out = [f"## Benchmark gate: {os.path.basename(args.baseline)} → "
           f"{os.path.basename(args.contender)}", "",
           f"Threshold {args.threshold * 100:g}%"
           + (f" (per benchmark from {args.thresholds})" if args.thresholds else "")
           + f"; Mann–Whitney U at alpha {args.alpha:g} where both sides have repetitions.",
           ""]
    table = [(f"`{r.name}`", r.metric, format_value(r.metric, r.baseline),
              format_value(r.metric, r.contender), format_change(r.change),
              "—" if r.p is None else f"{r.p:.3g}",
              f"**{r.verdict}**" if r.verdict == REGRESSION or (
                  r.verdict == LOST and not args.allow_missing) else r.verdict)
             for r in rows]
    out.append(markdown_table(
        ["benchmark", "metric", "baseline", "contender", "change", "p-value", "verdict"], table))
    regressions = sum(1 for row in rows if row.verdict == REGRESSION)
    lost_metrics = sum(1 for row in rows if row.verdict == LOST)
    failures = [plural(regressions, "regression")]
    if not args.allow_missing:
        failures += [plural(len(lost), "lost benchmark"), plural(lost_metrics, "lost metric")]
    failures = [f for f in failures if f]
    out += ["", f"**{', '.join(failures)}**" if failures else "No regression."]
    if note:
        out += ["", note]
    if lost_metrics:
        why = ("allowed by --allow-missing" if args.allow_missing
               else "this fails the gate unless --allow-missing is given")
        out += ["", f"A lost metric was measured in the baseline and is missing from the "
                    f"contender, or is no finite number there ({why})."]
    if lost:
        why = ("allowed by --allow-missing" if args.allow_missing
               else "this fails the gate unless --allow-missing is given")
        out += ["", f"Lost: ran in the baseline, errored in or missing from the contender "
                    f"({why}):", "",
                markdown_table(["benchmark", "baseline", "contender"],
                                           [(f"`{n}`", "ok", status) for n, status in lost])]
    for title, names in (("New in the contender", appeared),
                         ("Missing from the contender", disappeared)):
        if names:
            out += ["", f"{title}:", *[f"- `{n}`" for n in names]]
    if errored:
        out += ["", "Errored:", *[f"- `{n}` ({side}): {message}" for n, side, message in errored]]
    if uncompared:
        out += ["", "Not compared: the baseline holds only their aggregates (a run with "
                    "--benchmark_report_aggregates_only), with no repetition to compare:",
                *[f"- `{n}`" for n in uncompared]]
    return "\n".join(out)


def plural(n, noun):
    return f"{n} {noun}{'s' if n != 1 else ''}" if n else ""
