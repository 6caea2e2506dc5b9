"""Llama checkpoints as GGUF files for llama.cpp (tools/vs-llamacpp): the
tensors bench loads with --weights, converted as llama.cpp's
convert_hf_to_gguf.py converts a LlamaForCausalLM, in F32, BF16, Q8_0 or
Q4_0 (write_gguf); and seeded random fp32 checkpoints of any Llama size to
convert (random_checkpoint). What the conversion does, and when a file is
reused: docs/models.md ("Beside llama.cpp on the same machine")."""
import json
import math
import os
import struct

from ltb.base import BadInput, require

require("numpy", "torch", "gguf")
import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from ltb.pysuite import families, llama_fixtures  # noqa: E402
from ltb.pysuite.weights import BadWeights, Checkpoint  # noqa: E402

Q = gguf.GGMLQuantizationType
# A GGUF type: the type of its matrices and its general.file_type.
TYPES = {
    "F32": (Q.F32, gguf.LlamaFileType.ALL_F32),
    "BF16": (Q.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "Q8_0": (Q.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "Q4_0": (Q.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
}
SOURCE_KEY = "libtorch_bench.source"
# Changes when what a file holds for the same source changes, so that files
# of an older writer are rewritten rather than reused.
WRITER = "ltb.pysuite.llama_gguf 1"
MATRIX_STD = 0.02  # Hugging Face's initializer_range, as bench's own draws
PASSED_OVER = ("rotary_emb.inv_freq",)  # as bench's loader passes over them


def llama_options(size):
    if size not in families.sizes("Llama"):
        raise BadInput(f"unknown Llama size '{size}'; valid: {', '.join(families.sizes('Llama'))}")
    return families.options("Llama", size)


def check_type(name):
    if name not in TYPES:
        raise BadInput(f"unknown GGUF type '{name}'; valid: {', '.join(TYPES)}")
    return name


# ------------------------------------------------------- random checkpoints


def safetensors_metadata(path):
    """The __metadata__ of a safetensors file's header ({} when it has none
    or is no safetensors file)."""
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n)) if n < 100_000_000 else {}
    except (OSError, struct.error, ValueError):
        return {}
    return header.get("__metadata__", {}) if isinstance(header, dict) else {}


def random_source(size, seed):
    return (f"Llama/{size} random, seed {seed}: llama-fixtures' numpy draws "
            f"(matrices N(0, {MATRIX_STD}^2)); {WRITER}")


def random_checkpoint(size, path, seed=0):
    """Writes a random fp32 checkpoint of the Llama size to path (Hugging
    Face's names, as tools/llama-fixtures writes its shapes: each tensor its
    own seeded numpy stream, the matrices and embedding N(0, 0.02^2), the
    norms 1 + 0.1 N(0, 1)), or keeps the file already there from the same
    size and seed. Returns (path, whether it was written)."""
    source = random_source(size, seed)
    if safetensors_metadata(path).get(SOURCE_KEY) == source:
        return path, False
    shapes = llama_fixtures.checkpoint_shapes(llama_options(size))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    llama_fixtures.write_safetensors(
        path, {n: (s, np.float32) for n, s in shapes.items()},
        lambda n: llama_fixtures.draw_tensor(shapes, n, seed, MATRIX_STD),
        {"format": "pt", SOURCE_KEY: source})
    return path, True


def checkpoint_source(path):
    """A checkpoint's identity for reuse: its files' real paths, sizes and
    modification times."""
    parts = []
    for file in checkpoint_files(path):
        try:
            st = os.stat(file)
        except OSError as e:
            raise BadInput(f"{file}: no checkpoint there ({e.strerror})")
        parts.append(f"{os.path.realpath(file)} {st.st_size} {st.st_mtime_ns}")
    return "; ".join(parts)


def checkpoint_files(path):
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            try:
                with open(index) as f:
                    shards = sorted(set(json.load(f)["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return [index]
            return [index] + [os.path.join(path, s) for s in shards]
        return [os.path.join(path, "model.safetensors")]
    return [path]


# ------------------------------------------------------------ conversion


def permute(w, n_head, n_head_kv=None):
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's rows from
    Hugging Face's halves to llama.cpp's interleaved pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def rope_factors(o):
    """rope_freqs.weight: LlamaModel.generate_extra_tensors' factors of
    Llama 3's rope scaling, one a frequency pair."""
    freqs = 1.0 / (o.rope_theta ** (torch.arange(0, o.head_dim, 2, dtype=torch.float32)
                                    / o.head_dim))
    low_wavelen = o.original_context / o.low_freq_factor
    high_wavelen = o.original_context / o.high_freq_factor
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(o.rope_factor)
        else:
            smooth = (o.original_context / wavelen - o.low_freq_factor) / (
                o.high_freq_factor - o.low_freq_factor)
            factors.append(1 / ((1 - smooth) / o.rope_factor + smooth))
    return torch.tensor(factors, dtype=torch.float32).numpy()


def open_checkpoint(path, size):
    """The checkpoint, checked against the size as bench's loader checks it:
    every tensor there with its shape, none it has no use for."""
    o = llama_options(size)
    try:
        checkpoint = Checkpoint(path)
    except BadWeights as e:
        raise BadInput(str(e))
    shapes = llama_fixtures.checkpoint_shapes(o)
    for name, shape in shapes.items():
        if name not in checkpoint.entries:
            raise BadInput(f"{path} has no tensor '{name}', which Llama/{size} needs with "
                           f"shape {list(shape)}")
        if list(checkpoint.shape(name)) != list(shape):
            raise BadInput(f"{path}: tensor '{name}' has shape {checkpoint.shape(name)}, but "
                           f"Llama/{size} needs {list(shape)}")
    for name in checkpoint.entries:
        tied_head = name == "lm_head.weight" and o.tied
        if name not in shapes and not tied_head and not name.endswith(PASSED_OVER):
            raise BadInput(f"{path}: tensor '{name}' is no parameter of Llama/{size}")
    return checkpoint, shapes


def plan(o, shapes, qtype):
    """(GGUF name, Hugging Face name or None for rope_freqs, GGML type, numpy
    shape) of every tensor, in the order convert_hf_to_gguf.py writes them."""
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, o.num_layers)
    out = [(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", None, Q.F32,
            (o.head_dim // 2,))]
    for hf, shape in shapes.items():
        name = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise BadInput(f"gguf has no llama.cpp name for tensor '{hf}'")
        out.append((name, hf, qtype if len(shape) > 1 else Q.F32, tuple(shape)))
    return out


def tensor_data(checkpoint, o, hf, qtype):
    """One tensor of the file: fp32 from the checkpoint, permuted where
    llama.cpp's RoPE needs it, in its GGML type."""
    if hf is None:
        return rope_factors(o)
    data = checkpoint.load(hf, torch.float32).numpy()
    if hf.endswith("q_proj.weight"):
        data = permute(data, o.num_heads, o.num_heads)
    elif hf.endswith("k_proj.weight"):
        data = permute(data, o.num_heads, o.num_kv_heads)
    return gguf.quants.quantize(np.ascontiguousarray(data), qtype)


def file_source(source, type_name):
    """What a file of the type written from `source` records."""
    return f"{source} as {type_name}; {WRITER}"


def gguf_source(path):
    """What a GGUF file records as its source (None where it is unreadable)."""
    try:
        field = gguf.GGUFReader(path).get_field(SOURCE_KEY)
    except (OSError, ValueError, KeyError, IndexError, struct.error):
        return None
    return None if field is None else field.contents()


def write_gguf(checkpoint_path, size, type_name, path, source=None, checkpoint=None):
    """Writes the checkpoint as a GGUF file of the type (F32, BF16, Q8_0,
    Q4_0), or keeps the file there when it records the same source (by
    default the checkpoint's files as checkpoint_source names them).
    `checkpoint` is the opened one (open_checkpoint), when the caller has it.
    Returns (path, whether it was written)."""
    qtype, file_type = TYPES[check_type(type_name)]
    o = llama_options(size)
    source = file_source(source or checkpoint_source(checkpoint_path), type_name)
    if os.path.exists(path) and gguf_source(path) == source:
        return path, False
    if checkpoint is None:
        checkpoint, shapes = open_checkpoint(checkpoint_path, size)
    else:
        shapes = llama_fixtures.checkpoint_shapes(o)
    tensors = plan(o, shapes, qtype)

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    writer = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(f"Llama {size}")
    writer.add_vocab_size(o.vocab_size)
    writer.add_context_length(llama_fixtures.MAX_POSITIONS)
    writer.add_embedding_length(o.d_model)
    writer.add_block_count(o.num_layers)
    writer.add_feed_forward_length(o.d_ff)
    writer.add_head_count(o.num_heads)
    writer.add_head_count_kv(o.num_kv_heads)
    writer.add_key_length(o.head_dim)
    writer.add_value_length(o.head_dim)
    writer.add_rope_dimension_count(o.head_dim)
    writer.add_rope_freq_base(o.rope_theta)
    writer.add_layer_norm_rms_eps(o.eps)
    writer.add_file_type(file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_tokenizer_model("no_vocab")
    writer.add_string(SOURCE_KEY, source)
    for name, _, tensor_type, shape in tensors:
        byte_shape = gguf.quants.quant_shape_to_byte_shape(shape, tensor_type)
        writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8),
                               int(np.prod(byte_shape, dtype=np.int64)), raw_dtype=tensor_type)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, hf, tensor_type, _ in tensors:
            writer.write_tensor_data(tensor_data(checkpoint, o, hf, tensor_type))
        writer.close()
    except BaseException:
        writer.close()
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, path)
    return path, True
