"""Llama (lib/models/llama.{h,cc}): Hugging Face's LlamaForCausalLM, grouped
key/value heads, Llama 3 rotary scaling."""
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from ltb.pysuite.models.common import RMSNorm, attend, cached, init_like_hugging_face, undrawn


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


def apply_llama_rotary(x, cos, sin):
    # x: (B, heads, T, hs); the two halves of a head rotate together.
    x1, x2 = x.chunk(2, -1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)


class LlamaAttention(nn.Module):
    def __init__(self, o):
        super().__init__()
        if o.num_heads % o.num_kv_heads:
            raise ValueError(f"kv heads ({o.num_kv_heads}) must divide heads ({o.num_heads})")
        self.q_proj = undrawn(nn.Linear, o.d_model, o.num_heads * o.head_dim, bias=False)
        self.k_proj = undrawn(nn.Linear, o.d_model, o.num_kv_heads * o.head_dim, bias=False)
        self.v_proj = undrawn(nn.Linear, o.d_model, o.num_kv_heads * o.head_dim, bias=False)
        self.o_proj = undrawn(nn.Linear, o.num_heads * o.head_dim, o.d_model, bias=False)
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
            k, v = cached(cache, k, v, position)  # (B, kv, position + T, hs)
        rep = o.num_heads // o.num_kv_heads
        if t == 1 and rep > 1:
            # Decoding one token (C++: LlamaAttentionImpl::forward): the rep
            # query heads of a kv head attend to its keys in place, unmasked,
            # without repeating the cache.
            y = attend(q.reshape(b, o.num_kv_heads, rep, o.head_dim), k, v, causal=False)
            return self.o_proj(y.reshape(b, 1, o.num_heads * o.head_dim))
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        y = attend(q, k, v, causal=cache is None or t > 1)  # (B, nh, T, hs)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, o.num_heads * o.head_dim))


class LlamaMLP(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.gate_proj = undrawn(nn.Linear, d_model, d_ff, bias=False)
        self.up_proj = undrawn(nn.Linear, d_model, d_ff, bias=False)
        self.down_proj = undrawn(nn.Linear, d_ff, d_model, bias=False)

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
        self.embed_tokens = undrawn(nn.Embedding, o.vocab_size, o.d_model)
        self.layers = nn.ModuleList(LlamaLayer(o) for _ in range(o.num_layers))
        self.norm = RMSNorm(o.d_model, o.eps)
        self.rotary_emb = LlamaRotary(o)


class LlamaLM(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.model = LlamaModel(o)
        if not o.tied:
            self.lm_head = undrawn(nn.Linear, o.d_model, o.vocab_size, bias=False)
        self.options = o
        # --quant (ltb/pysuite/quant.py), tied sizes: a quantised copy of the
        # head, which the logits read instead of embed_tokens (the lookup
        # keeps it); untied, lm_head is quantised as a linear layer. C++:
        # head_quantized_.
        self.quantized_head = None
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
        if self.quantized_head is not None:
            return self.quantized_head(y)
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
