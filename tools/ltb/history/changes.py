"""Change points in a series of results over commits: PELT (ruptures) on the
log of each commit's time, with a penalty scaled to the series' own noise,
and each change's size and confidence."""
import functools
import math
import statistics

class Point:
    """One commit of a series: its runs' median step times."""

    def __init__(self, commit, commit_time, date, run_values, runs):
        self.commit, self.commit_time, self.date = commit, commit_time, date
        self.run_values, self.runs = run_values, runs

    @property
    def value(self):
        return statistics.median(self.run_values)


# --- change points -------------------------------------------------------------

# PELT's penalty on the standardised log series, in units of log(n): high
# enough that pure noise of any length in the tests raises no change.
PENALTY = 6.0
# The least noise assumed (in log time: 0.2%), below what any clock resolves:
# a series of equal times still has a scale.
MIN_NOISE = 0.002


def _median3(values):
    """Each value replaced by the median of it and its neighbours (the ends by
    the median of the first or last three): one odd value disappears, a step
    of two or more stays where it is."""
    n = len(values)
    if n < 3:
        return list(values)
    out = [statistics.median(values[max(0, min(i - 1, n - 3)):][:3]) for i in range(n)]
    return out


def noise_sd(logs):
    """The series' noise, robustly: the median absolute difference of
    neighbours over 0.6745 * sqrt(2) (a step moves one difference only)."""
    diffs = [abs(b - a) for a, b in zip(logs, logs[1:])]
    if not diffs:
        return 0.0
    return statistics.median(diffs) / (0.6745 * math.sqrt(2))


class Change:
    def __init__(self, index, before, after, size, confidence):
        self.index = index      # the first point at the new level
        self.before = before    # the last commit at the old level
        self.after = after      # the first commit at the new level
        self.size = size        # relative change of the median time (+: slower)
        self.confidence = confidence  # 1 - Mann-Whitney p of the two segments

    def as_dict(self):
        return {"index": self.index, "good": self.before, "bad": self.after,
                "size": self.size, "confidence": self.confidence}


@functools.lru_cache(maxsize=None)
def _prefix_l2(ruptures, np):
    """ruptures' l2 cost (CostL2: a segment's squared deviations from its
    mean) from prefix sums of the centred signal, so that each of PELT's
    O(n^2) segments costs O(1) instead of a NumPy variance, the time of
    `changes` on a long series."""

    class PrefixL2(ruptures.base.BaseCost):
        model = "l2"
        min_size = 1

        def fit(self, signal):
            self.signal = signal.reshape(len(signal), -1)  # Pelt reads its length
            x = signal.reshape(-1) - signal.mean()
            self.sums = [0.0] + np.cumsum(x).tolist()
            self.squares = [0.0] + np.cumsum(x * x).tolist()
            return self

        def error(self, start, end):
            s = self.sums[end] - self.sums[start]
            return self.squares[end] - self.squares[start] - s * s / (end - start)

    return PrefixL2


def changes(values, min_size=0.0, min_confidence=0.95, commits=None):
    """The steps of a series of times (one a commit, in order) that PELT
    (ruptures, l2 cost on the standardised log times, after a 3-point median
    filter that removes lone outliers) finds, each at least min_size (a
    fraction) and with a confidence of at least min_confidence."""
    import numpy as np
    import ruptures
    from scipy.stats import mannwhitneyu
    n = len(values)
    if n < 4:
        return []
    logs = [math.log(v) for v in values]
    sd = max(noise_sd(logs), MIN_NOISE)
    smooth = np.array(_median3(logs)).reshape(-1, 1) / sd
    breaks = ruptures.Pelt(custom_cost=_prefix_l2(ruptures, np)(), min_size=2,
                           jump=1).fit(smooth).predict(pen=PENALTY * math.log(n))
    bounds = [0] + breaks
    commits = commits or [str(i) for i in range(n)]
    out = []
    for i in range(1, len(bounds) - 1):
        left = values[bounds[i - 1]:bounds[i]]
        right = values[bounds[i]:bounds[i + 1]]
        size = statistics.median(right) / statistics.median(left) - 1
        p = mannwhitneyu(left, right, alternative="two-sided").pvalue
        confidence = 1 - float(p)
        if abs(size) >= min_size and confidence >= min_confidence:
            k = bounds[i]
            out.append(Change(k, commits[k - 1], commits[k], size, confidence))
    return out


# --- PyTorch's benchmark database format ------------------------------------------
