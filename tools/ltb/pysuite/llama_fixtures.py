"""Llama checkpoints written by Hugging Face transformers, and what
transformers' LlamaForCausalLM computes with them: the fixtures that prove
the Llama family, in C++ and in Python, equal to it.

    tools/llama-fixtures weights SHAPE DIR [--seed N] [--only NAME,...]
    tools/llama-fixtures checkpoint SHAPE DIR [--seed N]
    tools/llama-fixtures expected SHAPE DIR [--seed N] [--weights DIR]
    tools/llama-fixtures all [DIR] [--seed N]

SHAPE: nano (Llama nano) or 1B-2L (Llama 3.2 1B's shape with 2 layers).
weights needs no transformers; the others do, and it is not one of the
project's requirements: install it beside the venv (pip install --target
DIR transformers==5.24.0, then PYTHONPATH=DIR tools/llama-fixtures ...).

Exit 0 on success, 1 when a check fails (the files are written all the
same), 2 on bad input or when transformers is needed and missing. The
shapes, the seeded draws and the files: docs/models.md ("The fixtures")."""
import argparse
import hashlib
import json
import os
import struct
import tempfile

from ltb.base import REPO, BadInput, read_bytes, require, run

require("numpy", "torch")
import numpy as np  # noqa: E402
import torch  # noqa: E402

from ltb.pysuite import families  # noqa: E402


FIXTURES = os.path.join(REPO, "test", "models", "fixtures")
# SHAPE: (the families size it is, its overrides, new tokens generated,
# the projection matrices' standard deviation).
SHAPES = {
    "nano": ("nano", {}, 16, 0.125),
    "1B-2L": ("1B", {"num_layers": 2}, 8, 0.02),
}
EMBEDDING_STD = 0.02
PROMPT_LEN = 8
MAX_POSITIONS = 131072  # Llama 3.1/3.2's max_position_embeddings
SEED = 0
REL_TOL = 1e-5  # max |mirror - transformers| / max |transformers|


def shape_options(shape):
    if shape not in SHAPES:
        raise BadInput(f"unknown shape '{shape}'; valid: {', '.join(SHAPES)}")
    size, overrides, _, _ = SHAPES[shape]
    return families.options("Llama", size, **overrides)


def hf_config(shape):
    """config.json's fields for the shape: LlamaConfig's arguments (plus
    architectures, model_type and dtype), from the C++ model's options."""
    o = shape_options(shape)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": o.vocab_size,
        "hidden_size": o.d_model,
        "intermediate_size": o.d_ff,
        "num_hidden_layers": o.num_layers,
        "num_attention_heads": o.num_heads,
        "num_key_value_heads": o.num_kv_heads,
        "head_dim": o.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": o.eps,
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": o.rope_theta,
            "factor": o.rope_factor,
            "low_freq_factor": o.low_freq_factor,
            "high_freq_factor": o.high_freq_factor,
            "original_max_position_embeddings": o.original_context,
        },
        "tie_word_embeddings": o.tied,
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
        "dtype": "float32",
    }


# ------------------------------------------------------------- the weights


def tensor_shapes(shape):
    """{name: shape} of the checkpoint, in drawing order (Hugging Face's
    names; no lm_head.weight, the head being tied)."""
    return checkpoint_shapes(shape_options(shape))


def checkpoint_shapes(o):
    """{name: shape} of a checkpoint of the Llama options o (LlamaOptions),
    in drawing order; lm_head.weight only where the head is not tied."""
    d, f, q, k = o.d_model, o.d_ff, o.num_heads * o.head_dim, o.num_kv_heads * o.head_dim
    shapes = {"model.embed_tokens.weight": (o.vocab_size, d)}
    for i in range(o.num_layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (q, d),
            p + "self_attn.k_proj.weight": (k, d),
            p + "self_attn.v_proj.weight": (k, d),
            p + "self_attn.o_proj.weight": (d, q),
            p + "mlp.gate_proj.weight": (f, d),
            p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f),
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
        })
    shapes["model.norm.weight"] = (d,)
    if not o.tied:
        shapes["lm_head.weight"] = (o.vocab_size, d)
    return shapes


def tensor_names(shape):
    return list(tensor_shapes(shape))


