"""Transformer (lib/models/transformer.{h,cc}): pre-norm decoder with RMSNorm,
rotary positions and SwiGLU."""
import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ltb.pysuite.models.common import RMSNorm


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
