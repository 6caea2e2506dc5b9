"""Llama (lib/models/llama.{h,cc}), a row of the one decoder
(models/decoder.py): Hugging Face's LlamaForCausalLM and its names, RMSNorm,
grouped key/value heads, rotate-half positions with Llama 3's scaling,
SwiGLU, a head tied or not."""
import dataclasses

from ltb.pysuite.models.decoder import Decoder, DecoderNames, DecoderOptions

CONTEXT = 131072  # C++: kLlamaContext, Llama 3.1's and 3.2's max_position_embeddings


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

    def decoder(self):
        return DecoderOptions(
            self.vocab_size, self.d_model, self.d_ff, self.num_layers, self.num_heads,
            self.num_kv_heads, self.head_dim, norm="rms", eps=self.eps, positions="rope_half",
            max_positions=CONTEXT, rope_theta=self.rope_theta, rope_factor=self.rope_factor,
            low_freq_factor=self.low_freq_factor, high_freq_factor=self.high_freq_factor,
            original_context=self.original_context, mlp="swiglu", tied=self.tied, hf_init=True)


NAMES = DecoderNames(
    trunk="model", embed="embed_tokens", layers="layers", norm1="input_layernorm",
    norm2="post_attention_layernorm", attn="self_attn", q="q_proj", k="k_proj", v="v_proj",
    o="o_proj", mlp="mlp", fc="gate_proj", up="up_proj", down="down_proj", final_norm="norm",
    rope="rotary_emb", qkv_order=("v", "q", "k"))


class LlamaLM(Decoder):
    def __init__(self, o):
        super().__init__(o.decoder(), NAMES)
