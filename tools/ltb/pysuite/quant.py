"""Linear layers with quantised weights for inference (pybench's --quant), as
bench's lib/workloads/quant.{h,cc} quantises them, bit for bit, and through
the same ATen operators: int8 and int4 weight-only, and FBGEMM's dynamic
int8 linear. docs/cpp-and-python.md ("Running both") says how pybench uses
them; docs/measurement.md ("Quantised weights") what each one is."""
import dataclasses
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from ltb.pysuite import facts
from ltb.pysuite.models.decoder import Decoder

NAMES = tuple(facts.load()["quants"])  # none, int8, int4, int8dyn
GROUPS = tuple(facts.load()["quant_groups"])  # 32, 64, 128
INT4_ROWS = 16  # the int4 kernels take output widths in tiles of 16
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
# The activation dtypes of each device kind's kernels, as bench's backends
# say (their Caps()).
_BY_NAME = {name: dtype for dtype, name in DTYPE_NAMES.items()}
INT8_DTYPES = {kind: tuple(_BY_NAME[d] for d in caps["int8_weight_dtypes"])
               for kind, caps in facts.load()["devices"].items()}
INT4_DTYPES = {kind: tuple(_BY_NAME[d] for d in caps["int4_weight_dtypes"])
               for kind, caps in facts.load()["devices"].items()}


class QuantError(ValueError):
    """A layer the kernel cannot take (bench's TORCH_CHECK in QuantizeWeight)."""


@dataclasses.dataclass(frozen=True)
class Quant:
    kind: str = "none"  # none, int8, int4, int8dyn
    group: int = 0  # int4: input elements sharing a scale and a zero

    @property
    def none(self):
        return self.kind == "none"

    def name(self):
        """bench's Quant::Name(): the flag's value and the benchmark name's part."""
        return f"int4:g{self.group}" if self.kind == "int4" else self.kind


NONE = Quant()


def has_fbgemm():
    return "fbgemm" in torch.backends.quantized.supported_engines


def refusal(quant, device, dtype, training):
    """lib/workloads/quant.cc CanQuantize: why `quant` cannot run (bench's
    words), or None. device: "cpu", "cuda", "cuda:1"; dtype: a torch dtype."""
    kind = device.split(":")[0]
    dtype_name = DTYPE_NAMES[dtype]
    if quant.none:
        return None
    if training:
        return (f"--quant={quant.name()}: quantised weights are for inference; LibTorch's "
                "quantised linear kernels have no backward, so training phases run "
                "unquantised (--quant=none)")
    for what, table, op in (("int8", INT8_DTYPES, " (_weight_int8pack_mm)"),
                            ("int4", INT4_DTYPES, "")):
        if quant.kind != what:
            continue
        if not table.get(kind):
            return f"--quant={what}: LibTorch has no {what} weight kernel{op} for {device}"
        if dtype not in table[kind]:
            takes = ", ".join(DTYPE_NAMES[d] for d in table[kind])
            return (f"--quant={what}: LibTorch's {what} weight kernel on {device} takes "
                    f"{takes} activations, not {dtype_name}")
    if quant.kind == "int4" and quant.group not in GROUPS:
        return f"--quant_group={quant.group}: valid: {', '.join(map(str, GROUPS))}"
    if quant.kind == "int8dyn":
        if kind != "cpu" or not has_fbgemm():
            return ("--quant=int8dyn: FBGEMM's dynamic int8 linear runs on x86 CPUs with a "
                    f"LibTorch built with FBGEMM, not on {device}")
        if dtype != torch.float32:
            return ("--quant=int8dyn: FBGEMM's dynamic int8 linear takes fp32 activations "
                    f"(it quantises them itself), not {dtype_name}")
    return None


