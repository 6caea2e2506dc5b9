"""How a step runs on its device, as lib/device keeps it behind one
interface: the dtypes by name, waiting for a device's queued work before a
clock is read, the clock steps are timed by, the cache a step's data can
stay in, autocast to a dtype, and the autograd mode of an inference step
(--grad_mode)."""
import time

import torch

from ltb.pysuite.cpu_cache import last_level_cache

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


class Clock:
    """lib/device/timer.h Timeline: time marks on a device; intervals()
    gives the seconds between consecutive marks, the device's queued work
    finished first. On a GPU the marks are CUDA events on the current
    stream, as bench's (cuda_runtime.cc CudaEventTimeline): marking between
    a step's kernels (a generation's decode steps) does not stall the host,
    which goes on queueing the next; on the CPU, the host's clock."""

    def __init__(self, device):
        self.device = device
        self.events = device.startswith("cuda")
        self.marks = []

    def clear(self):
        self.marks = []

    def mark(self):
        if self.events:
            e = torch.cuda.Event(enable_timing=True)
            e.record(torch.cuda.current_stream(self.device))
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def intervals(self):
        if len(self.marks) < 2:
            return []
        if self.events:
            self.marks[-1].synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def cache_bytes(device):
    """The largest cache that keeps a step's data from one step to the next,
    as bench's backends read it: a CPU's last-level cache, a GPU's L2; 0
    when unknown."""
    if device.startswith("cuda"):
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
    return last_level_cache()


def autocast(device, dtype):
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return torch.autocast(kind, dtype=DTYPES[dtype], enabled=dtype != "fp32")


def grad_context(mode):
    return {"inference_mode": torch.inference_mode, "no_grad": torch.no_grad,
            "grad": torch.enable_grad}[mode]()
