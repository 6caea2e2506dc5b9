"""The suite's model families (shared/MODELS.md) in PyTorch's Python API,
mirroring the C++ modules of lib/models (one file a family in models/, named
as there): the same parameter and buffer names, the same computation and the
same size tables, so that one state_dict loads into both and a result of
either means the same model. By name:

    build(family, size)              the model, options as the C++ defaults
    forward_inputs(family, size, batch, seq, dtype, device)
                                     the inputs of the inference benchmark
    forward_module(family, size)     the module whose forward(*inputs) is that
                                     phase (Whisper: encode), for torch.export

and the FLOPs of a step as the C++ plans count them.
"""
import dataclasses

import torch

from ltb.pysuite.models.cnn import CNN, CNNOptions
from ltb.pysuite.models.common import FAMILIES, Size
from ltb.pysuite.models.encdec import EncDec, EncDecOptions
from ltb.pysuite.models.encoder import Encoder, EncoderOptions
from ltb.pysuite.models.decoder_family import ROWS
from ltb.pysuite.models.resnet import ResNet, ResNetOptions
from ltb.pysuite.models.whisper import Whisper, WhisperEncode, WhisperOptions


_SIZES = {
    **{family: row.sizes for family, row in ROWS.items()},
    "ResNet": (
        Size("nano", ResNetOptions(False, (1, 1, 1, 1), widths=(16, 32, 64, 128), stem=16),
             438_456),
        Size("resnet18", ResNetOptions(False, (2, 2, 2, 2)), 11_689_512),
        Size("resnet50", ResNetOptions(True, (3, 4, 6, 3)), 25_557_032),
    ),
    "CNN": (
        Size("nano", CNNOptions(16, 32, 128), 268_650),
        Size("default", CNNOptions(32, 64, 512), 2_122_186),
    ),
    "Encoder": (
        Size("nano", EncoderOptions(64, 4, 256, 2), 99_968),
        Size("default", EncoderOptions(512, 8, 2048, 6), 18_914_304),
    ),
    "Whisper": (
        Size("nano", WhisperOptions(64, 4, 2, 2, vocab=1000), 353_792),
        Size("tiny", WhisperOptions(384, 6, 4, 4), 37_184_640),
        Size("base", WhisperOptions(512, 8, 6, 6), 71_825_920),
    ),
    "EncDec": (
        Size("nano", EncDecOptions(64, 4, 2, 2, 256, vocab=1000), 362_728),
        Size("tiny", EncDecOptions(128, 4, 3, 3, 512), 3_494_400),
        Size("small", EncDecOptions(512, 8, 6, 6, 2048), 52_537_344),
        Size("base", EncDecOptions(768, 12, 12, 12, 3072), 211_069_952),
        Size("xl", EncDecOptions(2048, 32, 24, 24, 8192), 2_853_715_968),
    ),
}


DECODERS = tuple(ROWS)  # the decoder families, rows of the one decoder

_MODELS = {
    **{family: row.build for family, row in ROWS.items()},
    "ResNet": ResNet, "CNN": CNN, "Encoder": Encoder, "Whisper": Whisper, "EncDec": EncDec,
}


def _family(family):
    if family not in _SIZES:
        raise ValueError(f"unknown family '{family}'; valid: {', '.join(FAMILIES)}")
    return _SIZES[family]


def sizes(family):
    """The family's size names, in the C++ table's order."""
    return tuple(s.name for s in _family(family))


def size_entry(family, size):
    """The Size (name, options, card_params) of `size`."""
    for s in _family(family):
        if s.name == size:
            return s
    raise ValueError(f"unknown {family} size '{size}'; valid: {', '.join(sizes(family))}")


def options(family, size, **overrides):
    """The size's options, with fields replaced as C++'s TORCH_ARG setters do."""
    return dataclasses.replace(size_entry(family, size).options, **overrides)


def build(family, size, draw=True, **overrides):
    """The model of `size` (train mode, as a new C++ module), with option
    fields overridden (e.g. max_positions=1024 for the Transformer);
    draw=False: a decoder's weights left undrawn for a checkpoint."""
    o = options(family, size, **overrides)
    return _MODELS[family](o) if draw else _MODELS[family](o, draw=False)


