"""Result files merged from several bench processes (sweep, abtest,
scaling): each run's record, the context they share, the entries in file
order, and when such a file's run started."""
import datetime


def failure_entry(name, message):
    """The errored entry of a benchmark whose bench process failed."""
    return {"name": name, "run_name": name, "run_type": "iteration", "repetitions": 1,
            "repetition_index": 0, "threads": 1, "iterations": 0, "real_time": 0.0,
            "cpu_time": 0.0, "time_unit": "ns", "error_occurred": True,
            "error_message": message}


def split_contexts(records):
    """(the context every successful run reported alike, id(record) -> what
    that run's context has of its own): a file merged from several bench
    processes keeps the first as its context, and each run's own values
    (date, load_avg, a measured peak) in that run's entries, under
    "context"."""
    ran = [r for r in records if r["status"] == "ok"]
    contexts = [r.get("context", {}) for r in ran]
    common = {k: v for k, v in (contexts[0] if contexts else {}).items()
              if all(k in c and c[k] == v for c in contexts[1:])}
    return common, {id(r): {k: v for k, v in c.items() if k not in common}
                    for r, c in zip(ran, contexts)}


def record_entries(record, own):
    """A run's entries, with what its context has of its own (own, from
    split_contexts); for a failed run, its errored entry."""
    if record["status"] != "ok":
        return [failure_entry(record["name"], record["error"])]
    mine = own.get(id(record))
    return [dict(e, context=mine) if mine else e for e in record["benchmarks"]]


def in_family(entry, index):
    """The entry as the index-th benchmark of a merged file (Google
    Benchmark numbers them by family_index)."""
    head = {"name": entry["name"], "family_index": index, "per_family_instance_index": 0}
    return dict(head, **{k: v for k, v in entry.items() if k not in head})


def run_date(doc):
    """When a result file's run started: its context's date, or, in a file
    merged from several bench processes (whose dates differ, so that each
    stays in its own entries' context), the earliest of theirs; "" when
    none says."""
    date = doc.get("context", {}).get("date")
    if date:
        return str(date)
    dates = [str(e["context"]["date"]) for e in doc.get("benchmarks", [])
             if isinstance(e, dict) and isinstance(e.get("context"), dict)
             and e["context"].get("date")]
    return min(dates, key=_date_key) if dates else ""


def _date_key(text):
    try:
        return (datetime.datetime.fromisoformat(text).timestamp(), text)
    except ValueError:
        return (float("inf"), text)
