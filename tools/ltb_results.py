"""Reading bench's Google Benchmark JSON: loading files, parsing names.

Names are Family/size/device/phase/settings... (Ops/op/shape/device/dtype),
with Google Benchmark's own suffixes (/manual_time, /repeats:N, aggregates
such as _median) after them.
"""
import json
import re
import sys

THROUGHPUT_COUNTERS = ("tokens/s", "samples/s", "FLOP/s", "bytes/s")
_TIME_SUFFIX = re.compile(r"/(manual_time|real_time|repeats:\d+|threads:\d+|iterations:\d+)")


class BadInput(Exception):
    """A file that is not a readable bench JSON; tools exit 2 with it."""


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}")
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not JSON: {e}")
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise BadInput(f"{path}: not a Google Benchmark JSON (no 'benchmarks' list)")
    return doc


def base_name(entry):
    """The suite's own name of an entry, without Google Benchmark's suffixes."""
    name = entry.get("run_name") or entry["name"]
    return _TIME_SUFFIX.sub("", name)


def device_field(parts):
    return 3 if parts and parts[0] == "Ops" else 2


def split_device(name):
    """('GPT2/small/generate/...', 'cuda') from 'GPT2/small/cuda/generate/...'."""
    parts = name.split("/")
    i = device_field(parts)
    if len(parts) <= i:
        return name, ""
    device = parts.pop(i)
    return "/".join(parts), device


def iterations(doc):
    """Entries that are measurements (not aggregates) and did not fail."""
    return [b for b in doc["benchmarks"]
            if b.get("run_type", "iteration") == "iteration" and not b.get("error_occurred")]


def throughput_counter(entry):
    for name in THROUGHPUT_COUNTERS:
        if name in entry:
            return name
    return None


def fail(message):
    print(f"{sys.argv[0]}: {message}", file=sys.stderr)
    sys.exit(2)