def stream(seed, k):
    """Child k of np.random.default_rng(seed): default_rng(seed).spawn(n)[k]."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(k,)))


def draw(shape, name, seed=SEED):
    """The fp32 values of tensor `name`."""
    names = tensor_names(shape)
    if name not in names:
        raise BadInput(f"{shape} has no tensor '{name}'; it has: {', '.join(names)}")
    return draw_tensor(tensor_shapes(shape), name, seed, SHAPES[shape][3])


def draw_tensor(shapes, name, seed, matrix_std):
    """The fp32 values of tensor `name` of a checkpoint of these shapes
    ({name: shape} in drawing order), drawn as `draw` draws a shape's, the
    projection matrices with matrix_std."""
    z = stream(seed, 1 + list(shapes).index(name)).standard_normal(shapes[name],
                                                                   dtype=np.float32)
    # Scaled in place (the same fp32 products and sums): an embedding of
    # the 1B's is a gigabyte.
    if name.endswith("layernorm.weight") or name == "model.norm.weight":
        z *= np.float32(0.1)
        z += np.float32(1)
    else:
        z *= np.float32(EMBEDDING_STD if name == "model.embed_tokens.weight" else matrix_std)
    return z


def prompt(shape, seed=SEED):
    """(1, PROMPT_LEN) int64 token ids below the vocabulary."""
    vocab = shape_options(shape).vocab_size
    return stream(seed, 0).integers(0, vocab, size=(1, PROMPT_LEN), dtype=np.int64)


def sha256(array):
    """Of the array's little-endian bytes, as the checkpoint holds them."""
    return hashlib.sha256(
        np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()).hexdigest()


# ------------------------------------------------------------ safetensors
# The format (8-byte little-endian header length, a JSON header of
# {name: {dtype, shape, data_offsets}} and "__metadata__", the data), read
# and written with numpy alone: the tests and `weights` need no transformers
# and no safetensors package.

_DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I64": np.dtype("<i8"),
           "I32": np.dtype("<i4"), "F16": np.dtype("<f2")}
_NAMES = {v: k for k, v in _DTYPES.items()}


def write_safetensors(path, shapes, produce, metadata=None):
    """Writes `shapes` ({name: (shape, numpy dtype)}) to path, asking
    produce(name) for each array in turn (so that a large checkpoint is never
    held whole); tensors in name order, the header padded with spaces to 8
    bytes as the safetensors package does."""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(shapes):
        dims, dtype = shapes[name]
        size = int(np.prod(dims, dtype=np.int64)) * np.dtype(dtype).itemsize
        header[name] = {"dtype": _NAMES[np.dtype(dtype).newbyteorder("<")],
                        "shape": list(dims), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in sorted(shapes):
            dims, dtype = shapes[name]
            array = np.ascontiguousarray(produce(name), dtype=np.dtype(dtype).newbyteorder("<"))
            if array.shape != tuple(dims):
                raise ValueError(f"{name}: shape {array.shape}, header {tuple(dims)}")
            f.write(memoryview(array).cast("B"))  # no copy of the bytes
    os.replace(tmp, path)


def read_safetensors(path):
    """({name: numpy array}, metadata) of a safetensors file."""
    data = read_bytes(path)
    try:
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        start = 8 + n
        tensors = {}
        for name, e in header.items():
            if name == "__metadata__":
                continue
            begin, end = e["data_offsets"]
            tensors[name] = np.frombuffer(data[start + begin:start + end],
                                          dtype=_DTYPES[e["dtype"]]).reshape(e["shape"])
    except (struct.error, ValueError, KeyError, TypeError) as e:
        raise BadInput(f"{path}: not a safetensors file this reader knows: {e}")
    return tensors, header.get("__metadata__", {})


def write_weights(shape, out_dir, seed=SEED, only=None):
    """`weights`: DIR/model.safetensors and DIR/config.json, no transformers."""
    shapes = tensor_shapes(shape)
    names = list(shapes)
    if only:
        unknown = [n for n in only if n not in shapes]
        if unknown:
            raise BadInput(f"{shape} has no tensor {', '.join(unknown)}; "
                           f"it has: {', '.join(names)}")
        names = [n for n in names if n in only]
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"),
                      {n: (shapes[n], np.float32) for n in names},
                      lambda n: draw(shape, n, seed), {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(shape), f, indent=2)
        f.write("\n")
    return os.path.join(out_dir, "model.safetensors")


# ------------------------------------------------------------ transformers


def transformers_module():
    try:
        import transformers
    except ImportError:
        raise BadInput("needs transformers, which the project does not require: install it "
                       "beside the venv (pip install --target DIR transformers==5.24.0) and "
                       "run with PYTHONPATH=DIR")
    transformers.utils.logging.disable_progress_bar()
    return transformers


def llama_config(shape):
    transformers = transformers_module()
    fields = {k: v for k, v in hf_config(shape).items()
              if k not in ("architectures", "model_type", "dtype")}
    return transformers.LlamaConfig(**fields)


def hf_model(shape, seed=SEED):
    """A LlamaForCausalLM built from its LlamaConfig (fp32, eager attention),
    with the drawn weights set in by name, strictly."""
    transformers = transformers_module()
    config = llama_config(shape)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)  # the init the weights then replace
    model = transformers.LlamaForCausalLM(config).float().eval()
    state = {n: torch.from_numpy(draw(shape, n, seed)) for n in tensor_names(shape)}
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) != tied or unexpected:
        raise RuntimeError(f"LlamaForCausalLM's names differ: missing {missing}, "
                           f"unexpected {unexpected}")
    if config.tie_word_embeddings and (model.lm_head.weight.data_ptr()
                                       != model.model.embed_tokens.weight.data_ptr()):
        raise RuntimeError("LlamaForCausalLM's head is not tied to embed_tokens")
    return model


