"""How a step runs on its device, as lib/device keeps it behind one
interface: the dtypes by name, waiting for a device's queued work before a
clock is read, autocast to a dtype, and the autograd mode of an inference
step (--grad_mode)."""
import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def autocast(device, dtype):
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return torch.autocast(kind, dtype=DTYPES[dtype], enabled=dtype != "fp32")


def grad_context(mode):
    return {"inference_mode": torch.inference_mode, "no_grad": torch.no_grad,
            "grad": torch.enable_grad}[mode]()
