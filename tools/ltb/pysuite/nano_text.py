"""Llama/nano and GPT2/nano trained on real text that every machine running
the suite has: the Python standard library's own sources, read as bytes
(token ids 0 to 255, inside the nano vocabulary of 1000). The models are the
Python twins of the C++ ones (models/decoder_family.py), written as
safetensors under bench's parameter names, so that `bench --weights` loads
them like any checkpoint; a held-out slice of other modules is written as
the token file `bench --eval_tokens` scores (one sequence a line).

The text is a fixed, ordered list of modules of the running Python, so that
it is the same for the same Python version; the checkpoints' metadata
records the version, the files and the recipe, and a cached set is reused
only when they match (tools/train-nano; docs/measurement.md, "Perplexity on
a held-out text").
"""
import json
import os
import platform
import sysconfig
import time

import numpy as np
import torch

from ltb.base import BadInput
from ltb.pysuite import families, weights
from ltb.pysuite.llama_fixtures import write_safetensors

# The training text: pure-Python modules present from Python 3.8 to 3.13,
# in this order. A module a Python lacks is left out (the metadata lists
# the files read).
TRAIN_MODULES = (
    "argparse.py", "ast.py", "calendar.py", "configparser.py", "difflib.py", "enum.py",
    "fractions.py", "functools.py", "gettext.py", "heapq.py", "inspect.py",
    "logging/__init__.py", "shutil.py", "statistics.py", "string.py", "subprocess.py",
    "textwrap.py", "threading.py", "tokenize.py", "typing.py")
# The held-out text: other modules, never trained on.
HELDOUT_MODULES = ("pprint.py", "queue.py", "random.py", "sched.py")

FAMILIES = ("Llama", "GPT2")
LENGTH = 128  # tokens a training sequence and a held-out sequence
HELDOUT_SEQUENCES = 128
SEED = 0
STEPS = 400
BATCH = 32
LEARNING_RATE = 3e-3
# Bumped whenever the recipe changes what is trained: a cached set made
# under another is made again.
RECIPE_VERSION = 1
TOKENS_FILE = "stdlib-heldout.tokens"


def cache_dir():
    """Where the trained models live: the suite's cache folder."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "libtorch-bench", "nano-text")


def checkpoint_name(family):
    return f"{family.lower()}-nano-stdlib.safetensors"


def stdlib_dir():
    return sysconfig.get_paths()["stdlib"]


def read_modules(modules, root=None):
    """(bytes, the files read): the modules' sources concatenated in the
    given order, each ended by a newline."""
    root = root or stdlib_dir()
    parts, files = [], []
    for name in modules:
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            parts.append(f.read().rstrip(b"\n") + b"\n")
        files.append(name)
    if not files:
        raise BadInput(f"{root}: none of the standard library modules "
                       f"{', '.join(modules)} is there to read")
    return b"".join(parts), files


def heldout_sequences(text, sequences=HELDOUT_SEQUENCES, length=LENGTH):
    """`sequences` windows of `length` bytes spread evenly over the held-out
    text, from its start to its end: a (sequences, length) int64 tensor."""
    data = np.frombuffer(text, dtype=np.uint8)
    if len(data) < length:
        raise BadInput(f"the held-out text has {len(data)} bytes, fewer than one sequence "
                       f"of {length}")
    last = len(data) - length
    starts = [i * last // max(1, sequences - 1) for i in range(sequences)]
    return torch.from_numpy(np.stack([data[s:s + length] for s in starts]).astype(np.int64))


def write_tokens(path, tokens, comments):
    """The --eval_tokens file: '#' lines saying what it is, then one
    sequence of ids a line."""
    lines = [f"# {c}" for c in comments]
    lines += [" ".join(str(int(t)) for t in row) for row in tokens.tolist()]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def read_tokens(path):
    """A (sequences, T) int64 tensor of an --eval_tokens file."""
    with open(path) as f:
        rows = [[int(t) for t in line.split()] for line in f
                if line.strip() and not line.lstrip().startswith("#")]
    return torch.tensor(rows, dtype=torch.int64)


def build(family):
    return families.build(family, "nano")


def cross_entropy(model, tokens):
    """The mean cross-entropy (nats) of each position's next token."""
    logits = model(tokens[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                             tokens[:, 1:].reshape(-1))


def train(family, text, steps=STEPS, seed=SEED, batch=BATCH, length=LENGTH,
          lr=LEARNING_RATE, log=None):
    """The family's nano trained on random windows of `text` (drawn by a
    generator of `seed`) with AdamW and a one-cycle learning rate: the model
    in eval mode and its last step's loss."""
    torch.manual_seed(seed)
    model = build(family)
    data = torch.from_numpy(np.frombuffer(text, dtype=np.uint8).astype(np.int64))
    draw = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps,
                                                   pct_start=0.05)
    model.train()
    loss = torch.tensor(float("nan"))
    start = time.monotonic()
    for step in range(steps):
        at = torch.randint(0, len(data) - length - 1, (batch,), generator=draw)
        windows = torch.stack([data[i:i + length + 1] for i in at.tolist()])
        loss = cross_entropy(model, windows)
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        if log and (step + 1) % 100 == 0:
            log(f"{family}/nano: step {step + 1}/{steps}, loss {loss.item():.3f}, "
                f"{time.monotonic() - start:.0f} s")
    return model.eval(), float(loss.detach())