def write_checkpoint(shape, out_dir, seed=SEED):
    """`checkpoint`: transformers' save_pretrained of the weights."""
    model = hf_model(shape, seed)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tensors, _ = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    if sorted(tensors) != sorted(tensor_names(shape)):
        raise RuntimeError(f"save_pretrained wrote {sorted(tensors)}, "
                           f"expected {sorted(tensor_names(shape))}")
    return os.path.join(out_dir, "model.safetensors")


def relative_error(got, want):
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()


def greedy_by_recompute(forward, tokens, n):
    """n greedy tokens after `tokens`, recomputing the whole sequence each
    step; and the smallest gap between the best and second-best logit."""
    margin = float("inf")
    for _ in range(n):
        logits = forward(tokens)[:, -1]  # (1, V)
        top = logits.double().topk(2, -1).values
        margin = min(margin, (top[0, 0] - top[0, 1]).item())
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], 1)
    return tokens[:, -n:], margin


def mirror_model(shape, weights):
    """ltb/pysuite/families.py's Llama with `weights` ({name: tensor}), loaded
    strictly: the checkpoint's names, plus its computed inverse frequencies."""
    size, overrides, _, _ = SHAPES[shape]
    model = families.build("Llama", size, **overrides).eval()
    state = {n: weights[n] for n in tensor_names(shape)}
    state["model.rotary_emb.inv_freq"] = model.model.rotary_emb.inv_freq
    model.load_state_dict(state, strict=True)
    return model


def write_expected(shape, out_dir, seed=SEED, weights_dir=None):
    """`expected`: returns (path written, whether every check passed)."""
    transformers = transformers_module()
    ok = True

    def check(passed, line):
        nonlocal ok
        ok = ok and passed
        print(f"{shape}: {line}" + ("" if passed else "  FAILED"))

    _, _, new_tokens, matrix_std = SHAPES[shape]
    names = tensor_names(shape)
    with tempfile.TemporaryDirectory() as tmp:
        if weights_dir is None:
            weights_dir = tmp
            write_weights(shape, weights_dir, seed)
        elif not os.path.exists(os.path.join(weights_dir, "model.safetensors")):
            raise BadInput(f"{weights_dir}: no model.safetensors (write it with "
                           f"`tools/llama-fixtures weights {shape} {weights_dir}`)")
        model, info = transformers.LlamaForCausalLM.from_pretrained(
            weights_dir, dtype=torch.float32, attn_implementation="eager",
            output_loading_info=True)
    model.eval()
    check(model.config._attn_implementation == "eager", "eager attention")
    problems = {k: v for k, v in info.items() if v}
    check(not problems, "the checkpoint `weights` writes loads into LlamaForCausalLM "
          f"with no missing, unexpected or mismatched names {problems or ''}")
    config = llama_config(shape)
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
                "tie_word_embeddings", "max_position_embeddings", "rope_parameters"):
        if getattr(model.config, key) != getattr(config, key):
            check(False, f"config.json's {key} reads as {getattr(model.config, key)}, "
                  f"LlamaConfig's is {getattr(config, key)}")
    state = model.state_dict()
    digests = {}
    exact = True
    for name in names:
        want = draw(shape, name, seed)
        digests[name] = sha256(want)
        exact = exact and np.array_equal(state[name].numpy(), want)
    check(exact, f"its {len(names)} tensors are the drawn ones, bit for bit")
    if config.tie_word_embeddings:
        check(model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(),
              "lm_head is tied to embed_tokens")

    ids = torch.from_numpy(prompt(shape, seed))
    with torch.inference_mode():
        logits = model(ids, use_cache=False).logits.float()  # (1, T, V)
        generation = transformers.GenerationConfig(
            do_sample=False, num_beams=1, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
            use_cache=True, eos_token_id=None, bos_token_id=None, pad_token_id=None,
            temperature=None, top_p=None, top_k=None)
        out = model.generate(ids, attention_mask=torch.ones_like(ids),
                             generation_config=generation)
        tokens = out[:, PROMPT_LEN:]
        check(tuple(out.shape) == (1, PROMPT_LEN + new_tokens)
              and torch.equal(out[:, :PROMPT_LEN], ids),
              f"generate made {tokens.shape[1]} tokens after the prompt")
        recomputed, margin = greedy_by_recompute(
            lambda t: model(t, use_cache=False).logits, ids, new_tokens)
        check(torch.equal(recomputed, tokens),
              "generate (with the cache) is greedy decoding by recomputing the sequence; "
              f"smallest top-2 logit gap {margin:.3g}")

        mirror = mirror_model(shape, state)
        err = relative_error(mirror(ids), logits)
        check(err <= REL_TOL, f"ltb/pysuite/families.py vs transformers: logits relative error "
              f"{err:.3g} (max abs diff / max abs value; at most {REL_TOL:g})")
        mirrored, _ = greedy_by_recompute(mirror, ids, new_tokens)
        check(torch.equal(mirrored, tokens), "ltb/pysuite/families.py's greedy tokens are "
              "transformers'")

    expected = {"prompt": ids.numpy(), "tokens": tokens.numpy()}
    if shape == "nano":
        expected["logits"] = logits.numpy()
    else:  # the last position only: 0.5 MB rather than 4 MB
        expected["logits_last"] = logits[:, -1].numpy()
    o = shape_options(shape)
    metadata = {
        "shape": shape,
        "seed": seed,
        "generator": "numpy PCG64: child k of default_rng(seed), "
                     "SeedSequence(seed, spawn_key=(k,)); k=0 the prompt, "
                     "k=1+i the i-th tensor of weights_sha256's order",
        "config": json.dumps(hf_config(shape), sort_keys=True),
        "vocab_size": o.vocab_size,
        "prompt_len": PROMPT_LEN,
        "new_tokens": new_tokens,
        "dtype": "float32",
        "attn_implementation": "eager",
        "embedding_std": f"{EMBEDDING_STD:g}",
        "matrix_std": f"{matrix_std:g}",
        "norm_weights": "1 + 0.1 * standard normal",
        "min_top2_margin": f"{margin:.6g}",
        "mirror_rel_err": f"{err:.3g}",
        "weights_sha256": json.dumps(digests),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
    }
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"llama-{shape}.expected.safetensors")
    write_safetensors(path, {k: (v.shape, v.dtype) for k, v in expected.items()},
                      expected.__getitem__, metadata)
    try:  # the safetensors package (a dependency of transformers) reads it back
        from safetensors.numpy import load_file
        back = load_file(path)
        check(all(np.array_equal(back[k], v) for k, v in expected.items())
              and sorted(back) == sorted(expected),
              f"the safetensors package reads {os.path.basename(path)} back")
    except ImportError:
        pass
    return path, ok


