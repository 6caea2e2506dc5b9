"""The device speedup summary: each benchmark measured on two or more
devices, against the CPU."""

import collections

from ltb.results.entries import iterations, throughput_counter
from ltb.results.format import human
from ltb.results.names import base_name, split_device


def device_throughputs(docs, labels=None):
    """Benchmark key (the name without its device) -> device -> (mean
    throughput over repetitions, counter, the CPU's mean throughput it is
    compared with or None), for every benchmark measured on two or more
    devices. Files are machines (or runs) and are never averaged together: a
    device that several files measured is one row a file, named 'cuda
    (FILE)', and a device is compared with its own file's CPU, else with the
    CPU of the one file that measured it (cpu.json beside gpu.json)."""
    labels = labels or [str(i + 1) for i in range(len(docs))]
    sums = collections.OrderedDict()  # key -> (device, file) -> [total, n, counter]
    for i, doc in enumerate(docs):
        for entry in iterations(doc):
            counter = throughput_counter(entry)
            key, device = split_device(base_name(entry))
            if counter is None or not device:
                continue
            slot = sums.setdefault(key, collections.OrderedDict()).setdefault(
                (device, i), [0.0, 0, counter])
            slot[0] += entry[counter]
            slot[1] += 1
    out = collections.OrderedDict()
    for key, found in sums.items():
        if len({device for device, _ in found}) < 2:
            continue
        files = collections.Counter(device for device, _ in found)
        cpus = {i: total / n for (device, i), (total, n, _) in found.items() if device == "cpu"}
        devices = collections.OrderedDict()
        for (device, i), (total, n, counter) in found.items():
            shown = f"{device} ({labels[i]})" if files[device] > 1 else device
            base = None
            if device != "cpu":
                base = cpus.get(i, next(iter(cpus.values())) if len(cpus) == 1 else None)
            devices[shown] = (total / n, counter, base)
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
        for device, (v, counter, cpu) in devices.items():
            line = f"    {device:<{width}} {human(v):>12} {counter}"
            if cpu:
                line += f"   Speedup: {v / cpu:.2f}x ({device.split(' ')[0]} vs cpu)"
            lines.append(line)
    return lines