def benchmark_overrides(family, seq=None):
    """The options the C++ benchmark sets besides the size's: a row whose
    seq sets its positions (the Transformer's) takes the seq
    (decoder_family.cc's BuildDecoder)."""
    row = ROWS.get(family)
    if row is not None and row.seq_sets_positions and seq is not None:
        return {"max_positions": seq}
    return {}


def forward_module(family, size, seq=None):
    """The module (eval mode) whose forward(*forward_inputs(...)) is the
    family's inference benchmark phase: forward, or Whisper's encode. `seq`
    builds it as the benchmark of that seq does (Transformer: the RoPE tables
    then hold exactly seq positions, as in the C++ benchmark)."""
    o = options(family, size, **benchmark_overrides(family, seq))
    model = WhisperEncode(o) if family == "Whisper" else _MODELS[family](o)
    return model.eval()


def forward_inputs(family, size, batch, seq=None, dtype=torch.float32, device="cpu",
                   generator=None):
    """The inputs of the family's inference benchmark, as its C++ Build*
    passes them: token ids (int64) for the language models, or standard-normal
    floats drawn in fp32 then rounded to `dtype`. Drawn on the CPU from
    `generator`, then moved to `device`. `seq` is ignored by families without
    a sequence (ResNet, CNN, Whisper)."""
    o = size_entry(family, size).options

    def ids(vocab, *shape):
        return torch.randint(0, vocab, shape, generator=generator).to(device)

    def floats(*shape):
        return torch.randn(shape, generator=generator).to(device=device, dtype=dtype)

    if family in DECODERS:
        return (ids(o.vocab_size, batch, seq),)  # (B, T)
    if family == "ResNet":
        return (floats(batch, 3, 224, 224),)
    if family == "CNN":
        return (floats(batch, 3, 32, 32),)
    if family == "Encoder":
        return (floats(seq, batch, o.d_model),)  # (T, B, d)
    if family == "Whisper":
        return (floats(batch, o.mels, o.frames),)  # (B, 80, 3000)
    if family == "EncDec":
        # Source and target drawn as one sample (B, S + S); the forward takes
        # the source and the target without its last token.
        pairs = ids(o.vocab, batch, 2 * seq)
        return pairs[:, :seq].contiguous(), pairs[:, seq:2 * seq - 1].contiguous()
    raise ValueError(f"unknown family '{family}'; valid: {', '.join(FAMILIES)}")


def param_count(model):
    return sum(p.numel() for p in model.parameters())


def _decoder(family, size):
    """The DecoderOptions of a decoder family's size."""
    if family not in DECODERS:
        raise ValueError(f"no FLOP count for '{family}'; valid: {', '.join(DECODERS)}")
    return size_entry(family, size).options


def _layer_flops(o, batch, tokens, keys):
    """A decoder layer (lib/models/decoder.cc's plan): the q, k, v and output
    projections, the attention's scores and values, the MLP's two (GELU) or
    three (SwiGLU) matrices."""
    d, f = o.d_model, o.d_ff
    q, k = o.num_heads * o.head_dim, o.num_kv_heads * o.head_dim
    matrices = 3 if o.mlp == "swiglu" else 2
    return (2 * batch * tokens * d * (2 * q + 2 * k) + 2 * batch * tokens * keys * q * 2
            + 2 * batch * tokens * d * f * matrices)


def _vocab(o):
    return getattr(o, "vocab_size", None) or o.vocab


def forward_flops(family, size, batch, seq):
    """FLOPs of a forward over (batch, seq) tokens, logits of every position."""
    o = _decoder(family, size)
    return (o.num_layers * _layer_flops(o, float(batch), float(seq), float(seq))
            + 2.0 * batch * seq * o.d_model * o.vocab_size)