# -------------------------------------------------------------------- main


def llama_fixtures_main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--seed", type=int, default=SEED,
                        help=f"the weights' and prompt's seed (default {SEED})")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("weights", parents=[common],
                       help="the checkpoint, without transformers")
    p.add_argument("shape", metavar="SHAPE", help=", ".join(SHAPES))
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--only", metavar="NAME,...",
                   help="write only these tensors (comma-separated Hugging Face names)")
    p = sub.add_parser("checkpoint", parents=[common],
                       help="the checkpoint, by transformers' save_pretrained")
    p.add_argument("shape", metavar="SHAPE", help=", ".join(SHAPES))
    p.add_argument("dir", metavar="DIR")
    p = sub.add_parser("expected", parents=[common],
                       help="transformers' logits and greedy tokens")
    p.add_argument("shape", metavar="SHAPE", help=", ".join(SHAPES))
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--weights", metavar="DIR",
                   help="the folder `weights SHAPE DIR` wrote (else written to a temporary one)")
    p = sub.add_parser("all", parents=[common],
                       help=f"regenerate every fixture in DIR (default "
                            f"{os.path.relpath(FIXTURES, REPO)})")
    p.add_argument("dir", metavar="DIR", nargs="?", default=FIXTURES)
    args = parser.parse_args(argv)
    if args.seed < 0:
        raise BadInput(f"--seed must be a non-negative integer, got {args.seed}")
    if args.command != "all":
        shape_options(args.shape)
    if os.path.exists(args.dir) and not os.path.isdir(args.dir):
        raise BadInput(f"{args.dir} is not a directory")

    if args.command == "weights":
        only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
        print(write_weights(args.shape, args.dir, args.seed, only))
        return 0
    if args.command == "checkpoint":
        print(write_checkpoint(args.shape, args.dir, args.seed))
        return 0
    if args.command == "expected":
        path, ok = write_expected(args.shape, args.dir, args.seed, args.weights)
        print(path)
        return 0 if ok else 1
    transformers_module()
    print(write_checkpoint("nano", os.path.join(args.dir, "llama-nano"), args.seed))
    ok = True
    for shape in SHAPES:
        path, passed = write_expected(shape, args.dir, args.seed)
        print(path)
        ok = ok and passed
    return 0 if ok else 1



def main():
    run(llama_fixtures_main)
