"""The one decoder-only language model behind Transformer, GPT2 and Llama
(lib/models/decoder.{h,cc}): pre-norm blocks of attention and an MLP, shaped
by a row of settings (DecoderOptions) and registered under a row of module
names (DecoderNames), so that each family keeps the parameter names its
checkpoints and the C++ parity test use.

Adding a family is a row, not a model: a DecoderRow in decoder_family.py
(the mirror of lib/models/decoder_family.cc) with its sizes as
DecoderOptions, its DecoderNames and its checkpoints' conventions. Qwen2,
say, is Llama's names and conventions with sizes of qkv_bias=True,
rope_factor=0 (no Llama 3 scaling).
"""
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from ltb.pysuite.models.common import attend, cached, init_like_hugging_face, undrawn

NORMS = ("layer", "rms")
POSITIONS = ("learned", "rope_pairs", "rope_half", "none")
MLPS = ("gelu_tanh", "swiglu", "gelu")


@dataclasses.dataclass(frozen=True)
class DecoderOptions:
    """lib/models/decoder.h's DecoderOptions: the same settings, names and
    order (bench --list_families prints them as each size's options)."""
    vocab_size: int
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    num_kv_heads: int = None  # None: num_heads
    head_dim: int = None  # None: d_model / num_heads
    # Positions the model handles: a learned table's rows, the pair tables'
    # length, or the context of a rope_half model.
    max_positions: int = 1024
    norm: str = "rms"  # "layer": LayerNorm with a bias; "rms": RMSNorm, fp32 inside
    eps: float = 1e-5
    # "learned": a table of max_positions rows added to the tokens';
    # "rope_pairs": rotary over adjacent pairs, tables per attention;
    # "rope_half": Hugging Face's rotate_half, Llama 3 scaling if rope_factor > 0;
    # "none": added before the blocks (Whisper's encoder, fixed sinusoids).
    positions: str = "rope_pairs"
    rope_theta: float = 10000.0
    rope_factor: float = 0.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_context: int = 8192
    # "gelu_tanh": down(gelu(fc)); "swiglu": down(silu(fc) * up); "gelu": exact (Whisper)
    mlp: str = "swiglu"
    bias: bool = False  # every linear of the blocks
    qkv_bias: bool = False  # q, k and v only (Qwen2)
    k_bias: bool = True  # False: k's alone has none (Whisper's key)
    fused_qkv: bool = False  # one projection of q, k, v (GPT-2's c_attn)
    tied: bool = False  # the head is the token embedding
    causal: bool = True  # False: self-attention sees every position
    # Positions of an encoder output every block cross-attends to after its
    # self-attention (Whisper's audio_ctx); 0: no cross-attention.
    cross_positions: int = 0

    def __post_init__(self):
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        if self.head_dim is None:
            if self.d_model % self.num_heads:
                raise ValueError(f"heads ({self.num_heads}) must divide d_model "
                                 f"({self.d_model})")
            object.__setattr__(self, "head_dim", self.d_model // self.num_heads)
        for field, value, valid in (("norm", self.norm, NORMS),
                                    ("positions", self.positions, POSITIONS),
                                    ("mlp", self.mlp, MLPS)):
            if value not in valid:
                raise ValueError(f"unknown {field} '{value}'; valid: {', '.join(valid)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"kv heads ({self.num_kv_heads}) must divide heads "
                             f"({self.num_heads})")
        if self.positions != "learned" and self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head size, got {self.head_dim}")


@dataclasses.dataclass(frozen=True)
class DecoderNames:
    """A family's module names; None where its settings build no such module."""
    embed: str
    layers: str
    norm1: str
    norm2: str
    attn: str
    o: str
    mlp: str
    fc: str  # the MLP's first matrix: GELU's fc, SwiGLU's gate
    down: str
    final_norm: str
    trunk: str = ""  # the submodule holding embed, layers, final_norm and a model-level rope
    pos_embed: str = None
    q: str = None
    k: str = None
    v: str = None
    qkv: str = None
    up: str = None
    head: str = "lm_head"
    rope: str = None
    cross_norm: str = None  # cross-attention's
    cross: str = None
    # The order the MLP's matrices are built in, which decides the drawn
    # weights where hf_init is false, and the order q, k and v are projected
    # in, which decides how autograd sums their gradients: the reference
    # code's, so that each family's weights and gradients stay bit-identical.
    mlp_order: tuple = ("fc", "up", "down")
    qkv_order: tuple = ("q", "k", "v")
    # Weights drawn by init_like_hugging_face (std 0.02, these matrices'
    # scaled by 1 / sqrt(2 layers)); else the framework's default
    # initialisers in construction order.
    hf_init: bool = True
    residual_scaled: tuple = ()
    # False: nothing drawn, the weights uninitialised for a checkpoint to
    # fill (--weights), and the default generator as it was.
    draw: bool = True


class Named(nn.Module):
    """A module whose children are registered under the family's names and
    found by their role, so that swapping one (--quant) is seen here."""

    def __init__(self, names):
        super().__init__()
        self.names = names

    def add(self, role, module):
        self.add_module(getattr(self.names, role), module)

    def part(self, role):
        return getattr(self, getattr(self.names, role))


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


def norm(o):
    return RMSNorm(o.d_model, o.eps) if o.norm == "rms" else nn.LayerNorm(o.d_model, eps=o.eps)


class PairRotary(nn.Module):
    """positions "rope_pairs": RoPE over adjacent pairs (0,1), (2,3), ... of
    the last dimension; the cos/sin tables are buffers, computed in float64."""

    def __init__(self, o):
        super().__init__()
        inv_freq = torch.pow(o.rope_theta, -torch.arange(0, o.head_dim, 2, dtype=torch.float64)
                             / o.head_dim)
        angles = torch.outer(torch.arange(o.max_positions, dtype=torch.float64), inv_freq)
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


def half_frequencies(o):
    """positions "rope_half"'s inverse frequencies in fp32: transformers'
    default ones, scaled as its _compute_llama3_parameters where
    rope_factor > 0."""
    inv_freq = 1.0 / (o.rope_theta ** (torch.arange(0, o.head_dim, 2, dtype=torch.int64)
                                       .float() / o.head_dim))
    if o.rope_factor <= 0:
        return inv_freq
    low_wavelen = o.original_context / o.low_freq_factor
    high_wavelen = o.original_context / o.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / o.rope_factor, inv_freq)
    smooth = (o.original_context / wavelen - o.low_freq_factor) / (
        o.high_freq_factor - o.low_freq_factor)
    smoothed = (1 - smooth) * scaled / o.rope_factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


