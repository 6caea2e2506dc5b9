"""Transformer (lib/models/transformer.{h,cc}), a row of the one decoder
(models/decoder.py): RMSNorm, rotary positions over adjacent pairs, SwiGLU,
an untied head, the framework's default initialisers."""
import dataclasses

from ltb.pysuite.models.decoder import Decoder, DecoderNames, head_dim, settings


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

    def decoder(self):
        return settings(self, num_kv_heads=self.num_heads,
                        head_dim=head_dim(self.d_model, self.num_heads), norm="rms",
                        positions="rope_pairs", max_positions=self.context_length, mlp="swiglu")


NAMES = DecoderNames(
    embed="token_embeddings", layers="layers", norm1="ln1", norm2="ln2", attn="attn",
    q="q_proj", k="k_proj", v="v_proj", o="output_proj", rope="rope", mlp="ffn", fc="w1",
    up="w3", down="w2", mlp_order=("fc", "down", "up"), final_norm="ln_final")


class TransformerLM(Decoder):
    def __init__(self, o):
        super().__init__(o.decoder(), NAMES)
