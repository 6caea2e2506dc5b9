"""Numbers, times, bytes, counters and changes as the tools print them, and
Markdown tables."""

import math


def human(v):
    units = ["", "k", "M", "G", "T", "P"]
    i = 0
    while abs(v) >= 1000 and i < len(units) - 1:
        v /= 1000
        i += 1
    return f"{v:.4g}{units[i]}"


def format_seconds(s):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.4g} {unit}"
    return f"{s / 1e-9:.4g} ns"


def format_bytes(b):
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    i = 0
    while abs(b) >= 1024 and i < len(units) - 1:
        b /= 1024
        i += 1
    return f"{b:.4g} {units[i]}"


def format_percent(v):
    """A percentage to three significant digits, or more where three would
    round it onto 100 or 0 (99.96% of tokens matching is not 100%)."""
    digits = 3
    while digits < 15 and float(f"{v:.{digits}g}") in (100, 0) and v not in (100, 0):
        digits += 1
    return f"{v:.{digits}g}%"


def format_value(counter, v):
    """A counter's value with its unit, for tables."""
    if v is None:
        return "—"
    if counter == "time":
        return format_seconds(v)
    if counter == "peak_mem":
        return format_bytes(v)
    if counter.endswith("_ms"):
        return f"{v:.4g} ms"
    if counter.endswith("_%"):
        return format_percent(v)
    return f"{human(v)} {counter}" if counter.endswith("/s") else human(v)


def format_change(change):
    if change is None:
        return "—"
    if math.isinf(change):
        return "+inf%" if change > 0 else "-inf%"
    return f"{change * 100:+.1f}%"


def relative_change(old, new):
    """new / old - 1, with 0 -> 0 as no change and 0 -> x as infinite growth."""
    if old == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return new / old - 1


def series_label(label, key, several_files):
    """A chart series' name: the key, prefixed by its file's label when the
    chart draws several files."""
    return f"{label}: {key}" if several_files else key


def markdown_table(headers, rows):
    def cell(v):
        return str(v).replace("|", "\\|")
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