def checkpoint_tensors(family, model):
    """{name: fp32 numpy array} of the model's parameters as bench's --weights
    reads them: a tied head left out, GPT-2's Conv1D weights stored (in,
    out) as Hugging Face stores them."""
    transposed = weights.family_names(family).get("transposed") or (lambda name: False)
    out = {}
    for name, p in model.named_parameters():
        value = p.detach().float()
        out[name] = (value.t() if transposed(name) else value).contiguous().numpy()
    return out


def recipe(steps=STEPS, seed=SEED):
    """What decides the trained weights, besides torch's arithmetic."""
    return {"version": RECIPE_VERSION, "python": platform.python_version(),
            "train_modules": list(TRAIN_MODULES), "heldout_modules": list(HELDOUT_MODULES),
            "tokenizer": "bytes", "length": LENGTH, "heldout_sequences": HELDOUT_SEQUENCES,
            "seed": seed, "steps": steps, "batch": BATCH, "learning_rate": LEARNING_RATE}


def paths(out_dir):
    return {"Llama": os.path.join(out_dir, checkpoint_name("Llama")),
            "GPT2": os.path.join(out_dir, checkpoint_name("GPT2")),
            "tokens": os.path.join(out_dir, TOKENS_FILE)}


def cached_recipe(path):
    """The recipe a checkpoint of this module was written with; None when
    the file is missing or not one of them."""
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        return json.loads(header["__metadata__"]["recipe"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ensure(out_dir=None, steps=STEPS, seed=SEED, force=False, log=None):
    """The two checkpoints and the held-out tokens in out_dir (default: the
    cache), trained now when missing, made under another recipe (another
    Python's text) or forced: {"Llama": path, "GPT2": path, "tokens": path,
    "trained": [families trained now]}."""
    out_dir = out_dir or cache_dir()
    os.makedirs(out_dir, exist_ok=True)
    where = paths(out_dir)
    want = recipe(steps, seed)
    train_text, train_files = read_modules(TRAIN_MODULES)
    heldout_text, heldout_files = read_modules(HELDOUT_MODULES)
    tokens = heldout_sequences(heldout_text)
    source = (f"Python {platform.python_version()} standard library "
              f"({stdlib_dir()}), bytes as token ids")
    write_tokens(where["tokens"], tokens, [
        f"{tokens.shape[0]} sequences of {tokens.shape[1]} token ids, held out: windows "
        f"spread evenly over {', '.join(heldout_files)}",
        source, "written by tools/train-nano (ltb/pysuite/nano_text.py)"])
    trained = []
    for family in FAMILIES:
        path = where[family]
        if not force and cached_recipe(path) == want:
            continue
        if log:
            log(f"{family}/nano: training on {len(train_text)} bytes of {len(train_files)} "
                f"modules, {steps} steps of {BATCH} x {LENGTH} tokens")
        model, loss = train(family, train_text, steps=steps, seed=seed, log=log)
        with torch.no_grad():
            heldout = cross_entropy(model, tokens).item()
        tensors = checkpoint_tensors(family, model)
        metadata = {
            "format": "pt", "recipe": json.dumps(want, sort_keys=True),
            "model": f"{family}/nano", "text": source,
            "train_files": ",".join(train_files), "train_bytes": len(train_text),
            "heldout_files": ",".join(heldout_files), "train_loss": f"{loss:.4f}",
            "heldout_ppl_fp32": f"{np.exp(heldout):.4f}", "torch": torch.__version__}
        write_safetensors(path, {k: (v.shape, np.float32) for k, v in tensors.items()},
                          tensors.__getitem__, metadata)
        if log:
            log(f"{family}/nano: held-out perplexity {np.exp(heldout):.2f} (fp32, "
                f"Python), written to {path}")
        trained.append(family)
    where["trained"] = trained
    return where


def load(family, path):
    """A checkpoint of ensure() in the family's twin, as bench loads it."""
    model = build(family)
    weights.load_family_weights(model, family, "nano", path, torch.float32,
                                tied=model.options.tied)
    return model.eval()
