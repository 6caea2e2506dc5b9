"""Hugging Face safetensors checkpoints loaded by name into the Python
mirrors (ltb/pysuite/models/), as bench's --weights loads them into the C++
modules: lib/models/safetensors.cc (Checkpoint::Open, the header's checks),
lib/models/weights.cc (LoadWeights), the families' names (the rows of
lib/models/decoder_family.cc), lib/family/spec.cc WeightsName and
lib/base/digest.cc CheckpointSha256, with the same one-sentence errors.

Reads with the standard library and torch alone (the header with json).
"""
import hashlib
import json
import os
from types import SimpleNamespace

import torch

from ltb.pysuite.models.decoder_family import ROWS

MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own limit
DTYPES = {"F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2),
          "BF16": (torch.bfloat16, 2), "I64": (torch.int64, 8), "I32": (torch.int32, 4),
          "I16": (torch.int16, 2), "I8": (torch.int8, 1), "U8": (torch.uint8, 1),
          "BOOL": (torch.bool, 1)}
MAX_ELEMENTS = 1 << 50
LOADERS = tuple(ROWS)  # the families that load --weights: the decoders


class BadWeights(Exception):
    """A checkpoint bench would refuse: one sentence, bench's."""


def _shape_text(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _unsigned(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def parse_header(path, data):
    """{name: (dtype name, shape, begin, end)} of a safetensors file's bytes,
    offsets into the whole file (ParseSafetensorsHeader)."""
    def bad(why):
        return BadWeights(f"{path} is not a valid safetensors file: {why}")
    size = len(data)
    if size < 8:
        raise bad(f"it has {size} bytes, fewer than the 8 of its header length")
    n = int.from_bytes(data[:8], "little")
    if n > MAX_HEADER_BYTES:
        raise bad(f"its header length says {n} bytes, over the format's limit of "
                  f"{MAX_HEADER_BYTES}")
    if 8 + n > size:
        raise bad(f"its header length says {n} bytes, but the file has only {size - 8} "
                  "after it (truncated?)")
    try:
        header = json.loads(bytes(data[8:8 + n]))
    except ValueError as e:
        raise bad(f"its header is not JSON ({e})")
    if not isinstance(header, dict):
        raise bad("its header is not a JSON object")
    data_size = size - 8 - n
    out, ranges = {}, []
    for name, value in header.items():
        if name == "__metadata__":
            continue

        def tensor_bad(why):
            return bad(f"tensor '{name}' {why}")
        if not isinstance(value, dict) or not {"dtype", "shape", "data_offsets"} <= set(value):
            raise tensor_bad("lacks dtype, shape or data_offsets")
        dtype = value["dtype"]
        if not isinstance(dtype, str):
            raise tensor_bad("has a dtype that is not a string")
        if dtype not in DTYPES:
            raise tensor_bad(f"has dtype {dtype}; readable: {', '.join(sorted(DTYPES))}")
        if not isinstance(value["shape"], list):
            raise tensor_bad("has a shape that is not a list")
        numel = 1
        for d in value["shape"]:
            if not _unsigned(d):
                raise tensor_bad("has a shape that is not sizes")
            if d > MAX_ELEMENTS or (d != 0 and numel > MAX_ELEMENTS // d):
                raise tensor_bad("is too large")
            numel *= d
        off = value["data_offsets"]
        if not isinstance(off, list) or len(off) != 2 or not all(_unsigned(x) for x in off):
            raise tensor_bad("has data_offsets that are not [begin, end]")
        begin, end = off
        if begin > end or end > data_size:
            raise tensor_bad(f"lies at [{begin}, {end}), outside the {data_size} bytes of "
                             "data")
        if end - begin != numel * DTYPES[dtype][1]:
            raise tensor_bad(f"holds {end - begin} bytes, but its shape and {dtype} need "
                             f"{numel * DTYPES[dtype][1]}")
        ranges.append((begin, end))
        out[name] = (dtype, list(value["shape"]), 8 + n + begin, 8 + n + end)
    at = 0
    for begin, end in sorted(ranges):
        if begin < at:
            raise bad(f"two tensors overlap at byte {begin} of the data")
        if begin > at:
            raise bad(f"bytes {at} to {begin} of the data are no tensor's")
        at = end
    if at != data_size:
        raise bad(f"bytes {at} to {data_size} of the data are no tensor's")
    return out


class Checkpoint:
    """A file, a folder (model.safetensors.index.json, else model.safetensors)
    or an index and its shards (Checkpoint::Open)."""

    def __init__(self, path):
        index, files = None, []
        if os.path.isdir(path):
            if os.path.exists(os.path.join(path, "model.safetensors.index.json")):
                index = os.path.join(path, "model.safetensors.index.json")
            elif os.path.exists(os.path.join(path, "model.safetensors")):
                files.append(os.path.join(path, "model.safetensors"))
            else:
                raise BadWeights(f"{path} holds neither model.safetensors nor "
                                 "model.safetensors.index.json")
        elif path.endswith(".index.json"):
            index = path
        elif os.path.exists(path):
            files.append(path)
        else:
            raise BadWeights(f"{path}: no such checkpoint file or folder")
        shard_of = {}
        if index is not None:
            try:
                with open(index) as f:
                    doc = json.load(f)
            except (OSError, ValueError) as e:
                raise BadWeights(f"{index} is not JSON: {e}")
            if not isinstance(doc, dict) or not isinstance(doc.get("weight_map"), dict):
                raise BadWeights(f"{index} has no weight_map of tensor names to shard files")
            for name, shard in doc["weight_map"].items():
                if not isinstance(shard, str):
                    raise BadWeights(f"{index}: the weight_map entry of '{name}' is not a "
                                     "file name")
                if not shard or "/" in shard or shard in (".", ".."):
                    raise BadWeights(f"{index}: tensor '{name}' is placed in '{shard}', "
                                     "which is not a file name beside the index")
                shard_of[name] = shard
            files = [os.path.join(os.path.dirname(index), shard)
                     for shard in sorted(set(shard_of.values()))]
        self.files, self.entries, self._data = [], {}, []
        for i, file in enumerate(files):
            try:
                with open(file, "rb") as f:
                    data = bytearray(f.read())
            except OSError as e:
                raise BadWeights(f"{file}: cannot open the checkpoint: {e.strerror}")
            for name, e in sorted(parse_header(file, data).items()):
                if shard_of:
                    where = shard_of.get(name)
                    if where is None or os.path.basename(file) != where:
                        raise BadWeights(f"{file} holds tensor '{name}', which the index "
                                         f"places {'nowhere' if where is None else 'in ' + where}")
                if name in self.entries:
                    raise BadWeights(f"{file} holds tensor '{name}' a second time")
                self.entries[name] = (i,) + e
            self._data.append(data)
            self.files.append(file)
        for name, shard in sorted(shard_of.items()):
            if name not in self.entries:
                raise BadWeights(f"{index} places tensor '{name}' in {shard}, which lacks it")

    def shape(self, name):
        return self.entries[name][2]

    def file_of(self, name):
        return self.files[self.entries[name][0]]

    def load(self, name, dtype):
        i, kind, shape, begin, end = self.entries[name]
        torch_dtype, size = DTYPES[kind]
        count = (end - begin) // size
        if count == 0:
            flat = torch.empty(0, dtype=torch_dtype)
        else:
            flat = torch.frombuffer(self._data[i], dtype=torch_dtype, count=count,
                                    offset=begin)
        return flat.reshape(shape).to(dtype).clone()


def load_weights(module, model, checkpoint, dtype, ignored=None, candidates=None,
                 transposed=None):
    """lib/models/weights.cc LoadWeights: every parameter by name (each must
    be there, with the module's shape), then buffers where present; a tensor
    of the checkpoint the module has no use for is an error."""
    used = set()
    params = list(module.named_parameters())
    tensors = params + list(module.named_buffers())
    with torch.no_grad():
        for i, (name, tensor) in enumerate(tensors):
            if ignored and ignored(name):
                continue
            names = (candidates(name) if candidates else None) or [name]
            found = next((c for c in names if c in checkpoint.entries), None)
            if found is None:
                if i >= len(params):
                    continue  # a buffer the model computes
                raise BadWeights(f"{', '.join(checkpoint.files)} has no tensor '{names[0]}', "
                                 f"which {model} needs with shape "
                                 f"{_shape_text(tensor.shape)}")
            flip = bool(transposed and transposed(name))
            want = list(tensor.shape)
            if flip and len(want) == 2:
                want.reverse()
            if checkpoint.shape(found) != want:
                raise BadWeights(f"{checkpoint.file_of(found)}: tensor '{found}' has shape "
                                 f"{_shape_text(checkpoint.shape(found))}, but {model} needs "
                                 f"{_shape_text(want)}"
                                 + (" (stored transposed)" if flip else ""))
            value = checkpoint.load(found, dtype)
            tensor.data = value.t().contiguous() if flip else value
            used.add(found)
    for name in sorted(checkpoint.entries):
        if name in used or (ignored and ignored(name)):
            continue
        raise BadWeights(f"{checkpoint.file_of(name)} holds tensor '{name}' of shape "
                         f"{_shape_text(checkpoint.shape(name))}, which {model} has no "
                         "parameter or buffer for")


def family_names(family, tied=False):
    """The family's WeightNames (its row's checkpoint conventions, a tied
    model's head passed over): {ignored, candidates, transposed}."""
    row = ROWS.get(family)
    if row is None:
        raise BadWeights(f"{family} does not load --weights; the families that do: "
                         f"{', '.join(LOADERS)}")
    c = row.weight_names(SimpleNamespace(tied=tied))
    return {"ignored": c.ignored, "candidates": c.candidates, "transposed": c.transposed}


def load_family_weights(module, family, size, path, dtype, tied=None):
    """LoadSpecWeights: the checkpoint at `path` into `module`, in `dtype`;
    tied: whether its head is the embedding (None: as the size's)."""
    if tied is None:
        tied = any(s.name == size and s.options.tied for s in ROWS[family].sizes
                   ) if family in ROWS else False
    names = family_names(family, tied)
    load_weights(module, f"{family}/{size}", Checkpoint(path), dtype, **names)


def weights_name(path):
    """lib/family/spec.cc WeightsName: the file's name without .safetensors,
    or the folder's (of a folder, or of its index or model.safetensors)."""
    p = os.path.normpath(path) if path else ""
    name = os.path.basename(p)
    if name.endswith(".index.json") or name == "model.safetensors":
        name = os.path.basename(os.path.dirname(p))
    elif name.endswith(".safetensors"):
        name = name[:-len(".safetensors")]
    return name or "checkpoint"


def _file_sha256(path):
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        raise BadWeights(f"{path}: cannot read it")
    return h.hexdigest()


def checkpoint_sha256(path):
    """lib/base/digest.cc CheckpointSha256: a file's SHA-256 (hex); a
    folder's (or its index's or model.safetensors's folder's) .safetensors
    and .index.json files as "name=hex" joined by ", " in name order, a
    single file's alone."""
    folder = path
    if not os.path.isdir(folder):
        name = os.path.basename(folder)
        if not name.endswith(".index.json") and name != "model.safetensors":
            return _file_sha256(path)
        folder = os.path.dirname(folder)
    try:
        names = sorted(n for n in os.listdir(folder or ".")
                       if os.path.isfile(os.path.join(folder, n))
                       and n.endswith((".safetensors", ".index.json")))
    except OSError as e:
        raise BadWeights(f"{path}: {e.strerror}")
    if not names:
        raise BadWeights(f"{folder} holds no .safetensors file")
    if len(names) == 1:
        return _file_sha256(os.path.join(folder, names[0]))
    return ", ".join(f"{n}={_file_sha256(os.path.join(folder, n))}" for n in names)
