"""The decoder families as rows of the one decoder (models/decoder.py), as
lib/models/decoder_family.cc has them (DecoderRow): each family's sizes
(DecoderOptions, with shared/MODELS.md's parameter counts), its reference
model's module names (DecoderNames), how its checkpoints name the tensors,
and what its benchmarks run. Adding a decoder family is adding a row to
ROWS."""
import dataclasses
from typing import Callable, Optional

from ltb.pysuite.models.common import Size
from ltb.pysuite.models.decoder import Decoder, DecoderNames, DecoderOptions


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """How a family's checkpoints name the tensors (lib/models/weights.h's
    WeightNames), each a function of a parameter's name: `ignored`, a
    checkpoint's tensor passed over; `candidates`, the names a parameter
    may have in a checkpoint, in order; `transposed`, stored (in, out)."""
    ignored: Optional[Callable] = None
    candidates: Optional[Callable] = None
    transposed: Optional[Callable] = None


@dataclasses.dataclass(frozen=True)
class DecoderRow:
    """Everything that differs between the decoder families (C++'s
    DecoderRow)."""
    family: str
    sizes: tuple
    names: DecoderNames
    checkpoint: Checkpoint = Checkpoint()
    # Generates (greedy, with a cache, at a depth); else trains by the epoch.
    generates: bool = True
    # The benchmark's seq sets max_positions (rope_pairs' tables are computed
    # for it); else a seq or generation beyond max_positions is refused.
    seq_sets_positions: bool = False

    def build(self, o, draw=True):
        """The model of options `o`; draw=False: nothing drawn, for a
        checkpoint (C++: BuildDecoder)."""
        return Decoder(o, dataclasses.replace(self.names, draw=draw))

    def weight_names(self, o):
        """DecoderWeightNames: the checkpoint's conventions, and a tied
        model's head (the embedding again) passed over where a file keeps it."""
        c = self.checkpoint
        if not o.tied:
            return c
        head = self.names.head + ".weight"
        return dataclasses.replace(
            c, ignored=lambda name: name == head or bool(c.ignored and c.ignored(name)))


def _transformer(v, d, f, layers, heads):
    return DecoderOptions(v, d, f, layers, heads, max_positions=512)


# A pre-norm RMSNorm, rotary (adjacent pairs), SwiGLU decoder with an untied
# head, drawn by the framework's initialisers (the benchmark sets
# max_positions to its seq).
TRANSFORMER_SIZES = (
    Size("nano", _transformer(1000, 64, 256, 2, 4), 259_392),
    Size("small", _transformer(10000, 768, 3072, 12, 12), 128_625_408),
    Size("medium", _transformer(10000, 1024, 4096, 24, 16), 423_183_360),
    Size("large", _transformer(10000, 1280, 5120, 36, 20), 969_411_840),
    Size("xl", _transformer(10000, 1600, 6400, 48, 25), 1_998_235_200),
    Size("2.7B", _transformer(10000, 2560, 10240, 32, 32), 3_406_809_600),
)
TRANSFORMER_NAMES = DecoderNames(
    embed="token_embeddings", layers="layers", norm1="ln1", norm2="ln2", attn="attn",
    q="q_proj", k="k_proj", v="v_proj", o="output_proj", rope="rope", mlp="ffn", fc="w1",
    up="w3", down="w2", mlp_order=("fc", "down", "up"), final_norm="ln_final", hf_init=False)


def _gpt2(v, d, layers, heads):
    return DecoderOptions(v, d, 4 * d, layers, heads, max_positions=1024, norm="layer",
                          positions="learned", mlp="gelu_tanh", bias=True, fused_qkv=True,
                          tied=True)


# GPT-2: learned positions, LayerNorm, biases, one q/k/v projection, GELU
# (tanh) and a head tied to wte, under Hugging Face's names.
GPT2_SIZES = (
    Size("nano", _gpt2(1000, 64, 2, 4), 229_632),
    Size("small", _gpt2(50257, 768, 12, 12), 124_439_808),
    Size("medium", _gpt2(50257, 1024, 24, 16), 354_823_168),
    Size("large", _gpt2(50257, 1280, 36, 20), 774_030_080),
    Size("xl", _gpt2(50257, 1600, 48, 25), 1_557_611_200),
)
GPT2_NAMES = DecoderNames(
    embed="wte", pos_embed="wpe", layers="h", norm1="ln_1", norm2="ln_2", attn="attn",
    qkv="c_attn", o="c_proj", mlp="mlp", fc="c_fc", down="c_proj", final_norm="ln_f",
    residual_scaled=("c_proj.weight",))

LLAMA_CONTEXT = 131072  # Llama 3.1's and 3.2's max_position_embeddings


def _llama(v, d, f, layers, heads, kv, hs, tied, factor):
    return DecoderOptions(v, d, f, layers, heads, kv, hs, max_positions=LLAMA_CONTEXT,
                          positions="rope_half", rope_theta=500000.0, rope_factor=factor,
                          tied=tied)


# A Llama-3-class decoder: grouped-query attention, Llama 3's RoPE scaling,
# RMSNorm and SwiGLU under Hugging Face's LlamaForCausalLM names; 1B and 3B
# tie the head, 8B does not.
LLAMA_SIZES = (
    Size("nano", _llama(1000, 64, 256, 2, 4, 2, 16, True, 32.0), 187_200),
    Size("1B", _llama(128256, 2048, 8192, 16, 32, 8, 64, True, 32.0), 1_235_814_400),
    Size("3B", _llama(128256, 3072, 8192, 28, 24, 8, 128, True, 32.0), 3_212_749_824),
    Size("8B", _llama(128256, 4096, 14336, 32, 32, 8, 128, False, 8.0), 8_030_261_248),
)
LLAMA_NAMES = DecoderNames(
    trunk="model", embed="embed_tokens", layers="layers", norm1="input_layernorm",
    norm2="post_attention_layernorm", attn="self_attn", q="q_proj", k="k_proj", v="v_proj",
    o="o_proj", mlp="mlp", fc="gate_proj", up="up_proj", down="down_proj", final_norm="norm",
    rope="rotary_emb", qkv_order=("v", "q", "k"))


TRANSFORMER = DecoderRow(
    "Transformer", TRANSFORMER_SIZES, TRANSFORMER_NAMES,
    # Its RoPE tables are computed for the benchmark's seq, never loaded.
    Checkpoint(ignored=lambda n: n.endswith((".rope.cos", ".rope.sin"))),
    generates=False, seq_sets_positions=True)
GPT2 = DecoderRow(
    "GPT2", GPT2_SIZES, GPT2_NAMES,
    # Hugging Face's checkpoints: bare names or under "transformer."
    # (GPT2LMHeadModel's), Conv1D weights stored (in, out), the attention
    # masks old files keep as buffers.
    Checkpoint(candidates=lambda n: [n, "transformer." + n],
               transposed=lambda n: n.endswith((".c_attn.weight", ".c_proj.weight",
                                                ".c_fc.weight")),
               ignored=lambda n: n.endswith((".attn.bias", ".attn.masked_bias"))))
LLAMA = DecoderRow(
    "Llama", LLAMA_SIZES, LLAMA_NAMES,
    # Older checkpoints keep each layer's inv_freq, which the model computes.
    Checkpoint(ignored=lambda n: n.endswith("rotary_emb.inv_freq")))

# The decoder families, in registration order.
ROWS = {row.family: row for row in (TRANSFORMER, GPT2, LLAMA)}
