"""Whisper (lib/models/whisper.{h,cc}): Hugging Face's Whisper encoder and
decoder with cached generation."""
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from ltb.pysuite.models.common import attend, cached


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
        k, v = cached(cache, self._heads(self.key(x)), self._heads(self.value(x)), position)
        q = self._heads(self.query(x))
        y = attend(q, k, v, causal=x.shape[1] > 1)  # (B, nh, T, hs)
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
