"""The device speedup summary: each benchmark measured on two or more
devices, against the CPU."""

import collections
import math
import statistics

from ltb.results.entries import THROUGHPUT_COUNTERS, iterations
from ltb.results.format import human
from ltb.results.names import base_name, split_device


# A device's row: its mean throughput, the counter, the CPU's mean of the
# same counter it is compared with (None for the CPU itself, or when there
# is none to compare with), and why there is none.
Throughput = collections.namedtuple("Throughput", "value counter cpu missing")


def _finite(entry, counter):
    value = entry.get(counter)
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def device_throughputs(docs, labels=None):
    """Benchmark key (the name without its device) -> device -> Throughput,
    for every benchmark measured on two or more devices. Repetitions are
    averaged, each counter over the repetitions with a finite value of it.
    Every device of a benchmark is read by the same counter, the first of
    tokens/s, samples/s, FLOP/s, bytes/s that all of them report (else each
    its own, compared only with a CPU that reports it too). Files are
    machines (or runs) and are never averaged together: a device that
    several files measured is one row a file, named 'cuda (FILE)', and a
    device is compared with its own file's CPU, else with the CPU of the
    one file that measured it (cpu.json beside gpu.json)."""
    labels = labels or [str(i + 1) for i in range(len(docs))]
    found = collections.OrderedDict()  # key -> (device, file) -> counter -> [values]
    for i, doc in enumerate(docs):
        for entry in iterations(doc):
            key, device = split_device(base_name(entry))
            counters = [c for c in THROUGHPUT_COUNTERS if _finite(entry, c)]
            if not device or not counters:
                continue
            slot = found.setdefault(key, collections.OrderedDict()).setdefault((device, i), {})
            for counter in counters:
                slot.setdefault(counter, []).append(float(entry[counter]))
    out = collections.OrderedDict()
    for key, slots in found.items():
        if len({device for device, _ in slots}) < 2:
            continue
        shared = [c for c in THROUGHPUT_COUNTERS if all(c in s for s in slots.values())]
        files = collections.Counter(device for device, _ in slots)
        cpus = {i: s for (device, i), s in slots.items() if device == "cpu"}
        devices = collections.OrderedDict()
        for (device, i), slot in slots.items():
            counter = shared[0] if shared else next(c for c in THROUGHPUT_COUNTERS if c in slot)
            value = statistics.fmean(slot[counter])
            shown = f"{device} ({labels[i]})" if files[device] > 1 else device
            cpu, missing = None, None
            if device != "cpu":
                base = cpus.get(i, next(iter(cpus.values())) if len(cpus) == 1 else None)
                if not cpus:
                    missing = "no cpu run of it"
                elif base is None:
                    missing = "no cpu in its file, and several files measured one"
                elif counter not in base:
                    missing = f"the cpu reports no {counter}"
                else:
                    cpu = statistics.fmean(base[counter])
                    if cpu <= 0:
                        cpu, missing = None, f"the cpu's {counter} is {human(cpu)}"
            devices[shown] = Throughput(value, counter, cpu, missing)
        out[key] = devices
    return out


def device_speedup_lines(docs, labels=None):
    """The device speedup summary bench prints at the end of a run: each
    benchmark measured on two or more devices, with each device's
    throughput and its speedup over the CPU."""
    lines = []
    for key, devices in device_throughputs(docs, labels).items():
        lines.append(f"  {key}")
        width = max(8, *(len(d) for d in devices))
        for device, row in devices.items():
            line = f"    {device:<{width}} {human(row.value):>12} {row.counter}"
            if row.cpu:
                line += (f"   Speedup: {row.value / row.cpu:.2f}x "
                         f"({device.split(' ')[0]} vs cpu)")
            elif row.missing:
                line += f"   no speedup: {row.missing}"
            lines.append(line)
    return lines
