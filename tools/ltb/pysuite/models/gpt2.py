"""GPT2 (lib/models/gpt2.{h,cc}), a row of the one decoder
(models/decoder.py): learned positions, LayerNorm, fused q/k/v, GELU (tanh),
biases everywhere, the head tied to wte, Hugging Face's initialisation."""
import dataclasses

from ltb.pysuite.models.decoder import Decoder, DecoderNames, head_dim, settings


@dataclasses.dataclass(frozen=True)
class GPT2Options:
    vocab_size: int
    d_model: int
    num_layers: int
    num_heads: int
    max_positions: int = 1024
    eps: float = 1e-5

    def decoder(self):
        return settings(self, d_ff=4 * self.d_model, num_kv_heads=self.num_heads,
                        head_dim=head_dim(self.d_model, self.num_heads), norm="layer",
                        positions="learned", mlp="gelu_tanh", bias=True, fused_qkv=True,
                        tied=True, hf_init=True, residual_scaled=("c_proj.weight",))


NAMES = DecoderNames(
    embed="wte", pos_embed="wpe", layers="h", norm1="ln_1", norm2="ln_2", attn="attn",
    qkv="c_attn", o="c_proj", mlp="mlp", fc="c_fc", down="c_proj", final_norm="ln_f")


class GPT2LM(Decoder):
    def __init__(self, o):
        super().__init__(o.decoder(), NAMES)
