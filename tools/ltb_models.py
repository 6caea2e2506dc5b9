"""The suite's model families (shared/MODELS.md) in PyTorch's Python API,
mirroring the C++ modules of lib/models: the same parameter and buffer names,
the same computation and the same size tables, so that one state_dict loads
into both and a result of either means the same model.

    build(family, size)              the model, options as the C++ defaults
    forward_inputs(family, size, batch, seq, dtype, device)
                                     the inputs of the inference benchmark
    forward_module(family, size)     the module whose forward(*inputs) is that
                                     phase (Whisper: encode), for torch.export

    python tools/ltb_models.py check DUMP.pt [...]

`check` reads dumps written by test/models/parity_test.cc (torch::pickle_save
of a dict of "param:NAME", "buffer:NAME", "input:I" and "output" tensors,
in files named FAMILY-SIZE.pt), loads the weights into the Python model
strictly, runs the same inputs and compares with the C++ output. Exit 0 when
every family matches, 1 when one diverges, 2 on bad input.

The C++ modules' fused/explicit attention switch is not mirrored: both
compute the same attention, and the Python models always use
scaled_dot_product_attention.
"""
import argparse
import copy
import dataclasses
import math
import os
import sys
import warnings

import torch
import torch.jit._pickle  # restore_type_tag, for reading torch::pickle_save files
import torch.nn.functional as F
from torch import nn

FAMILIES = ("Transformer", "GPT2", "Llama", "ResNet", "CNN", "Encoder", "Whisper",
            "EncDec")


@dataclasses.dataclass(frozen=True)
class Size:
    name: str
    options: object
    card_params: int  # shared/MODELS.md


# ------------------------------------------------------------- Transformer
# lib/models/transformer.{h,cc}: decoder-only LM with RoPE, RMSNorm, SwiGLU.


@dataclasses.dataclass(frozen=True)
class TransformerOptions:
    vocab_size: int
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    context_length: int = 512  # the benchmark sets it to its seq
    rope_theta: float = 10000.0
    eps: float = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # Normalised in fp32 whatever the activation dtype.
        xf = x.float()
        rms = xf.pow(2).mean(-1, keepdim=True).add(self.eps).rsqrt()
        return (xf * rms).to(x.dtype) * self.weight


class RotaryEmbedding(nn.Module):
    """RoPE over adjacent pairs (0,1), (2,3), ... of the last dimension; the
    cos/sin tables are buffers."""

    def __init__(self, head_dim, max_positions, theta):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head size, got {head_dim}")
        inv_freq = torch.pow(theta, -torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)
        self.register_buffer("cos", angles.cos().float())  # (P, hd/2)
        self.register_buffer("sin", angles.sin().float())

    def forward(self, x, positions):
        # x: (..., T, hd); positions: (T,) int64.
        cos = self.cos.index_select(0, positions).to(x.dtype)  # (T, hd/2)
        sin = self.sin.index_select(0, positions).to(x.dtype)
        pairs = x.unflatten(-1, (-1, 2))  # (..., T, hd/2, 2)
        x0, x1 = pairs[..., 0], pairs[..., 1]  # (..., T, hd/2)
        r0 = x0 * cos - x1 * sin
        r1 = x0 * sin + x1 * cos
        return torch.stack((r0, r1), -1).flatten(-2)  # (..., T, hd)


class CausalSelfAttention(nn.Module):
    def __init__(self, o):
        super().__init__()
        if o.d_model % o.num_heads:
            raise ValueError(f"heads ({o.num_heads}) must divide d_model ({o.d_model})")
        self.q_proj = nn.Linear(o.d_model, o.d_model, bias=False)
        self.k_proj = nn.Linear(o.d_model, o.d_model, bias=False)
        self.v_proj = nn.Linear(o.d_model, o.d_model, bias=False)
        self.output_proj = nn.Linear(o.d_model, o.d_model, bias=False)
        self.rope = RotaryEmbedding(o.d_model // o.num_heads, o.context_length, o.rope_theta)
        self.num_heads = o.num_heads

    def forward(self, x, positions):
        b, t, d = x.shape

        def heads(y):
            hs = d // self.num_heads
            return y.view(b, t, self.num_heads, hs).transpose(1, 2)  # (B, nh, T, hs)

        q = self.rope(heads(self.q_proj(x)), positions)
        k = self.rope(heads(self.k_proj(x)), positions)
        v = heads(self.v_proj(x))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        return self.output_proj(y.transpose(1, 2).reshape(b, t, d))  # (B, T, d)


class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.ln1 = RMSNorm(o.d_model, o.eps)
        self.ln2 = RMSNorm(o.d_model, o.eps)
        self.attn = CausalSelfAttention(o)
        self.ffn = SwiGLU(o.d_model, o.d_ff)

    def forward(self, x, positions):
        h = x + self.attn(self.ln1(x), positions)
        return h + self.ffn(self.ln2(h))


class TransformerLM(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.token_embeddings = nn.Embedding(o.vocab_size, o.d_model)
        self.layers = nn.ModuleList()
        self.ln_final = RMSNorm(o.d_model, o.eps)
        self.lm_head = nn.Linear(o.d_model, o.vocab_size, bias=False)
        # The blocks last, as the C++ constructor's body adds them, so that
        # one seed draws the same weights on both sides.
        self.layers.extend(TransformerBlock(o) for _ in range(o.num_layers))
        self.options = o

    def forward(self, tokens):
        # tokens: (B, T) int64 -> logits (B, T, V).
        t = tokens.shape[1]
        if t > self.options.context_length:
            raise ValueError(f"sequence of {t} tokens is longer than the context length "
                             f"{self.options.context_length}")
        positions = torch.arange(t, device=tokens.device)
        x = self.token_embeddings(tokens)  # (B, T, d)
        for layer in self.layers:
            x = layer(x, positions)
        return self.lm_head(self.ln_final(x))  # (B, T, V)


def _cached(cache, k, v, position):
    """Writes k, v (B, heads, T, hs) into a layer's cache at position and
    returns every cached key and value up to position + T. A chunk of
    several tokens after cached ones attends through _attend's mask."""
    cache_k, cache_v = cache
    t = k.shape[2]
    cache_k[:, :, position:position + t].copy_(k)
    cache_v[:, :, position:position + t].copy_(v)
    return cache_k[:, :, :position + t], cache_v[:, :, :position + t]


def _attend(q, k, v, causal):
    """lib/models/attention.cc Attention (fused): SDPA, causal from the top
    left when the queries are the keys; queries after cached keys (a chunk
    at a depth) with an explicit mask aligned to the bottom right (query i
    sees keys up to tk - tq + i)."""
    tq, tk = q.shape[-2], k.shape[-2]
    if not causal or tq == tk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    seen = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=seen, is_causal=False)


# -------------------------------------------------------------------- GPT2
# lib/models/gpt2.{h,cc}: learned positions, LayerNorm, GELU (tanh), LM head
# tied to wte.


def init_like_hugging_face(module, std, layers, residual=()):
    """Random weights as Hugging Face initialises GPT-2 and Llama, drawn as
    lib/models/language_model.cc's InitLikeHuggingFace draws them (in the
    order of the sorted names), so that one seed gives both sides the same
    weights: matrices and embeddings from N(0, std), those named `residual`
    from N(0, std / sqrt(2 layers)), biases zero, norms' weights one."""
    scaled = std / math.sqrt(2 * layers)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            if p.dim() < 2 and name.endswith("bias"):
                p.zero_()
            elif p.dim() < 2:
                p.fill_(1)
            else:
                p.normal_(0, scaled if name.endswith(tuple(residual)) else std)


@dataclasses.dataclass(frozen=True)
class GPT2Options:
    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    max_positions: int = 1024
    eps: float = 1e-5


class GPT2Attention(nn.Module):
    def __init__(self, o):
        super().__init__()
        if o.d_model % o.num_heads:
            raise ValueError(f"heads ({o.num_heads}) must divide d_model ({o.d_model})")
        self.c_attn = nn.Linear(o.d_model, 3 * o.d_model)
        self.c_proj = nn.Linear(o.d_model, o.d_model)
        self.num_heads = o.num_heads

    def forward(self, x, cache=None, position=0):
        # cache: (keys, values) of this layer, (B, nh, positions, hs) each,
        # written in place at [position, position + T) (C++: forward_cached).
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, -1)  # (B, T, d) each

        def heads(y):
            hs = d // self.num_heads
            return y.view(b, t, self.num_heads, hs).transpose(1, 2)  # (B, nh, T, hs)

        q, k, v = heads(q), heads(k), heads(v)
        if cache is not None:
            k, v = _cached(cache, k, v, position)
        # A chunk is causal over itself and sees every cached position before
        # it; one new token attends to all before it.
        y = _attend(q, k, v, causal=cache is None or t > 1)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))  # (B, T, d)


