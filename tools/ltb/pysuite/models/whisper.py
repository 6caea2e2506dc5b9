"""Whisper (lib/models/whisper.{h,cc}): the Whisper encoder and decoder, of
the decoder's blocks (decoder.py), with cached generation."""
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from ltb.pysuite.models.decoder import Block, DecoderNames, DecoderOptions


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


def whisper_blocks(o, decoder):
    """The blocks' DecoderOptions (C++ WhisperBlocks; decoder: with
    cross-attention over the encoder output): LayerNorm, exact GELU, biases
    but the key's, no positions of their own."""
    return DecoderOptions(
        o.vocab if decoder else 0, o.width, 4 * o.width,
        o.decoder_layers if decoder else o.encoder_layers, o.heads,
        max_positions=o.text_ctx, norm="layer", positions="learned" if decoder else "none",
        mlp="gelu", bias=True, k_bias=False, tied=True, causal=decoder,
        cross_positions=o.audio_ctx if decoder else 0)


# The reference's module names; its weights drawn by PyTorch's initialisers.
NAMES = DecoderNames(embed="token_embedding", layers="blocks", norm1="attn_ln",
                     norm2="mlp_ln", attn="attn", o="out", mlp="mlp", fc="0", down="2",
                     final_norm="ln", q="query", k="key", v="value",
                     cross_norm="cross_attn_ln", cross="cross_attn", hf_init=False)


def blocks(o, decoder):
    b = whisper_blocks(o, decoder)
    return nn.ModuleList(Block(b, NAMES) for _ in range(b.num_layers))


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
        self.blocks = blocks(o, decoder=False)
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
        self.blocks = blocks(o, decoder=True)
        self.ln = nn.LayerNorm(o.width)
        self.text_ctx = o.text_ctx

    def hidden(self, tokens, position, cross, cache=None):
        """tokens (B, T) at [position, position + T) -> (B, T, w) before the
        final norm, cross-attending to `cross` ((k, v) per layer), using and
        filling `cache` ((k, v) per layer) when given."""
        t = tokens.shape[1]
        if position + t > self.text_ctx:
            raise ValueError(f"position {position + t} is beyond the decoder's {self.text_ctx}")
        x = self.token_embedding(tokens) + self.positional_embedding[position:position + t]
        for i, block in enumerate(self.blocks):
            x = block(x, cache=None if cache is None else cache[i], position=position,
                      cross=cross[i])
        return x

    def logits(self, x):
        return F.linear(self.ln(x), self.token_embedding.weight)  # tied

    def forward(self, tokens, xa):
        # tokens (B, T) from position 0 over xa (B, S, w) -> logits (B, T, V).
        cross = [block.cross_attn.keys_values(xa) for block in self.blocks]
        return self.logits(self.hidden(tokens, 0, cross))


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
        x = self.decoder.hidden(tokens, position, state["cross"], state["self"])
        return self.decoder.logits(x[:, tokens.shape[1] - 1])  # (B, V)

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
