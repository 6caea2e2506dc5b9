"""What the families' Python definitions share: a size's entry, the
attention over a key/value cache (the decoder's and Whisper's), and random
weights drawn as the C++ models draw them (lib/models/language_model.cc)."""
import concurrent.futures
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn


FAMILIES = ("Transformer", "GPT2", "Llama", "ResNet", "CNN", "Encoder", "Whisper",
            "EncDec")


@dataclasses.dataclass(frozen=True)
class Size:
    name: str
    options: object
    card_params: int  # shared/MODELS.md


def cached(cache, k, v, position):
    """Writes k, v (B, heads, T, hs) into a layer's cache at position and
    returns every cached key and value up to position + T. A chunk of
    several tokens after cached ones attends through attend's mask."""
    cache_k, cache_v = cache
    t = k.shape[2]
    cache_k[:, :, position:position + t].copy_(k)
    cache_v[:, :, position:position + t].copy_(v)
    return cache_k[:, :, :position + t], cache_v[:, :, :position + t]


def attend(q, k, v, causal):
    """lib/models/attention.cc Attention (fused): SDPA, causal from the top
    left when the queries are the keys; queries after cached keys (a chunk
    at a depth) with an explicit mask aligned to the bottom right (query i
    sees keys up to tk - tq + i)."""
    tq, tk = q.shape[-2], k.shape[-2]
    if not causal or tq == tk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    seen = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=seen, is_causal=False)


INIT_CHUNK = 1 << 20  # C++: kInitChunk


def init_chunk_seed(base, k):
    """C++'s InitChunkSeed: murmur3's 32-bit finaliser of base + k (mod 2^32)."""
    h = (base + k) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def init_like_hugging_face(module, std, layers, residual=()):
    """Random weights as Hugging Face initialises GPT-2 and Llama, drawn as
    lib/models/language_model.cc's InitLikeHuggingFace draws them, so that one
    seed gives both sides the same weights: matrices and embeddings from
    N(0, std), those named `residual` from N(0, std / sqrt(2 layers)), biases
    zero, norms' weights one. One 64-bit base from the default generator,
    then the matrices in the order of the sorted names, flattened and cut into
    chunks of INIT_CHUNK elements, chunk k of them all drawn from its own
    generator seeded init_chunk_seed(base, k): the same values on any number
    of threads, drawn here on torch.get_num_threads() of them."""
    scaled = std / math.sqrt(2 * layers)
    base = int(torch.empty((), dtype=torch.int64, device="cpu").random_())
    chunks = []
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            if p.dim() < 2 and name.endswith("bias"):
                p.zero_()
            elif p.dim() < 2:
                p.fill_(1)
            elif not p.is_meta:  # a model of shapes only (torch.device("meta")) draws none
                flat = p.detach().view(-1)
                sd = scaled if name.endswith(tuple(residual)) else std
                chunks += [(flat[start:start + INIT_CHUNK], sd)
                           for start in range(0, flat.numel(), INIT_CHUNK)]

    # The pool's threads draw in the caller's mode: a model built under
    # torch.inference_mode() holds inference tensors.
    inference = torch.is_inference_mode_enabled()

    def draw(k):
        elements, sd = chunks[k]
        with torch.inference_mode(inference), torch.no_grad():
            elements.normal_(0, sd,
                             generator=torch.Generator().manual_seed(init_chunk_seed(base, k)))

    with concurrent.futures.ThreadPoolExecutor(torch.get_num_threads()) as pool:
        list(pool.map(draw, range(len(chunks))))


def undrawn(cls, *args, **kwargs):
    """A Linear or Embedding whose weights are allocated, not drawn (C++:
    MakeLinear and MakeEmbedding of models/decoder.cc): built on the meta device, then given
    uninitialised memory on the default device (the CPU; none for a model of
    shapes only, built under torch.device("meta")), so that
    init_like_hugging_face draws them alone."""
    return nn.utils.skip_init(cls, *args, device=torch.get_default_device(), **kwargs)
