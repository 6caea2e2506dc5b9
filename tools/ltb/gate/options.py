"""The gate's options (gate, and abtest and report, which pass them on):
the threshold, the U test's alpha, per-benchmark thresholds."""

import argparse
import math
import re

from ltb.base import BadInput, read_bytes


def percent(text):
    """'7%' or '7' -> 0.07."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r} (for example 7%)")
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"not a percentage >= 0: {text!r}")
    return value / 100


def alpha_value(text):
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"alpha must be between 0 and 1, not {text!r}")
    return value


def add_gate_arguments(parser, allow_missing=True):
    """The gate's options on parser (or an argument group); what judges a
    change, and unless allow_missing is False, --allow-missing."""
    parser.add_argument("--threshold", type=percent, default=0.07,
                        help="largest tolerated change, for example 7%% (default)")
    parser.add_argument("--alpha", type=alpha_value, default=0.05,
                        help="significance level of the U test (default 0.05)")
    parser.add_argument("--thresholds", metavar="FILE",
                        help="per-benchmark thresholds: lines of REGEX PERCENT")
    if not allow_missing:
        return
    parser.add_argument("--allow-missing", action="store_true",
                        help="do not fail on benchmarks that ran in the baseline but errored "
                             "in, or are missing from, the contender (they are still listed)")


def load_thresholds(path):
    """[(compiled regex, fraction)] from a thresholds file."""
    lines = read_bytes(path).decode(errors="replace").splitlines()
    rules = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.rsplit(None, 1)
        try:
            if len(fields) != 2:
                raise ValueError("expected REGEX PERCENT")
            rules.append((re.compile(fields[0]), percent(fields[1])))
        except (re.error, ValueError, argparse.ArgumentTypeError) as e:
            raise BadInput(f"{path}:{number}: {e}: {line!r}")
    return rules