def quantize_weight(weight, quant, dtype):
    """bench's QuantizeWeight: (values, scales, zeros) of a weight (out, in),
    computed in fp32, scales and zeros in `dtype` (int8dyn: fp32). int8:
    per output channel, symmetric, values in [-127, 127]; int4: groups of
    quant.group inputs from their min to their max in 16 steps, values
    int32 in [0, 15], w = (q - 8) * scale + zero."""
    w = weight.detach().float()
    if quant.kind in ("int8", "int8dyn"):
        scale_dtype = torch.float32 if quant.kind == "int8dyn" else dtype
        # Scales as the kernel will read them, so that q * scale is what it computes.
        scales = (w.abs().amax(1) / 127).clamp_min(1e-12).to(scale_dtype)
        values = (w / scales.float().unsqueeze(1)).round().clamp(-127, 127).to(torch.int8)
        return values, scales, None
    if quant.kind != "int4":
        raise QuantError("nothing to quantise for --quant=none")
    out, inputs, g = w.shape[0], w.shape[1], quant.group
    if g <= 0 or inputs % g:
        raise QuantError(f"int4 in groups of {g} needs the layer's input width ({inputs}) "
                         f"to be a multiple of {g}: lower --quant_group")
    groups = w.reshape(out, inputs // g, g)
    lo, hi = groups.amin(-1), groups.amax(-1)  # (out, in / g)
    scales = ((hi - lo).clamp_min(1e-6) / 15).to(dtype)
    zeros = (lo + scales.float() * 8).to(dtype)
    low = zeros.float() - scales.float() * 8  # the value of q = 0
    values = ((groups - low.unsqueeze(-1)) / scales.float().unsqueeze(-1)).round() \
        .clamp(0, 15).to(torch.int32).reshape(out, inputs)
    return values, scales, zeros


def dequantize(quant, values, scales, zeros=None):
    """bench's Dequantize: the weight (out, in) the values stand for, in fp32."""
    v, s = values.float(), scales.float()
    if quant.kind != "int4":
        return v * s.unsqueeze(1)
    out, inputs, g = v.shape[0], v.shape[1], quant.group
    groups = v.reshape(out, inputs // g, g)
    return ((groups - 8) * s.unsqueeze(-1) + zeros.float().unsqueeze(-1)).reshape(out, inputs)


class QuantizedLinear(nn.Module):
    """bench's QuantizedLinear: a linear layer whose weight (out, in) and
    bias (out, or None), in the run's dtype on its device, are quantised and
    packed for the kernel; forward(x (..., in)) -> (..., out) in x's dtype.
    bytes: what it holds and a step reads (the packed weight, its scales and
    zeros with their padding, the bias). Its tensors are plain attributes:
    no parameters or buffers, so the model's state_dict stays the plain one."""

    def __init__(self, weight, bias, quant):
        super().__init__()
        self.quant, self.out, self.inputs = quant, weight.shape[0], weight.shape[1]
        self.bias = None if bias is None else bias.detach()
        self.bytes = 0 if bias is None else self.bias.nbytes
        dtype, device = weight.dtype, weight.device
        values, scales, zeros = quantize_weight(weight, quant, dtype)
        if quant.kind == "int8":
            self.weight, self.scales = values.contiguous(), scales.contiguous()
            self.bytes += self.weight.nbytes + self.scales.nbytes
        elif quant.kind == "int4":
            rows = -(-self.out // INT4_ROWS) * INT4_ROWS
            pad = (0, 0, 0, rows - self.out)
            # Padding rows: q = 8, scale 1, zero 0 (weights of zero).
            values = F.pad(values, pad, value=8)
            scales, zeros = F.pad(scales, pad, value=1), F.pad(zeros, pad, value=0)
            # (in / group, rows, 2): each group's scale and zero, as the kernels read them.
            self.scales = torch.cat([scales.unsqueeze(-1), zeros.unsqueeze(-1)], 2) \
                .transpose(0, 1).contiguous()
            if device.type == "cpu":
                self.weight = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
                    values.contiguous(), 8)
            else:
                n = self.inputs
                tiles = 8 if n % 128 == 0 else 4 if n % 64 == 0 else 2
                # Two values a byte, the even column in the high half.
                pairs = (values[:, ::2].bitwise_left_shift(4) | values[:, 1::2]).to(torch.uint8)
                self.weight = torch.ops.aten._convert_weight_to_int4pack(pairs.contiguous(),
                                                                         tiles)
            self.bytes += self.weight.nbytes + self.scales.nbytes
        elif quant.kind == "int8dyn":
            if dtype != torch.float32:
                raise QuantError("FBGEMM's dynamic int8 linear takes fp32 weights")
            with warnings.catch_warnings():  # quantize_per_channel's deprecation notice
                warnings.simplefilter("ignore", UserWarning)
                qweight = torch.quantize_per_channel(
                    dequantize(quant, values, scales).cpu(), scales.double().cpu(),
                    torch.zeros(self.out, dtype=torch.long), 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(
                qweight, None if self.bias is None else self.bias.cpu())
            # FBGEMM's packed matrix, its per-channel scales, zero points and
            # column offsets (4 bytes each a row), the fp32 bias.
            self.bytes += self.out * self.inputs + self.out * 12
        else:
            raise QuantError("QuantizedLinear with --quant=none")

    def forward(self, x):
        q = self.quant
        if q.kind == "int8dyn":
            return DynamicInt8Linear.forward(self, x)
        shape = (*x.shape[:-1], self.out)
        x2 = x.reshape(-1, self.inputs).contiguous()  # (M, in)
        if q.kind == "int8":
            y = torch.ops.aten._weight_int8pack_mm(x2, self.weight, self.scales)
        elif x2.is_cpu:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2, self.weight, q.group,
                                                            self.scales)
        else:
            y = torch.ops.aten._weight_int4pack_mm(x2, self.weight, q.group, self.scales)
        if y.shape[1] != self.out:
            y = y[:, :self.out]
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(shape)

    def extra_repr(self):
        return f"in={self.inputs}, out={self.out}, quant={self.quant.name()}"


def _dynamic_int8_forward(self, x):
    x2 = x.reshape(-1, self.inputs).contiguous()
    # reduce_range: 7-bit activations, as quantize_dynamic's x86 engines run them.
    y = torch.ops.quantized.linear_dynamic(x2, self.packed, True)
    return y.view(*x.shape[:-1], self.out)


class DynamicInt8Linear(QuantizedLinear):
    """int8dyn's layer: FBGEMM's packed weight is a TorchScript object,
    which torch.compile does not trace, so the layer runs eagerly between
    the compiled graphs (one graph break a call, rather than a recompilation
    for each layer until Dynamo's limit): quantized_linear puts its forward
    under torch.compiler.disable when it makes the first one, since that
    imports Dynamo (two seconds), which nothing else here needs before."""

    forward = _dynamic_int8_forward


def quantized_linear(weight, bias, quant):
    """The QuantizedLinear of `quant` (int8dyn: a DynamicInt8Linear)."""
    if quant.kind == "int8dyn" and DynamicInt8Linear.forward is _dynamic_int8_forward:
        DynamicInt8Linear.forward = torch.compiler.disable(_dynamic_int8_forward)
    return (DynamicInt8Linear if quant.kind == "int8dyn" else QuantizedLinear)(
        weight, bias, quant)


def _tied_head(model):
    """The embedding a tied output head reads (GPT2's wte, a tied Llama's
    embed_tokens), or None."""
    if isinstance(model, Decoder) and model.options.tied:
        return model.embedding().weight
    return None


def quantize_model(model, quant):
    """bench's QuantizeLinears: the tied head first (its module is the
    model itself, which bench visits first), then every nn.Linear in the
    order of named_modules, each replaced by its QuantizedLinear. Returns
    (removed, added): the bytes of weights a decode step no longer reads
    (the replaced weights and biases, the tied embedding) and those it reads
    now (the packed ones)."""
    removed = added = 0
    head = _tied_head(model)
    if head is not None:
        model.quantized_head = quantized_linear(head, None, quant)
        removed += head.nbytes
        added += model.quantized_head.bytes
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears and head is None:
        raise QuantError(f"--quant={quant.name()}: {type(model).__name__} has no linear "
                         "layers to quantise")
    for name, linear in linears:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        layer = quantized_linear(linear.weight, linear.bias, quant)
        removed += linear.weight.nbytes + (0 if linear.bias is None else linear.bias.nbytes)
        added += layer.bytes
        setattr(parent, child, layer)  # the nn.Linear and its weight go
    return removed, added
