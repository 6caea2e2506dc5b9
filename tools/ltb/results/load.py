"""Reading bench's Google Benchmark JSON files, the one place every tool reads
them: a file that a killed run cut short (SIGKILL, the out-of-memory killer,
a lease that ended) still gives its finished benchmark entries and its
context, with one line on stderr saying so."""

import json
import os
import re
import sys

from ltb.base import BadInput, read_bytes

# bench writes its context twice: as it stands when the run starts, first, so
# that a killed run's file holds it, and as the run left it, at the end.
START_CONTEXT = "context_at_start"

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def _skip(text, i, mark=None):
    """The index after the white space at i, and after mark there if given."""
    i = _SPACE.match(text, i).end()
    if mark is not None and text.startswith(mark, i):
        i = _SPACE.match(text, i + len(mark)).end()
    return i


def recover(text):
    """The complete members of a JSON object cut short, read member by member
    with the standard library's decoder: {key: value} of every member whole
    before the cut, "benchmarks" holding every entry whole before it.
    Returns None when the text does not open an object with a key."""
    i = _skip(text, 0)
    if not text.startswith("{", i):
        return None
    doc, i = {}, _skip(text, i + 1)
    try:
        while i < len(text) and text[i] != "}":
            key, i = _DECODER.raw_decode(text, i)
            if not isinstance(key, str):
                return None
            i = _skip(text, i)
            if not text.startswith(":", i):
                return None
            i = _skip(text, i + 1)
            if key == "benchmarks" and text.startswith("[", i):
                entries = doc[key] = []
                i = _skip(text, i + 1)
                while i < len(text) and text[i] != "]":
                    entry, i = _DECODER.raw_decode(text, i)
                    entries.append(entry)
                    i = _skip(text, i, ",")
                i = _skip(text, i + 1, ",")
            else:
                doc[key], i = _DECODER.raw_decode(text, i)
                i = _skip(text, i, ",")
    except json.JSONDecodeError:
        return doc  # the cut: what is whole before it is kept
    # The object closed (or the text ended between members): no cut explains
    # why the whole text is not JSON.
    return doc if i >= len(text) else None


def _text(raw, path):
    """The file's bytes as text; a cut inside a character's UTF-8 bytes drops
    the character."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(raw) - 3:
            raise BadInput(f"{path}: not JSON: {e}")
        return raw[:e.start].decode("utf-8")


def parse(raw, path):
    """The document of a result file's bytes. A complete one is read as it
    is; one cut short keeps its whole benchmark entries and its context (the
    one written at the end when it is whole, else the one written at the
    start), and says so on stderr. BadInput when it is neither."""
    text = _text(raw, path)
    try:
        doc = json.loads(text)
        cut = False
    except json.JSONDecodeError as e:
        doc, cut = recover(text), True
        if not doc:
            raise BadInput(f"{path}: not JSON: {e}")
        if not isinstance(doc.get("benchmarks"), list) or not doc["benchmarks"]:
            raise BadInput(f"{path}: not complete JSON, and no benchmark entry in it is whole "
                           "(the run stopped before its first result was written)")
    if isinstance(doc, dict):
        start = doc.pop(START_CONTEXT, None)
        if not isinstance(doc.get("context"), dict) and isinstance(start, dict):
            doc["context"] = start
    if cut:
        whole = ("its context" if "context" in doc else
                 "no context (the bench that wrote it wrote one only at the end)")
        print(f"{os.path.basename(sys.argv[0])}: {path}: the run did not finish (the file is "
              f"cut short): recovered {len(doc['benchmarks'])} complete benchmark entries and "
              f"{whole}", file=sys.stderr)
    return doc


# Time units as Google Benchmark writes them (results/entries.py converts them).
_UNITS = ("ns", "us", "ms", "s")


# What Google Benchmark writes in an entry beside its counters (numbers or
# not), and "context", a run's own context that tools/sweep keeps in its
# entries. Every other field is a counter: the reporter writes each as a
# number, and the tools add, divide and plot them as numbers.
_NOT_COUNTERS = frozenset((
    "name", "family_index", "per_family_instance_index", "run_name", "run_type",
    "repetitions", "repetition_index", "threads", "iterations", "real_time", "cpu_time",
    "time_unit", "aggregate_name", "aggregate_unit", "error_occurred", "error_message",
    "skipped", "skip_message", "label", "big_o", "rms", "context"))


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def entry_problem(entry, number):
    """Why an entry is not one Google Benchmark writes, in the words of the
    first thing wrong with it; None when nothing is. Every reader indexes
    these fields, so a file lacking them is refused here, once, rather than
    as a traceback in whichever tool reads it."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) \
            or not entry["name"]:
        return f"entry {number} has no name"
    name = entry["name"]
    unit = entry.get("time_unit", "ns")
    if unit not in _UNITS:
        return f"{name}: unknown time unit {unit!r}; valid: {', '.join(_UNITS)}"
    # A time may be absent (a failed entry's, an aggregate of a complexity's
    # coefficients, a tool that reads counters alone): the reader that needs
    # it says so (results/entries.py seconds()).
    for field in ("real_time", "cpu_time", "iterations"):
        if field in entry and not _is_number(entry[field]):
            return f"{name}: its {field} is not a number"
    for field, value in entry.items():
        if field not in _NOT_COUNTERS and not _is_number(value):
            return f"{name}: its {field} is not a number"
    return None


def load(path):
    doc = parse(read_bytes(path), path)
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise BadInput(f"{path}: not a Google Benchmark JSON (no 'benchmarks' list)")
    for number, entry in enumerate(doc["benchmarks"], 1):
        problem = entry_problem(entry, number)
        if problem:
            raise BadInput(f"{path}: not a Google Benchmark JSON ({problem})")
    if not isinstance(doc.setdefault("context", {}), dict):
        raise BadInput(f"{path}: not a Google Benchmark JSON (its context is not an object)")
    return doc


def load_all(paths):
    return [load(path) for path in paths]


def file_labels(paths):
    """Short names of result files for tables and legends: the file name
    without .json, or the whole path where two files share a name."""
    stems = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    return [stem if stems.count(stem) == 1 else path for stem, path in zip(stems, paths)]