def generate_flops(family, size, batch, prompt, new_tokens, depth=0):
    """FLOPs of greedy generation with a cache: the prompt in one pass over
    `depth` cached positions and itself, then one token a step over every
    cached key; logits of the last position."""
    o = _decoder(family, size)
    head = 2.0 * batch * o.d_model * o.vocab_size
    flops = (o.num_layers * _layer_flops(o, float(batch), float(prompt), float(depth + prompt))
             + head)
    for i in range(1, new_tokens):
        flops += o.num_layers * _layer_flops(o, float(batch), 1.0,
                                             float(depth + prompt + i)) + head
    return flops


def encoder_forward_flops(size, batch, seq):
    """EncoderForwardFlops: L(8 B T d^2 + 4 B T^2 d + 4 B T d d_ff)."""
    o = size_entry("Encoder", size).options
    b, t, d, f = float(batch), float(seq), o.d_model, o.d_ff
    return o.layers * (8 * b * t * d * d + 4 * b * t * t * d + 4 * b * t * d * f)


def encdec_forward_flops(size, batch, src, tgt):
    """EncDecForwardFlops: encoder layers over the source; decoder layers'
    self-attention, cross-attention (q and o over the target, k and v over
    the source, scores T x S) and FFN; the output projection."""
    o = size_entry("EncDec", size).options
    b, s, t, d, f = float(batch), float(src), float(tgt), o.d_model, o.d_ff
    encoder = 8 * b * s * d * d + 4 * b * s * s * d + 4 * b * s * d * f
    decoder = (8 * b * t * d * d + 4 * b * t * t * d + 4 * b * t * d * d + 4 * b * s * d * d
               + 4 * b * t * s * d + 4 * b * t * d * f)
    return o.encoder_layers * encoder + o.decoder_layers * decoder + 2 * b * t * d * o.vocab


def whisper_encode_flops(size, batch):
    """WhisperEncodeFlops: both convolutions, then per layer 24 T w^2 + 4 T^2 w."""
    o = size_entry("Whisper", size).options
    w, t = float(o.width), float(o.audio_ctx)
    convs = 2 * o.mels * w * 3 * o.frames + 2 * w * w * 3 * t
    return batch * (convs + o.encoder_layers * (24 * t * w * w + 4 * t * t * w))


def whisper_generate_flops(size, batch, prompt, new_tokens):
    """WhisperGenerateFlops: the cross-attention keys and values once, the
    prompt, then one token a step; logits of the last position of each."""
    o = size_entry("Whisper", size).options
    w, layers = float(o.width), o.decoder_layers

    def layer(q, k):  # self q, k, v, o; cross q, o; MLP; both attentions
        return 28 * q * w * w + 4 * q * k * w + 4 * q * o.audio_ctx * w

    logits = 2.0 * w * o.vocab
    flops = layers * 4.0 * o.audio_ctx * w * w + layers * layer(prompt, prompt) + logits
    for i in range(1, new_tokens):
        flops += layers * layer(1, prompt + i) + logits
    return batch * flops


def whisper_decode_weight_count(size):
    """WhisperDecodeWeightCount: the decoder's weights a decode step reads
    (not the position table, nor the cross-attention keys' and values'
    projections, used once an utterance)."""
    o = size_entry("Whisper", size).options
    w = o.width
    attention, mlp, norm = 4 * w * w + 3 * w, 8 * w * w + 5 * w, 2 * w
    decoder = (o.vocab * w + o.text_ctx * w
               + o.decoder_layers * (2 * attention + mlp + 3 * norm) + norm)
    return decoder - o.text_ctx * w - o.decoder_layers * (2 * w * w + w)


def decode_weight_elements(family, size):
    """Weights a forward or a decode step of a decoder reads (C++
    decoder_family.cc's ReadWeightBytes over the element size): all of them
    but a learned position table and an untied embedding, of which it reads
    rows (a tied embedding is the head, read whole); Whisper's decoder's, as
    whisper_decode_weight_count."""
    o = size_entry(family, size).options
    params = size_entry(family, size).card_params
    if family == "Whisper":
        return whisper_decode_weight_count(size)
    if family not in DECODERS:
        raise ValueError(f"'{family}' has no generate phase")
    return (params - (o.max_positions * o.d_model if o.positions == "learned" else 0)
            - (0 if o.tied else o.vocab_size * o.d_model))