class HalfRotary(nn.Module):
    """positions "rope_half": transformers' LlamaRotaryEmbedding, the inverse
    frequencies a buffer of the model; each position's cos and sin computed
    in fp32 once a forward, then cast to the hidden states' dtype."""

    def __init__(self, o):
        super().__init__()
        self.register_buffer("inv_freq", half_frequencies(o))

    def _apply(self, fn, recurse=True):
        # The frequencies move with the model but stay fp32 whatever its
        # dtype, as from_pretrained(torch_dtype=...) keeps them (and bench):
        # rounded to bf16 they turn position 2047's angles by radians.
        inv_freq = self.inv_freq
        super()._apply(fn, recurse)
        self.inv_freq = inv_freq.to(self.inv_freq.device)
        return self

    def forward(self, positions, dtype):
        angles = torch.outer(positions.float(), self.inv_freq)  # (T, hs/2)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x, cos, sin):
    # x: (B, heads, T, hs); the two halves of a head rotate together.
    x1, x2 = x.chunk(2, -1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)


def linear_maker(names):
    # hf_init draws the weights after the build, and a checkpoint fills them
    # (draw false): allocate them undrawn.
    return (lambda *shape, bias: undrawn(nn.Linear, *shape, bias=bias)) \
        if names.hf_init or not names.draw else (lambda *shape, bias: nn.Linear(*shape, bias=bias))


