"""GPT2 (lib/models/gpt2.{h,cc}): learned positions, LayerNorm, GELU (tanh), LM
head tied to wte."""
import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ltb.pysuite.models.common import attend, cached, init_like_hugging_face, undrawn


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
        self.c_attn = undrawn(nn.Linear, o.d_model, 3 * o.d_model)
        self.c_proj = undrawn(nn.Linear, o.d_model, o.d_model)
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
            k, v = cached(cache, k, v, position)
        # A chunk is causal over itself and sees every cached position before
        # it; one new token attends to all before it.
        y = attend(q, k, v, causal=cache is None or t > 1)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))  # (B, T, d)


class GPT2MLP(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.c_fc = undrawn(nn.Linear, d_model, 4 * d_model)
        self.c_proj = undrawn(nn.Linear, 4 * d_model, d_model)

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
        self.wte = undrawn(nn.Embedding, o.vocab_size, o.d_model)
        self.wpe = undrawn(nn.Embedding, o.max_positions, o.d_model)
        self.h = nn.ModuleList(GPT2Block(o) for _ in range(o.num_layers))
        self.ln_f = nn.LayerNorm(o.d_model, eps=o.eps)
        self.options = o
        # --quant (ltb/pysuite/quant.py): a quantised copy of the tied head,
        # which the logits read instead of wte (the lookup keeps wte); C++:
        # head_quantized_.
        self.quantized_head = None
        # GPT2Config's initializer_range, its residual projections scaled.
        init_like_hugging_face(self, 0.02, o.num_layers, ("c_proj.weight",))

    def _logits(self, y):
        # The LM head is tied to the token embedding: no parameter of its own.
        if self.quantized_head is not None:
            return self.quantized_head(y)
        return F.linear(y, self.wte.weight)

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
        return self._logits(self.ln_f(x))  # (B, T, V)

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
        return self._logits(self.ln_f(x[:, t - 1]))  # (B, V)

    def make_cache(self, batch, positions):
        o = self.options
        w = self.wte.weight
        shape = (batch, o.num_heads, positions, o.d_model // o.num_heads)
        return [(w.new_empty(shape), w.new_empty(shape)) for _ in range(o.num_layers)]
