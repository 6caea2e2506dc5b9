"""How a step runs on its device, as lib/device keeps it behind one
interface: the dtypes by name, waiting for a device's queued work before a
clock is read, the cache a step's data can stay in, autocast to a dtype,
and the autograd mode of an inference step (--grad_mode)."""
import torch

from ltb.pysuite.cpu_cache import last_level_cache

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


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
