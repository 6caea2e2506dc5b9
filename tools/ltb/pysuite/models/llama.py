"""Llama (lib/models/llama.{h,cc}), a row of the one decoder
(models/decoder.py): Hugging Face's LlamaForCausalLM and its names, RMSNorm,
grouped key/value heads, rotate-half positions with Llama 3's scaling,
SwiGLU, a head tied or not."""
import dataclasses

from ltb.pysuite.models.decoder import Decoder, DecoderNames, DecoderShape, settings

CONTEXT = 131072  # C++: kLlamaContext, Llama 3.1's and 3.2's max_position_embeddings


@dataclasses.dataclass(frozen=True)
class LlamaOptions(DecoderShape):
    tied: bool
    rope_factor: float
    rope_theta: float = 500000.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_context: int = 8192
    eps: float = 1e-5

    def decoder(self):
        return settings(self, norm="rms", positions="rope_half", max_positions=CONTEXT,
                        mlp="swiglu", hf_init=True)


NAMES = DecoderNames(
    trunk="model", embed="embed_tokens", layers="layers", norm1="input_layernorm",
    norm2="post_attention_layernorm", attn="self_attn", q="q_proj", k="k_proj", v="v_proj",
    o="o_proj", mlp="mlp", fc="gate_proj", up="up_proj", down="down_proj", final_norm="norm",
    rope="rotary_emb", qkv_order=("v", "q", "k"))


class LlamaLM(Decoder):
    def __init__(self, o):
        super().__init__(o.decoder(), NAMES)