class GPT2MLP(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.c_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.ln_1 = nn.LayerNorm(o.d_model, eps=o.eps)
        self.ln_2 = nn.LayerNorm(o.d_model, eps=o.eps)
        self.attn = GPT2Attention(o)
        self.mlp = GPT2MLP(o.d_model)

    def forward(self, x, cache=None, position=0):
        h = x + self.attn(self.ln_1(x), cache, position)
        return h + self.mlp(self.ln_2(h))


class GPT2LM(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.wte = nn.Embedding(o.vocab_size, o.d_model)
        self.wpe = nn.Embedding(o.max_positions, o.d_model)
        self.h = nn.ModuleList(GPT2Block(o) for _ in range(o.num_layers))
        self.ln_f = nn.LayerNorm(o.d_model, eps=o.eps)
        self.options = o
        # GPT2Config's initializer_range, its residual projections scaled.
        init_like_hugging_face(self, 0.02, o.num_layers, ("c_proj.weight",))

    def forward(self, tokens):
        # tokens: (B, T) int64 at positions [0, T) -> logits (B, T, V).
        t = tokens.shape[1]
        if t > self.options.max_positions:
            raise ValueError(f"sequence of {t} tokens exceeds GPT2's "
                             f"{self.options.max_positions} positions")
        pos = torch.arange(t, device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)  # (B, T, d)
        for block in self.h:
            x = block(x)
        # The LM head is tied to the token embedding: no parameter of its own.
        return F.linear(self.ln_f(x), self.wte.weight)  # (B, T, V)

    def forward_cached(self, tokens, position, cache):
        """tokens (B, T) at [position, position + T), every layer's keys and
        values written into cache (make_cache) -> the last position's logits
        (B, V)."""
        t = tokens.shape[1]
        if position + t > cache[0][0].shape[2]:
            raise ValueError(f"position {position + t} is beyond the cache of "
                             f"{cache[0][0].shape[2]}")
        pos = torch.arange(position, position + t, device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)  # (B, T, d)
        for block, layer_cache in zip(self.h, cache):
            x = block(x, layer_cache, position)
        return F.linear(self.ln_f(x[:, t - 1]), self.wte.weight)  # (B, V)

    def make_cache(self, batch, positions):
        o = self.options
        w = self.wte.weight
        shape = (batch, o.num_heads, positions, o.d_model // o.num_heads)
        return [(w.new_empty(shape), w.new_empty(shape)) for _ in range(o.num_layers)]


# ------------------------------------------------------------------- Llama
# lib/models/llama.{h,cc}: Llama-3-class decoder under Hugging Face's
# LlamaForCausalLM names: grouped-query attention, Llama 3's scaled RoPE
# (rotate_half), RMSNorm, SwiGLU, the head tied to embed_tokens or not.


@dataclasses.dataclass(frozen=True)
class LlamaOptions:
    vocab_size: int
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tied: bool
    rope_factor: float
    rope_theta: float = 500000.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_context: int = 8192
    eps: float = 1e-5


def llama_inverse_frequencies(o):
    """transformers' _compute_llama3_parameters, in fp32."""
    inv_freq = 1.0 / (o.rope_theta ** (torch.arange(0, o.head_dim, 2, dtype=torch.int64)
                                       .float() / o.head_dim))
    low_wavelen = o.original_context / o.low_freq_factor
    high_wavelen = o.original_context / o.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / o.rope_factor, inv_freq)
    smooth = (o.original_context / wavelen - o.low_freq_factor) / (
        o.high_freq_factor - o.low_freq_factor)
    smoothed = (1 - smooth) * scaled / o.rope_factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


class LlamaRotary(nn.Module):
    """transformers' LlamaRotaryEmbedding: the inverse frequencies (the
    model's only buffer); each position's cos and sin computed in fp32 once
    a forward, then cast to the hidden states' dtype."""

    def __init__(self, o):
        super().__init__()
        if o.head_dim % 2:
            raise ValueError(f"RoPE needs an even head size, got {o.head_dim}")
        self.register_buffer("inv_freq", llama_inverse_frequencies(o))

    def forward(self, positions, dtype):
        angles = torch.outer(positions.float(), self.inv_freq)  # (T, hs/2)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_llama_rotary(x, cos, sin):
    # x: (B, heads, T, hs); the two halves of a head rotate together.
    x1, x2 = x.chunk(2, -1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)


class LlamaAttention(nn.Module):
    def __init__(self, o):
        super().__init__()
        if o.num_heads % o.num_kv_heads:
            raise ValueError(f"kv heads ({o.num_kv_heads}) must divide heads ({o.num_heads})")
        self.q_proj = nn.Linear(o.d_model, o.num_heads * o.head_dim, bias=False)
        self.k_proj = nn.Linear(o.d_model, o.num_kv_heads * o.head_dim, bias=False)
        self.v_proj = nn.Linear(o.d_model, o.num_kv_heads * o.head_dim, bias=False)
        self.o_proj = nn.Linear(o.num_heads * o.head_dim, o.d_model, bias=False)
        self.o = o

    def forward(self, x, rope, cache=None, position=0):
        b, t, _ = x.shape
        o = self.o
        cos, sin = rope

        def heads(y, n):
            return y.view(b, t, n, o.head_dim).transpose(1, 2)  # (B, n, T, hs)

        v = heads(self.v_proj(x), o.num_kv_heads)
        q = apply_llama_rotary(heads(self.q_proj(x), o.num_heads), cos, sin).to(v.dtype)
        k = apply_llama_rotary(heads(self.k_proj(x), o.num_kv_heads), cos, sin).to(v.dtype)
        if cache is not None:
            k, v = _cached(cache, k, v, position)  # (B, kv, position + T, hs)
        rep = o.num_heads // o.num_kv_heads
        if t == 1 and rep > 1:
            # Decoding one token (C++: LlamaAttentionImpl::forward): the rep
            # query heads of a kv head attend to its keys in place, unmasked,
            # without repeating the cache.
            y = _attend(q.reshape(b, o.num_kv_heads, rep, o.head_dim), k, v, causal=False)
            return self.o_proj(y.reshape(b, 1, o.num_heads * o.head_dim))
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        y = _attend(q, k, v, causal=cache is None or t > 1)  # (B, nh, T, hs)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, o.num_heads * o.head_dim))


class LlamaMLP(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.input_layernorm = RMSNorm(o.d_model, o.eps)
        self.post_attention_layernorm = RMSNorm(o.d_model, o.eps)
        self.self_attn = LlamaAttention(o)
        self.mlp = LlamaMLP(o.d_model, o.d_ff)

    def forward(self, x, rope, cache=None, position=0):
        h = x + self.self_attn(self.input_layernorm(x), rope, cache, position)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.embed_tokens = nn.Embedding(o.vocab_size, o.d_model)
        self.layers = nn.ModuleList(LlamaLayer(o) for _ in range(o.num_layers))
        self.norm = RMSNorm(o.d_model, o.eps)
        self.rotary_emb = LlamaRotary(o)


class LlamaLM(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.model = LlamaModel(o)
        if not o.tied:
            self.lm_head = nn.Linear(o.d_model, o.vocab_size, bias=False)
        self.options = o
        init_like_hugging_face(self, 0.02, o.num_layers)  # LlamaConfig's initializer_range

    def _hidden(self, tokens, position=0, cache=None):
        t = tokens.shape[1]
        if cache is not None and position + t > cache[0][0].shape[2]:
            raise ValueError(f"position {position + t} is beyond the cache of "
                             f"{cache[0][0].shape[2]}")
        positions = torch.arange(position, position + t, device=tokens.device)
        x = self.model.embed_tokens(tokens)
        rope = self.model.rotary_emb(positions, x.dtype)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, rope) if cache is None else layer(x, rope, cache[i], position)
        return self.model.norm(x)

    def _logits(self, y):
        head = self.model.embed_tokens.weight if self.options.tied else self.lm_head.weight
        return F.linear(y, head)

    def forward(self, tokens):
        # tokens: (B, T) int64 at positions [0, T) -> logits (B, T, V).
        return self._logits(self._hidden(tokens))  # (B, T, V)

    def forward_cached(self, tokens, position, cache):
        """As GPT2LM.forward_cached: the last position's logits (B, V)."""
        y = self._hidden(tokens, position, cache)
        return self._logits(y[:, tokens.shape[1] - 1])  # (B, V)

    def make_cache(self, batch, positions):
        o = self.options
        w = self.model.embed_tokens.weight
        shape = (batch, o.num_kv_heads, positions, o.head_dim)
        return [(w.new_empty(shape), w.new_empty(shape)) for _ in range(o.num_layers)]


# ------------------------------------------------------------------ ResNet
# lib/models/resnet.{h,cc}: torchvision's ResNet, with its names.


@dataclasses.dataclass(frozen=True)
class ResNetOptions:
    bottleneck: bool  # Bottleneck (expansion 4) or BasicBlock
    blocks: tuple
    widths: tuple = (64, 128, 256, 512)
    stem: int = 64  # channels of the 7x7 stem
    classes: int = 1000


def _conv(cin, cout, k, stride, pad):
    return nn.Conv2d(cin, cout, k, stride=stride, padding=pad, bias=False)


class ResNetBlock(nn.Module):
    """BasicBlock (two 3x3) or Bottleneck (1x1, 3x3 with the stride, 1x1)."""

    def __init__(self, bottleneck, cin, planes, stride):
        super().__init__()
        cout = planes * (4 if bottleneck else 1)
        if bottleneck:
            self.conv1 = _conv(cin, planes, 1, 1, 0)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = _conv(planes, planes, 3, stride, 1)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = _conv(planes, cout, 1, 1, 0)
            self.bn3 = nn.BatchNorm2d(cout)
        else:
            self.conv1 = _conv(cin, planes, 3, stride, 1)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = _conv(planes, planes, 3, 1, 1)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = None
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(_conv(cin, cout, 1, stride, 0), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        if self.conv3 is not None:
            y = self.bn3(self.conv3(F.relu(self.bn2(self.conv2(y)))))
        else:
            y = self.bn2(self.conv2(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.conv1 = _conv(3, o.stem, 7, 2, 3)
        self.bn1 = nn.BatchNorm2d(o.stem)
        cin = o.stem
        for stage in range(4):
            blocks = []
            for b in range(o.blocks[stage]):
                stride = 2 if stage > 0 and b == 0 else 1
                blocks.append(ResNetBlock(o.bottleneck, cin, o.widths[stage], stride))
                cin = o.widths[stage] * (4 if o.bottleneck else 1)
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(cin, o.classes)

    def forward(self, x):
        # x: (N, 3, H, W) -> logits (N, classes).
        y = F.relu(self.bn1(self.conv1(x)))  # (N, stem, H/2, W/2)
        y = F.max_pool2d(y, 3, stride=2, padding=1)  # (N, stem, H/4, W/4)
        y = self.layer4(self.layer3(self.layer2(self.layer1(y))))
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)  # (N, C)
        return self.fc(y)


# --------------------------------------------------------------------- CNN
# lib/models/cnn.{h,cc}: two convolutions with ReLU and max pooling, two
# linear layers.


@dataclasses.dataclass(frozen=True)
class CNNOptions:
    conv1: int  # channels of the first convolution
    conv2: int  # channels of the second
    hidden: int  # width of the first linear layer
    classes: int = 10


class CNN(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.conv1 = nn.Conv2d(3, o.conv1, 3, padding=1)
        self.conv2 = nn.Conv2d(o.conv1, o.conv2, 3, padding=1)
        self.fc1 = nn.Linear(o.conv2 * 8 * 8, o.hidden)
        self.fc2 = nn.Linear(o.hidden, o.classes)

    def forward(self, x):
        # x: (N, 3, 32, 32) -> logits (N, classes).
        y = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (N, c1, 16, 16)
        y = F.max_pool2d(F.relu(self.conv2(y)), 2)  # (N, c2, 8, 8)
        return self.fc2(F.relu(self.fc1(y.flatten(1))))  # (N, classes)


# ----------------------------------------------------------------- Encoder
# lib/models/encoder.{h,cc}: LibTorch's TransformerEncoder (post-norm, ReLU,
# dropout 0.1), no final norm, its layer list registered as "layers".


@dataclasses.dataclass(frozen=True)
class EncoderOptions:
    d_model: int
    heads: int
    d_ff: int
    layers: int


class Encoder(nn.Module):
    def __init__(self, o):
        super().__init__()
        # Copies of one layer, as LibTorch's TransformerEncoder (and Python's)
        # clones its layer: one seed draws the same weights on both sides.
        layer = nn.TransformerEncoderLayer(o.d_model, o.heads, dim_feedforward=o.d_ff)
        self.layers = nn.ModuleList(copy.deepcopy(layer) for _ in range(o.layers))

    def forward(self, x):
        # x: (T, B, d) -> (T, B, d), LibTorch's (seq, batch, d) layout.
        for layer in self.layers:
            x = layer(x)
        return x


# ----------------------------------------------------------------- Whisper
# lib/models/whisper.{h,cc}: conv stem, sinusoidal encoder positions (a
# buffer), pre-norm blocks, decoder with learned positions and cross-attention,
# logits tied to the token embedding.


@dataclasses.dataclass(frozen=True)
class WhisperOptions:
    width: int
    heads: int
    encoder_layers: int
    decoder_layers: int
    vocab: int = 51865
    mels: int = 80
    frames: int = 3000  # 30 s of audio
    audio_ctx: int = 1500  # encoder positions: frames / 2
    text_ctx: int = 448  # decoder positions


class WhisperAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        if width % heads:
            raise ValueError(f"heads ({heads}) must divide the width ({width})")
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width, bias=False)
        self.value = nn.Linear(width, width)
        self.out = nn.Linear(width, width)
        self.heads = heads

    def _heads(self, y):
        b, t, w = y.shape
        return y.view(b, t, self.heads, w // self.heads).transpose(1, 2)  # (B, nh, T, hs)

    def forward(self, x, xa=None, causal=False):
        # Self-attention over x (B, T, w), or cross-attention over xa (B, S, w).
        kv = x if xa is None else xa
        q, k, v = self._heads(self.query(x)), self._heads(self.key(kv)), self._heads(self.value(kv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, nh, T, hs)
        return self.out(y.transpose(1, 2).flatten(2))  # (B, T, w)

    def forward_cached(self, x, cache, position):
        # Causal self-attention of x at [position, position + T), writing its
        # keys and values into cache (C++: forward_cached).
        k, v = _cached(cache, self._heads(self.key(x)), self._heads(self.value(x)), position)
        q = self._heads(self.query(x))
        y = _attend(q, k, v, causal=x.shape[1] > 1)  # (B, nh, T, hs)
        return self.out(y.transpose(1, 2).flatten(2))  # (B, T, w)

    def keys_values(self, xa):
        # The encoder output's keys and values, (B, nh, S, hs) each.
        return self._heads(self.key(xa)), self._heads(self.value(xa))

    def cross(self, x, k, v):
        # Cross-attention of x (B, T, w) over precomputed keys and values.
        y = F.scaled_dot_product_attention(self._heads(self.query(x)), k, v)  # (B, nh, T, hs)
        return self.out(y.transpose(1, 2).flatten(2))  # (B, T, w)


class WhisperBlock(nn.Module):
    def __init__(self, width, heads, cross):
        super().__init__()
        self.attn = WhisperAttention(width, heads)
        self.attn_ln = nn.LayerNorm(width)
        self.cross_attn = WhisperAttention(width, heads) if cross else None
        self.cross_attn_ln = nn.LayerNorm(width) if cross else None
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.mlp_ln = nn.LayerNorm(width)

    def forward(self, x, xa=None, causal=False):
        x = x + self.attn(self.attn_ln(x), causal=causal)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.cross_attn_ln(x), xa)
        return x + self.mlp(self.mlp_ln(x))


def sinusoids(length, channels):
    """Sin then cos of position times log-spaced timescales up to 10000."""
    increment = math.log(10000.0) / (channels // 2 - 1)
    inv = torch.exp(-increment * torch.arange(channels // 2, dtype=torch.float32))
    t = torch.arange(length, dtype=torch.float32).unsqueeze(1) * inv.unsqueeze(0)
    return torch.cat((t.sin(), t.cos()), 1)  # (length, channels)


class WhisperEncoder(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.conv1 = nn.Conv1d(o.mels, o.width, 3, padding=1)
        self.conv2 = nn.Conv1d(o.width, o.width, 3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(o.audio_ctx, o.width))
        self.blocks = nn.ModuleList(
            WhisperBlock(o.width, o.heads, cross=False) for _ in range(o.encoder_layers))
        self.ln_post = nn.LayerNorm(o.width)

    def forward(self, mel):
        # mel: (B, mels, frames) -> (B, frames / 2, w).
        x = F.gelu(self.conv1(mel))  # (B, w, frames)
        x = F.gelu(self.conv2(x)).transpose(1, 2)  # (B, frames / 2, w)
        x = x + self.positional_embedding.to(x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


class WhisperDecoder(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.token_embedding = nn.Embedding(o.vocab, o.width)
        self.positional_embedding = nn.Parameter(torch.randn(o.text_ctx, o.width) * 0.01)
        self.blocks = nn.ModuleList(
            WhisperBlock(o.width, o.heads, cross=True) for _ in range(o.decoder_layers))
        self.ln = nn.LayerNorm(o.width)

    def forward(self, tokens, xa):
        # tokens (B, T) from position 0 over xa (B, S, w) -> logits (B, T, V).
        x = self.token_embedding(tokens) + self.positional_embedding[:tokens.shape[1]]  # (B, T, w)
        for block in self.blocks:
            x = block(x, xa, causal=True)
        return F.linear(self.ln(x), self.token_embedding.weight)  # tied


class Whisper(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.encoder = WhisperEncoder(o)
        self.decoder = WhisperDecoder(o)
        self.options = o

    def encode(self, mel):
        return self.encoder(mel)  # (B, 1500, w)

    def decode(self, tokens, xa):
        return self.decoder(tokens, xa)  # (B, T, V), no cache

    def forward(self, mel, tokens):
        return self.decode(tokens, self.encode(mel))

    # Generation with a cache (C++ WhisperImpl::Start, ComputeCross,
    # DecodeCached): the self-attention keys and values of every decoder
    # layer, written as tokens come, and the cross-attention ones computed
    # once per encoder output.
    def start(self, xa, positions):
        """The state of a generation over xa (B, S, w) for `positions`
        tokens: {"self": [(k, v)], "cross": [(k, v)]} per decoder layer."""
        o = self.options
        shape = (xa.shape[0], o.heads, positions, o.width // o.heads)  # (B, nh, P, hs)
        state = {"self": [(xa.new_empty(shape), xa.new_empty(shape))
                          for _ in range(o.decoder_layers)], "cross": []}
        self.compute_cross(xa, state)
        return state

    def compute_cross(self, xa, state):
        # Once computed, written in place (a captured decode step reads the same tensors).
        fresh = [block.cross_attn.keys_values(xa) for block in self.decoder.blocks]
        old = state["cross"]
        if len(old) == len(fresh) and all(a.shape == k.shape and a.dtype == k.dtype
                                           for (a, _), (k, _) in zip(old, fresh)):
            for (a, b), (k, v) in zip(old, fresh):
                a.copy_(k)
                b.copy_(v)
        else:
            state["cross"] = fresh

    def decode_cached(self, tokens, position, state):
        """tokens (B, T) at [position, position + T) -> the last position's
        logits (B, V)."""
        d = self.decoder
        t = tokens.shape[1]
        if position + t > self.options.text_ctx:
            raise ValueError(f"position {position + t} is beyond the decoder's "
                             f"{self.options.text_ctx}")
        x = d.token_embedding(tokens) + d.positional_embedding[position:position + t]  # (B, T, w)
        for block, cache, (k, v) in zip(d.blocks, state["self"], state["cross"]):
            x = x + block.attn.forward_cached(block.attn_ln(x), cache, position)
            x = x + block.cross_attn.cross(block.cross_attn_ln(x), k, v)
            x = x + block.mlp(block.mlp_ln(x))
        return F.linear(d.ln(x[:, t - 1]), d.token_embedding.weight)  # (B, V), tied

    def generate(self, xa, prompt, new_tokens):
        """Greedy tokens (B, new_tokens) after prompt (B, P) over xa, with a
        cache (C++ WhisperGenerateWithCache)."""
        state = self.start(xa, prompt.shape[1] + new_tokens)
        token = self.decode_cached(prompt, 0, state).argmax(-1, keepdim=True)  # (B, 1)
        out = [token]
        for i in range(1, new_tokens):
            token = self.decode_cached(token, prompt.shape[1] + i - 1, state).argmax(
                -1, keepdim=True)
            out.append(token)
        return torch.cat(out, 1)


class WhisperEncode(Whisper):
    """Whisper whose forward is the encode phase; its state_dict is
    Whisper's (the decoder's weights load but go unused)."""

    def forward(self, mel):
        return self.encode(mel)


# ------------------------------------------------------------------ EncDec
# lib/models/encdec.{h,cc}: LibTorch's nn.Transformer (post-norm, ReLU,
# dropout 0.1) with one token embedding for source and target scaled by
# sqrt(d_model), fixed sinusoidal positions and an output projection.


@dataclasses.dataclass(frozen=True)
class EncDecOptions:
    d_model: int
    heads: int
    encoder_layers: int
    decoder_layers: int
    d_ff: int
    vocab: int = 8192


class EncDec(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.embedding = nn.Embedding(o.vocab, o.d_model)
        with warnings.catch_warnings():  # nested tensors need batch_first; not used
            warnings.simplefilter("ignore")
            # LibTorch's Transformer draws as Python's (a layer, copied to
            # every layer of the stack, then Xavier over every matrix) plus,
            # for each copy, what its clone() draws and throws away: the
            # layer again, then each child module again. Drawn the same
            # here, so that one seed gives both sides the same weights.
            def layer(kind):
                return kind(o.d_model, o.heads, dim_feedforward=o.d_ff)

            def clone_draws(kind, attentions, count):
                for _ in range(count):
                    layer(kind)
                    for _ in range(attentions):
                        nn.MultiheadAttention(o.d_model, o.heads)
                        nn.Linear(o.d_model, o.d_model)  # its out_proj
                    nn.Linear(o.d_model, o.d_ff)
                    nn.Linear(o.d_ff, o.d_model)

            encoder_layer = layer(nn.TransformerEncoderLayer)
            clone_draws(nn.TransformerEncoderLayer, 1, o.encoder_layers)
            decoder_layer = layer(nn.TransformerDecoderLayer)
            clone_draws(nn.TransformerDecoderLayer, 2, o.decoder_layers)
            self.transformer = nn.Transformer(
                o.d_model, o.heads, o.encoder_layers, o.decoder_layers, o.d_ff,
                custom_encoder=nn.TransformerEncoder(encoder_layer, o.encoder_layers,
                                                     nn.LayerNorm(o.d_model)),
                custom_decoder=nn.TransformerDecoder(decoder_layer, o.decoder_layers,
                                                     nn.LayerNorm(o.d_model)))
        self.output = nn.Linear(o.d_model, o.vocab)
        self.options = o

    def positions(self, length, device):
        # sin on even channels, cos on odd ones, in fp32.
        d = self.options.d_model
        pos = torch.arange(length, dtype=torch.float32, device=device).unsqueeze(1)  # (L, 1)
        div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32, device=device)
                        * (-math.log(10000.0) / d))  # (d/2,)
        angles = pos * div  # (L, d/2)
        return torch.stack((angles.sin(), angles.cos()), -1).flatten(-2)  # (L, d)

    def embed(self, tokens):
        # (B, L) -> (L, B, d), LibTorch's Transformer layout.
        x = (self.embedding(tokens) * math.sqrt(self.options.d_model)
             + self.positions(tokens.shape[1], tokens.device).to(self.embedding.weight.dtype))
        return x.transpose(0, 1)

    def forward(self, src, tgt):
        # src (B, S), tgt (B, T) token ids -> logits (B, T, V); causal over tgt.
        mask = nn.Transformer.generate_square_subsequent_mask(
            tgt.shape[1], device=tgt.device, dtype=self.embedding.weight.dtype)  # (T, T)
        # tgt_is_causal: the mask is causal; saying so spares nn.Transformer
        # comparing it with one (data-dependent control flow under export).
        y = self.transformer(self.embed(src), self.embed(tgt), tgt_mask=mask,
                             tgt_is_causal=True)  # (T, B, d)
        return self.output(y.transpose(0, 1))  # (B, T, V)


# ------------------------------------------------------------ size tables
# As the C++ tables (lib/models/*.cc, *Sizes()), in their order;
# tools/tests/test_ltb_models.py checks them against the C++ source.

_SIZES = {
    "Transformer": (
        Size("nano", TransformerOptions(1000, 64, 256, 2, 4), 259_392),
        Size("small", TransformerOptions(10000, 768, 3072, 12, 12), 128_625_408),
        Size("medium", TransformerOptions(10000, 1024, 4096, 24, 16), 423_183_360),
        Size("large", TransformerOptions(10000, 1280, 5120, 36, 20), 969_411_840),
        Size("xl", TransformerOptions(10000, 1600, 6400, 48, 25), 1_998_235_200),
        Size("2.7B", TransformerOptions(10000, 2560, 10240, 32, 32), 3_406_809_600),
    ),
    "GPT2": (
        Size("nano", GPT2Options(1000, 64, 2, 4), 229_632),
        Size("small", GPT2Options(50257, 768, 12, 12), 124_439_808),
        Size("medium", GPT2Options(50257, 1024, 24, 16), 354_823_168),
        Size("large", GPT2Options(50257, 1280, 36, 20), 774_030_080),
        Size("xl", GPT2Options(50257, 1600, 48, 25), 1_557_611_200),
    ),
    "Llama": (
        Size("nano", LlamaOptions(1000, 64, 256, 2, 4, 2, 16, True, 32.0), 187_200),
        Size("1B", LlamaOptions(128256, 2048, 8192, 16, 32, 8, 64, True, 32.0), 1_235_814_400),
        Size("3B", LlamaOptions(128256, 3072, 8192, 28, 24, 8, 128, True, 32.0), 3_212_749_824),
        Size("8B", LlamaOptions(128256, 4096, 14336, 32, 32, 8, 128, False, 8.0), 8_030_261_248),
    ),
    "ResNet": (
        Size("nano", ResNetOptions(False, (1, 1, 1, 1), widths=(16, 32, 64, 128), stem=16),
             438_456),
        Size("resnet18", ResNetOptions(False, (2, 2, 2, 2)), 11_689_512),
        Size("resnet50", ResNetOptions(True, (3, 4, 6, 3)), 25_557_032),
    ),
    "CNN": (
        Size("nano", CNNOptions(16, 32, 128), 268_650),
        Size("default", CNNOptions(32, 64, 512), 2_122_186),
    ),
    "Encoder": (
        Size("nano", EncoderOptions(64, 4, 256, 2), 99_968),
        Size("default", EncoderOptions(512, 8, 2048, 6), 18_914_304),
    ),
    "Whisper": (
        Size("nano", WhisperOptions(64, 4, 2, 2, vocab=1000), 353_792),
        Size("tiny", WhisperOptions(384, 6, 4, 4), 37_184_640),
        Size("base", WhisperOptions(512, 8, 6, 6), 71_825_920),
    ),
    "EncDec": (
        Size("nano", EncDecOptions(64, 4, 2, 2, 256, vocab=1000), 362_728),
        Size("tiny", EncDecOptions(128, 4, 3, 3, 512), 3_494_400),
        Size("small", EncDecOptions(512, 8, 6, 6, 2048), 52_537_344),
        Size("base", EncDecOptions(768, 12, 12, 12, 3072), 211_069_952),
        Size("xl", EncDecOptions(2048, 32, 24, 24, 8192), 2_853_715_968),
    ),
}

_MODELS = {
    "Transformer": TransformerLM, "GPT2": GPT2LM, "Llama": LlamaLM, "ResNet": ResNet, "CNN": CNN,
    "Encoder": Encoder, "Whisper": Whisper, "EncDec": EncDec,
}


def _family(family):
    if family not in _SIZES:
        raise ValueError(f"unknown family '{family}'; valid: {', '.join(FAMILIES)}")
    return _SIZES[family]


def sizes(family):
    """The family's size names, in the C++ table's order."""
    return tuple(s.name for s in _family(family))


def size_entry(family, size):
    """The Size (name, options, card_params) of `size`."""
    for s in _family(family):
        if s.name == size:
            return s
    raise ValueError(f"unknown {family} size '{size}'; valid: {', '.join(sizes(family))}")


def options(family, size, **overrides):
    """The size's options, with fields replaced as C++'s TORCH_ARG setters do."""
    return dataclasses.replace(size_entry(family, size).options, **overrides)


def build(family, size, **overrides):
    """The model of `size` (train mode, as a new C++ module), with option
    fields overridden (e.g. context_length=1024 for the Transformer)."""
    return _MODELS[family](options(family, size, **overrides))


def benchmark_overrides(family, seq=None):
    """The options the C++ benchmark sets besides the size's: the
    Transformer's context length is its seq (BuildTransformer)."""
    if family == "Transformer" and seq is not None:
        return {"context_length": seq}
    return {}


def forward_module(family, size, seq=None):
    """The module (eval mode) whose forward(*forward_inputs(...)) is the
    family's inference benchmark phase: forward, or Whisper's encode. `seq`
    builds it as the benchmark of that seq does (Transformer: the RoPE tables
    then hold exactly seq positions, as in the C++ benchmark)."""
    o = options(family, size, **benchmark_overrides(family, seq))
    model = WhisperEncode(o) if family == "Whisper" else _MODELS[family](o)
    return model.eval()


def forward_inputs(family, size, batch, seq=None, dtype=torch.float32, device="cpu",
                   generator=None):
    """The inputs of the family's inference benchmark, as its C++ Build*
    passes them: token ids (int64) for the language models, or standard-normal
    floats drawn in fp32 then rounded to `dtype`. Drawn on the CPU from
    `generator`, then moved to `device`. `seq` is ignored by families without
    a sequence (ResNet, CNN, Whisper)."""
    o = size_entry(family, size).options

    def ids(vocab, *shape):
        return torch.randint(0, vocab, shape, generator=generator).to(device)

    def floats(*shape):
        return torch.randn(shape, generator=generator).to(device=device, dtype=dtype)

    if family in ("Transformer", "GPT2", "Llama"):
        return (ids(o.vocab_size, batch, seq),)  # (B, T)
    if family == "ResNet":
        return (floats(batch, 3, 224, 224),)
    if family == "CNN":
        return (floats(batch, 3, 32, 32),)
    if family == "Encoder":
        return (floats(seq, batch, o.d_model),)  # (T, B, d)
    if family == "Whisper":
        return (floats(batch, o.mels, o.frames),)  # (B, 80, 3000)
    if family == "EncDec":
        # Source and target drawn as one sample (B, S + S); the forward takes
        # the source and the target without its last token.
        pairs = ids(o.vocab, batch, 2 * seq)
        return pairs[:, :seq].contiguous(), pairs[:, seq:2 * seq - 1].contiguous()
    raise ValueError(f"unknown family '{family}'; valid: {', '.join(FAMILIES)}")


def param_count(model):
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------- FLOPs of a step
# The C++ families' analytic counts (lib/models/{transformer,gpt2,llama}.cc:
# *ForwardFlops, *GenerateFlops), 2 FLOPs a multiply-add, attention over every
# (query, key) pair; a training step is three forwards.

LANGUAGE_FAMILIES = ("Transformer", "GPT2", "Llama")


def _layer_flops(family, o, batch, tokens, keys):
    if family == "Transformer":
        d, f = o.d_model, o.d_ff
        return (2 * batch * tokens * d * d * 4 + 2 * batch * tokens * keys * d * 2
                + 2 * batch * tokens * d * f * 3)
    if family == "GPT2":
        d = o.d_model
        return 24 * batch * tokens * d * d + 4 * batch * tokens * keys * d
    if family == "Llama":
        d, f = o.d_model, o.d_ff
        q, k = o.num_heads * o.head_dim, o.num_kv_heads * o.head_dim
        return (2 * batch * tokens * d * (2 * q + 2 * k) + 2 * batch * tokens * keys * q * 2
                + 2 * batch * tokens * d * f * 3)
    raise ValueError(f"no FLOP count for '{family}'; valid: {', '.join(LANGUAGE_FAMILIES)}")


def _vocab(o):
    return getattr(o, "vocab_size", None) or o.vocab


def forward_flops(family, size, batch, seq):
    """FLOPs of a forward over (batch, seq) tokens, logits of every position."""
    o = size_entry(family, size).options
    return (o.num_layers * _layer_flops(family, o, float(batch), float(seq), float(seq))
            + 2.0 * batch * seq * o.d_model * _vocab(o))


def generate_flops(family, size, batch, prompt, new_tokens, depth=0):
    """FLOPs of greedy generation with a cache: the prompt in one pass over
    `depth` cached positions and itself, then one token a step over every
    cached key; logits of the last position."""
    o = size_entry(family, size).options
    head = 2.0 * batch * o.d_model * _vocab(o)
    flops = o.num_layers * _layer_flops(family, o, float(batch), float(prompt),
                                        float(depth + prompt)) + head
    for i in range(1, new_tokens):
        flops += o.num_layers * _layer_flops(family, o, float(batch), 1.0,
                                             float(depth + prompt + i)) + head
    return flops


# The other families' counts, as their C++ functions compute them
# (lib/models/{encoder,encdec,whisper}.cc).

def encoder_forward_flops(size, batch, seq):
    """EncoderForwardFlops: L(8 B T d^2 + 4 B T^2 d + 4 B T d d_ff)."""
    o = size_entry("Encoder", size).options
    b, t, d, f = float(batch), float(seq), o.d_model, o.d_ff
    return o.layers * (8 * b * t * d * d + 4 * b * t * t * d + 4 * b * t * d * f)


def encdec_forward_flops(size, batch, src, tgt):
    """EncDecForwardFlops: encoder layers over the source; decoder layers'
    self-attention, cross-attention (q and o over the target, k and v over
    the source, scores T x S) and FFN; the output projection."""
    o = size_entry("EncDec", size).options
    b, s, t, d, f = float(batch), float(src), float(tgt), o.d_model, o.d_ff
    encoder = 8 * b * s * d * d + 4 * b * s * s * d + 4 * b * s * d * f
    decoder = (8 * b * t * d * d + 4 * b * t * t * d + 4 * b * t * d * d + 4 * b * s * d * d
               + 4 * b * t * s * d + 4 * b * t * d * f)
    return o.encoder_layers * encoder + o.decoder_layers * decoder + 2 * b * t * d * o.vocab


def whisper_encode_flops(size, batch):
    """WhisperEncodeFlops: both convolutions, then per layer 24 T w^2 + 4 T^2 w."""
    o = size_entry("Whisper", size).options
    w, t = float(o.width), float(o.audio_ctx)
    convs = 2 * o.mels * w * 3 * o.frames + 2 * w * w * 3 * t
    return batch * (convs + o.encoder_layers * (24 * t * w * w + 4 * t * t * w))


def whisper_generate_flops(size, batch, prompt, new_tokens):
    """WhisperGenerateFlops: the cross-attention keys and values once, the
    prompt, then one token a step; logits of the last position of each."""
    o = size_entry("Whisper", size).options
    w, layers = float(o.width), o.decoder_layers

    def layer(q, k):  # self q, k, v, o; cross q, o; MLP; both attentions
        return 28 * q * w * w + 4 * q * k * w + 4 * q * o.audio_ctx * w

    logits = 2.0 * w * o.vocab
    flops = layers * 4.0 * o.audio_ctx * w * w + layers * layer(prompt, prompt) + logits
    for i in range(1, new_tokens):
        flops += layers * layer(1, prompt + i) + logits
    return batch * flops


def whisper_decode_weight_count(size):
    """WhisperDecodeWeightCount: the decoder's weights a decode step reads
    (not the position table, nor the cross-attention keys' and values'
    projections, used once an utterance)."""
    o = size_entry("Whisper", size).options
    w = o.width
    attention, mlp, norm = 4 * w * w + 3 * w, 8 * w * w + 5 * w, 2 * w
    decoder = (o.vocab * w + o.text_ctx * w
               + o.decoder_layers * (2 * attention + mlp + 3 * norm) + norm)
    return decoder - o.text_ctx * w - o.decoder_layers * (2 * w * w + w)


def decode_weight_elements(family, size):
    """Weights a decode step reads (C++ Build*'s weight_bytes over the
    element size): all of them but the position or token embedding's other
    rows (Llama tied: its embedding is the head, read whole); Whisper's
    decoder's, as whisper_decode_weight_count."""
    o = size_entry(family, size).options
    params = size_entry(family, size).card_params
    if family == "GPT2":
        return params - o.max_positions * o.d_model
    if family == "Llama":
        return params - (0 if o.tied else o.vocab_size * o.d_model)
    if family == "Whisper":
        return whisper_decode_weight_count(size)
    raise ValueError(f"'{family}' has no generate phase")


# ------------------------------------------------------------------- check


RTOL, ATOL = 1e-4, 1e-5  # ATOL relative to the largest |output|
# Buffers that are the model's state rather than computed from its options.
_STATE_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


class BadDump(Exception):
    pass


def _load_dump(path):
    name = os.path.basename(path)
    if not name.endswith(".pt") or "-" not in name:
        raise BadDump(f"{path}: expected a file named FAMILY-SIZE.pt")
    family, size = name[:-len(".pt")].split("-", 1)
    try:
        size_entry(family, size)
    except ValueError as e:
        raise BadDump(f"{path}: {e}") from e
    try:
        # torch::pickle_save tags a typed c10::Dict with restore_type_tag,
        # which only records the dict's type; everything else is tensors.
        with torch.serialization.safe_globals([torch.jit._pickle.restore_type_tag]):
            tensors = torch.load(path, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is bad input
        raise BadDump(f"{path}: cannot read: {e}") from e
    if not isinstance(tensors, dict) or "output" not in tensors or "input:0" not in tensors:
        raise BadDump(f"{path}: expected a dict with input:0 ... and output")
    return family, size, tensors


def _compare(what, got, want, atol=None):
    """(a line saying how far `got` is from `want`, whether they are close).
    `atol`: an absolute tolerance instead of ATOL times the output's scale."""
    if got.shape != want.shape:
        return f"{what}: shape {tuple(got.shape)}, C++ {tuple(want.shape)}  DIVERGES", False
    diff = (got - want).abs()
    scale = want.abs().max().item()
    bound = ATOL * scale if atol is None else atol
    ok = bool((diff <= bound + RTOL * want.abs()).all())
    line = f"{what}: max abs diff {diff.max().item():.3g} (scale {scale:.3g})"
    return line + ("" if ok else "  DIVERGES"), ok


def check_dump(path):
    """Loads one C++ dump into the Python model, runs its inputs and
    compares with the C++ output; returns (ok, lines to print)."""
    family, size, tensors = _load_dump(path)
    inputs = [tensors[f"input:{i}"] for i in range(len(tensors)) if f"input:{i}" in tensors]
    seq = inputs[0].shape[1] if family == "Transformer" else None
    torch.manual_seed(0)  # as the C++ test before building its model
    model = forward_module(family, size, seq=seq)
    state, drawn = {}, {}
    for key, value in tensors.items():
        kind, _, name = key.partition(":")
        if kind in ("param", "buffer"):
            state[name] = value
        elif kind == "init":  # "init:param:NAME": the C++ model's seed-0 weights
            drawn[name.partition(":")[2]] = value
    expected, dumped = set(model.state_dict()), set(state)
    if expected != dumped:
        return False, [f"{family}/{size}: names differ: only in Python "
                       f"{sorted(expected - dumped)}, only in C++ {sorted(dumped - expected)}"]
    results = []
    if drawn:  # the same seed draws the same weights on both sides
        params = dict(model.named_parameters())
        differ = sorted(n for n, v in drawn.items()
                        if n not in params or not torch.equal(params[n].detach(), v))
        results.append((f"{family}/{size} weights drawn from seed 0: "
                        + (f"{len(drawn)} parameters equal" if not differ and
                           len(drawn) == len(params) else
                           f"differ from C++'s in {differ[:5]} ({len(differ)} of {len(drawn)})"),
                        not differ and len(drawn) == len(params)))
    # Buffers the models compute (RoPE tables, Whisper's sinusoids) must come
    # out the same in Python, not only load; batch norm's statistics are
    # state (the dump's are random).
    for name, buffer in model.named_buffers():
        if not name.endswith(_STATE_BUFFERS):
            # Tables of sines and cosines of angles up to their number of
            # positions: two float32 roundings of the largest angle (another
            # LibTorch's exp or multiply may round it the other way).
            atol = 2.0 * buffer.shape[0] * torch.finfo(torch.float32).eps
            results.append(_compare(f"{family}/{size} buffer {name}", buffer, state[name], atol))
    model.load_state_dict(state, strict=True)
    phase = "encode" if family == "Whisper" else "forward"
    with torch.inference_mode():
        results.append(_compare(f"{family}/{size} {phase}", model(*inputs), tensors["output"]))
        if family == "Whisper" and "decode:input:0" in tensors:
            logits = model.decode(tensors["decode:input:0"], tensors["output"])
            results.append(_compare(f"{family}/{size} decode", logits, tensors["decode:output"]))
    return all(ok for _, ok in results), [line for line, _ in results]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="compare C++ dumps with the Python models")
    check.add_argument("dumps", nargs="+", metavar="DUMP.pt")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    all_ok = True
    for path in args.dumps:
        try:
            ok, lines = check_dump(path)
        except BadDump as e:
            print(f"ltb_models: {e}", file=sys.stderr)
            return 2
        print("\n".join(lines))
        all_ok = all_ok and ok
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