class Attention(Named):
    """Causal self-attention with grouped key/value heads over an optional
    cache (lib/models/attention.cc)."""

    def __init__(self, o, names):
        super().__init__(names)
        linear = linear_maker(names)
        q, kv = o.num_heads * o.head_dim, o.num_kv_heads * o.head_dim
        in_bias = o.bias or o.qkv_bias
        if o.fused_qkv:
            self.add("qkv", linear(o.d_model, q + 2 * kv, bias=in_bias))
        else:
            for role, width in (("q", q), ("k", kv), ("v", kv)):
                self.add(role, linear(o.d_model, width,
                                      bias=in_bias and (role != "k" or o.k_bias)))
        self.add("o", linear(q, o.d_model, bias=o.bias))
        if o.positions == "rope_pairs":
            self.add("rope", PairRotary(o))
        self.options = o

    def _heads(self, y, n):
        b, t, _ = y.shape
        return y.view(b, t, n, self.options.head_dim).transpose(1, 2)  # (B, n, T, hs)

    def keys_values(self, xa):
        """The keys and values of an encoder output xa (B, S, d), (B, kv, S, hs) each."""
        kv = self.options.num_kv_heads
        return self._heads(self.part("k")(xa), kv), self._heads(self.part("v")(xa), kv)

    def cross(self, x, k, v):
        """Cross-attention of x (B, T, d) over keys_values' keys and values."""
        b, t, _ = x.shape
        y = attend(self._heads(self.part("q")(x), self.options.num_heads), k, v, causal=False)
        return self.part("o")(y.transpose(1, 2).reshape(b, t, -1))  # (B, T, d)

    def _rotate(self, y, positions, tables, per_row=False):
        if self.options.positions == "rope_pairs" and per_row:
            # forward_slots: row b's one token at positions[b].
            rope = self.part("rope")
            cos = rope.cos.index_select(0, positions).to(y.dtype)[:, None, None]
            sin = rope.sin.index_select(0, positions).to(y.dtype)[:, None, None]
            pairs = y.unflatten(-1, (-1, 2))
            x0, x1 = pairs[..., 0], pairs[..., 1]
            return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)
        if self.options.positions == "rope_pairs":
            return self.part("rope")(y, positions)
        if self.options.positions == "rope_half":
            return rotate_half(y, *tables)
        return y

    def forward(self, x, positions, tables=None, cache=None, position=0, slot_mask=None):
        # positions: (T,) of x's tokens (forward_slots: (S,), one a row);
        # tables: rope_half's (cos, sin); cache: (keys, values) of this layer,
        # (B, kv, positions, hs) each, written in place at [position, position + T).
        b, t, _ = x.shape
        o = self.options
        q_width, kv_width = o.num_heads * o.head_dim, o.num_kv_heads * o.head_dim
        if o.fused_qkv:
            q, k, v = self.part("qkv")(x).split((q_width, kv_width, kv_width), -1)
        else:
            y = {role: self.part(role)(x) for role in self.names.qkv_order}
            q, k, v = y["q"], y["k"], y["v"]

        v = self._heads(v, o.num_kv_heads)
        per_row = slot_mask is not None
        q = self._rotate(self._heads(q, o.num_heads), positions, tables, per_row).to(v.dtype)
        k = self._rotate(self._heads(k, o.num_kv_heads), positions, tables, per_row).to(v.dtype)
        rep = o.num_heads // o.num_kv_heads
        if slot_mask is not None:
            # forward_slots: each row's key and value at its own position,
            # attention over the first keys under its own mask (C++:
            # DecoderAttentionImpl::SlotStep).
            rows = torch.arange(b, device=x.device)
            cache[0].transpose(1, 2)[rows, positions] = k[:, :, 0]
            cache[1].transpose(1, 2)[rows, positions] = v[:, :, 0]
            keys = slot_mask.shape[-1]
            y = F.scaled_dot_product_attention(
                q.reshape(b, o.num_kv_heads, rep, o.head_dim), cache[0][:, :, :keys],
                cache[1][:, :, :keys], attn_mask=slot_mask)
            return self.part("o")(y.reshape(b, 1, q_width))
        if cache is not None:
            k, v = cached(cache, k, v, position)  # (B, kv, position + T, hs)
        if t == 1 and rep > 1:
            # Decoding one token (C++: the decoder's attention): the rep query
            # heads of a kv head attend to its keys in place, unmasked,
            # without repeating the cache.
            y = attend(q.reshape(b, o.num_kv_heads, rep, o.head_dim), k, v, causal=False)
            return self.part("o")(y.reshape(b, 1, q_width))
        if rep > 1:
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        # A chunk is causal over itself and sees every cached position before
        # it; one new token attends to all before it.
        y = attend(q, k, v, causal=o.causal and (cache is None or t > 1))  # (B, nh, T, hs)
        return self.part("o")(y.transpose(1, 2).reshape(b, t, q_width))  # (B, T, d)


