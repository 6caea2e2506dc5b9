"""Reading bench's Google Benchmark JSON files."""

import json
import os

from ltb.base import BadInput


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: not JSON: {e}")
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise BadInput(f"{path}: not a Google Benchmark JSON (no 'benchmarks' list)")
    for entry in doc["benchmarks"]:
        if not isinstance(entry, dict) or "name" not in entry:
            raise BadInput(f"{path}: not a Google Benchmark JSON (an entry without a name)")
    doc.setdefault("context", {})
    return doc


def load_all(paths):
    return [load(path) for path in paths]


def file_labels(paths):
    """Short names of result files for tables and legends: the file name
    without .json, or the whole path where two files share a name."""
    stems = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    return [stem if stems.count(stem) == 1 else path for stem, path in zip(stems, paths)]
