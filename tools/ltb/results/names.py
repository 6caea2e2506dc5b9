"""The suite's names: Family/size/device/phase/settings.../dtype (Ops/op/
shape/device/dtype), optionally ending in /nosync, with Google Benchmark's
own suffixes (/manual_time, /repeats:N, aggregates such as _median) after
them; and /ranks:N, last, where a data-parallel run has more than one rank
(bench names it so) or in a file of several world sizes (tools/scaling)."""

import re


SIZE_ORDER = ("nano", "tiny", "small", "base", "medium", "large", "xl")


_TIME_SUFFIX = re.compile(r"/(manual_time|real_time|repeats:\d+|threads:\d+|iterations:\d+)")


def base_name(entry):
    """The suite's own name of an entry, without Google Benchmark's suffixes."""
    name = entry.get("run_name")
    if not name:
        # Google Benchmark before 1.5 wrote no run_name: an aggregate's name
        # is then its benchmark's with _mean, _median ... after it.
        name = entry["name"]
        aggregate = entry.get("aggregate_name")
        if entry.get("run_type") == "aggregate" and aggregate and name.endswith("_" + aggregate):
            name = name[:-len(aggregate) - 1]
    return _TIME_SUFFIX.sub("", name)


_DEVICE = re.compile(r"(cpu|cuda(:\d+)?|mps)")


def device_field(parts):
    """Where the device stands: third (Family/size/device/...), or fourth in
    families that name the phase first (Ops/op/shape/device/...)."""
    def is_device(i):
        return len(parts) > i and _DEVICE.fullmatch(parts[i]) is not None
    return 3 if not is_device(2) and is_device(3) else 2


def split_device(name):
    """('GPT2/small/generate/...', 'cuda') from 'GPT2/small/cuda/generate/...'."""
    parts = name.split("/")
    i = device_field(parts)
    if len(parts) <= i:
        return name, ""
    device = parts.pop(i)
    return "/".join(parts), device


def parse_name(name):
    """The fields of a suite name: family, size, device, phase, settings
    (batch, seq, prompt, new ... as numbers where they are), dtype, nosync.
    For Ops the operation stands as size and its shape as phase."""
    parts = name.split("/")
    fields = {"family": parts[0], "size": "", "device": "", "phase": "",
              "settings": {}, "dtype": "", "nosync": False}
    keys = ("size", "phase", "device") if device_field(parts) == 3 else ("size", "device", "phase")
    for key, value in zip(keys, parts[1:4]):
        fields[key] = value
    for part in parts[4:]:
        if part == "nosync":
            fields["nosync"] = True
        elif ":" in part:
            key, value = part.split(":", 1)
            fields["settings"][key] = int(value) if value.isdigit() else value
        elif not fields["dtype"]:
            fields["dtype"] = part
    return fields


def name_without(name, field):
    """The name with one field (size, device, or a setting such as seq)
    replaced by '*': the key of a series that varies in that field."""
    parts = name.split("/")
    if field in ("size", "device"):
        i = 1 if field == "size" else device_field(parts)
        if len(parts) > i:
            parts[i] = "*"
    else:
        parts = [f"{field}:*" if p.startswith(field + ":") else p for p in parts]
    return "/".join(parts)


def size_rank(size):
    """Sort key of model sizes: nano < tiny < small < ... < xl < 2.7B."""
    if size in SIZE_ORDER:
        return (0, SIZE_ORDER.index(size), size)
    match = re.fullmatch(r"([\d.]+)([KMB])", size)
    if match:
        return (1, float(match[1]) * {"K": 1e3, "M": 1e6, "B": 1e9}[match[2]], size)
    return (2, 0, size)


def with_ranks(entry, ranks):
    """The entry renamed for a file of several world sizes: /ranks:N after
    the suite's name, before Google Benchmark's suffixes and aggregate names."""
    run = entry.get("run_name") or entry["name"]
    base = _TIME_SUFFIX.sub("", run)
    if split_ranks(base)[1] is not None:  # bench names runs over several ranks itself
        return dict(entry, world_size=ranks)
    suffixes = "".join(m.group(0) for m in _TIME_SUFFIX.finditer(run))
    new_run = f"{base}/ranks:{ranks}{suffixes}"
    out = dict(entry, name=new_run + entry["name"][len(run):], world_size=ranks)
    if "run_name" in entry:
        out["run_name"] = new_run
    return out


def split_ranks(name):
    """('Family/size/.../fp32', N) from a name with /ranks:N, else (name, None)."""
    parts = name.split("/")
    for i, part in enumerate(parts):
        match = re.fullmatch(r"ranks:(\d+)", part)
        if match:
            return "/".join(parts[:i] + parts[i + 1:]), int(match[1])
    return name, None