class MLP(Named):
    def __init__(self, o, names):
        super().__init__(names)
        linear = linear_maker(names)
        shapes = {"fc": (o.d_model, o.d_ff), "up": (o.d_model, o.d_ff),
                  "down": (o.d_ff, o.d_model)}
        for role in names.mlp_order:
            if role != "up" or o.mlp == "swiglu":
                self.add(role, linear(*shapes[role], bias=o.bias))
        self.kind = o.mlp

    def forward(self, x):
        if self.kind == "swiglu":
            return self.part("down")(F.silu(self.part("fc")(x)) * self.part("up")(x))
        approximate = "tanh" if self.kind == "gelu_tanh" else "none"
        return self.part("down")(F.gelu(self.part("fc")(x), approximate=approximate))


class Block(Named):
    def __init__(self, o, names):
        super().__init__(names)
        self.add("norm1", norm(o))
        self.add("norm2", norm(o))
        self.add("attn", Attention(o, names))
        # Built in the reference's order, which decides the drawn weights.
        if o.cross_positions:
            self.add("cross_norm", norm(o))
            self.add("cross", Attention(o, names))
        self.add("mlp", MLP(o, names))

    def forward(self, x, positions=None, tables=None, cache=None, position=0, cross=None,
                slot_mask=None):
        # cross: the (keys, values) this layer cross-attends to.
        h = x + self.part("attn")(self.part("norm1")(x), positions, tables, cache, position,
                                  slot_mask)
        if cross is not None:
            h = h + self.part("cross").cross(self.part("cross_norm")(h), *cross)
        return h + self.part("mlp")(self.part("norm2")(h))


