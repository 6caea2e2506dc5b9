"""The device speedup summary: each benchmark measured on two or more
devices, against the CPU."""

import collections

from ltb.results.entries import iterations, throughput_counter
from ltb.results.format import human
from ltb.results.names import base_name, split_device


def device_throughputs(docs):
    """Benchmark key (the name without its device) -> device -> (mean
    throughput over repetitions, counter), for every benchmark measured on
    two or more devices."""
    sums = collections.OrderedDict()  # key -> device -> [total, n, counter]
    for doc in docs:
        for entry in iterations(doc):
            counter = throughput_counter(entry)
            key, device = split_device(base_name(entry))
            if counter is None or not device:
                continue
            slot = sums.setdefault(key, collections.OrderedDict()).setdefault(
                device, [0.0, 0, counter])
            slot[0] += entry[counter]
            slot[1] += 1
    return collections.OrderedDict(
        (key, collections.OrderedDict((d, (total / n, c)) for d, (total, n, c) in devices.items()))
        for key, devices in sums.items() if len(devices) >= 2)


def device_speedup_lines(docs):
    """The device speedup summary bench prints at the end of a run: each
    benchmark measured on two or more devices, with each device's
    throughput and its speedup over the CPU."""
    lines = []
    for key, devices in device_throughputs(docs).items():
        cpu = devices["cpu"][0] if "cpu" in devices else 0
        lines.append(f"  {key}")
        for device, (v, counter) in devices.items():
            line = f"    {device:<8} {human(v):>12} {counter}"
            if cpu > 0 and device != "cpu":
                line += f"   Speedup: {v / cpu:.2f}x ({device} vs cpu)"
            lines.append(line)
    return lines
