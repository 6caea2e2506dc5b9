"""Reading what a bench run wrote: its benchmarks, their errors, the names
and counters a check expects, and numbers as the summary prints them."""
import json
import re


def read_results(check, name, path, rc):
    """The JSON document a command wrote at path, or None; a command that
    exited 0 without one fails the check."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        if rc == 0:
            check.fail(f"{name}: no JSON results ({e})")
        return None


def short(name):
    return name.replace("/manual_time", "")


def iterations(doc):
    return [e for e in doc.get("benchmarks", []) if e.get("run_type", "iteration") == "iteration"]


def error_of(entry):
    if entry.get("error_occurred") or entry.get("error_message"):
        return entry.get("error_message") or "error"
    return None


def fmt(value):
    if value is None:
        return "-"
    if abs(value) >= 1e4:
        return f"{value:.3g}"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def expect_names(check, name, doc, patterns):
    """Every pattern matches at least one benchmark that ran without error."""
    if doc is None:
        return
    ok = [short(e["name"]) for e in iterations(doc) if not error_of(e)]
    for p in patterns:
        if not any(re.search(p, n) for n in ok):
            check.fail(f"{name}: no benchmark matching {p} ran")


def counters(check, name, doc, selector, counters):
    """Every error-free benchmark matching selector has the counters;
    returns those benchmarks."""
    found = []
    for e in iterations(doc or {}):
        if error_of(e) or not re.search(selector, e["name"]):
            continue
        found.append(e)
        missing = [c for c in counters if c not in e]
        if missing:
            check.fail(f"{name}: {short(e['name'])} lacks {', '.join(missing)}")
    if doc is not None and not found:
        check.fail(f"{name}: no benchmark matching {selector} ran")
    return found


def families_phases(doc):
    """family/size -> phases that ran, and the dtypes seen."""
    seen, dtypes = {}, set()
    for e in iterations(doc or {}):
        if error_of(e):
            continue
        parts = short(e["name"]).split("/")
        if parts[0] == "Ops":
            seen.setdefault("Ops", set()).add(parts[1])
            dtypes.add(parts[4] if len(parts) > 4 else "?")
            continue
        seen.setdefault(f"{parts[0]}/{parts[1]}", set()).add(parts[3])
        dtypes.update(p for p in parts if p in ("fp32", "bf16", "fp16"))
    return seen, dtypes