class Decoder(Named):
    """The model: tokens (B, T) -> logits (B, T, V); forward_cached and
    make_cache for generation with a key/value cache."""

    def __init__(self, o, names):
        super().__init__(names)
        self.options = o
        if names.trunk:
            self.add("trunk", Named(names))
        trunk = self.trunk()
        embedding = (lambda *shape: undrawn(nn.Embedding, *shape)) \
            if names.hf_init or not names.draw else nn.Embedding
        trunk.add("embed", embedding(o.vocab_size, o.d_model))
        if o.positions == "learned":
            trunk.add("pos_embed", embedding(o.max_positions, o.d_model))
        trunk.add("layers", nn.ModuleList())
        trunk.add("final_norm", norm(o))
        if o.positions == "rope_half":
            trunk.add("rope", HalfRotary(o))
        if not o.tied:
            self.add("head", linear_maker(names)(o.d_model, o.vocab_size, bias=False))
        # The blocks last, as the C++ constructor's body adds them, so that
        # one seed draws the same weights on both sides.
        trunk.part("layers").extend(Block(o, names) for _ in range(o.num_layers))
        # --quant (ltb/pysuite/quant.py), tied head: a quantised copy of the
        # embedding, which the logits read instead of it (the lookup keeps
        # it); an untied head is quantised as a linear layer. C++:
        # head_quantized_.
        self.quantized_head = None
        if names.hf_init and names.draw:  # GPT2Config's and LlamaConfig's initializer_range
            init_like_hugging_face(self, 0.02, o.num_layers, names.residual_scaled)

    def trunk(self):
        return self.part("trunk") if self.names.trunk else self

    def embedding(self):
        return self.trunk().part("embed")

    def _hidden(self, tokens, position=0, cache=None):
        # tokens (B, T) at [position, position + T) -> (B, T, d) before the
        # final norm.
        o, trunk, t = self.options, self.trunk(), tokens.shape[1]
        if cache is not None and position + t > cache[0][0].shape[2]:
            raise ValueError(f"position {position + t} is beyond the cache of "
                             f"{cache[0][0].shape[2]}")
        if position + t > o.max_positions:
            raise ValueError(f"sequence of {position + t} tokens is longer than the "
                             f"{o.max_positions} positions of the model")
        positions = torch.arange(position, position + t, device=tokens.device)
        x = trunk.part("embed")(tokens)  # (B, T, d)
        if o.positions == "learned":
            x = x + trunk.part("pos_embed")(positions)
        tables = trunk.part("rope")(positions, x.dtype) if o.positions == "rope_half" else None
        for i, layer in enumerate(trunk.part("layers")):
            x = layer(x, positions, tables, None if cache is None else cache[i], position)
        return x

    def _logits(self, y):
        if self.quantized_head is not None:
            return self.quantized_head(y)
        if self.options.tied:  # no parameter of its own
            return F.linear(y, self.embedding().weight)
        return self.part("head")(y)

    def forward(self, tokens):
        # tokens: (B, T) int64 at positions [0, T) -> logits (B, T, V).
        return self._logits(self.trunk().part("final_norm")(self._hidden(tokens)))

    def forward_cached(self, tokens, position, cache):
        """tokens (B, T) at [position, position + T), every layer's keys and
        values written into cache (make_cache) -> the last position's logits
        (B, V)."""
        x = self._hidden(tokens, position, cache)
        return self._logits(self.trunk().part("final_norm")(x[:, tokens.shape[1] - 1]))

    def forward_slots(self, tokens, positions, cache, keys=None):
        """One decode step of slots at positions of their own (continuous
        batching; C++: DecoderLMImpl::forward_slots and, with keys,
        forward_slots_over): tokens (S, 1), row b at positions[b] (a list),
        rows [0, S) of the cache -> logits (S, V). keys: the cache positions
        attended over, each row masked to its own (default: the longest
        row's)."""
        o, trunk, s = self.options, self.trunk(), tokens.shape[0]
        keys = max(positions) + 1 if keys is None else keys
        if keys < max(positions) + 1:
            raise ValueError(f"{keys} keys cannot hold position {max(positions)}")
        if keys > min(o.max_positions, cache[0][0].shape[2]):
            raise ValueError(f"position {keys - 1} is beyond the model's or the cache's")
        where = torch.tensor(positions, dtype=torch.long, device=tokens.device)  # (S,)
        mask = (torch.arange(keys, device=tokens.device)[None] <= where[:, None]).view(
            s, 1, 1, keys)
        x = trunk.part("embed")(tokens)  # (S, 1, d)
        if o.positions == "learned":
            x = x + trunk.part("pos_embed")(where)[:, None]
        tables = None
        if o.positions == "rope_half":
            cos, sin = trunk.part("rope")(where, x.dtype)  # (S, hs/2)
            tables = (cos[:, None, None], sin[:, None, None])
        for i, layer in enumerate(trunk.part("layers")):
            rows = (cache[i][0][:s], cache[i][1][:s])
            x = layer(x, where, tables, rows, 0, slot_mask=mask)
        return self._logits(self.trunk().part("final_norm")(x[:, 0]))

    def make_cache(self, batch, positions):
        o = self.options
        w = self.embedding().weight
        shape = (batch, o.num_kv_heads, positions, o.head_dim)
        return [(w.new_empty(shape), w.new_empty(shape)) for _ in range(o.num_layers)]
