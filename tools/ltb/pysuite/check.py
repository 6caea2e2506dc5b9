"""The families' Python definitions (ltb/pysuite/models/) against the C++
modules of lib/models, on the parity test's dumps:

    cd tools && python -m ltb.pysuite.check DUMP.pt [...]

It reads dumps written by test/models/parity_test.cc (torch::pickle_save
of a dict of "param:NAME", "buffer:NAME", "input:I" and "output" tensors,
in files named FAMILY-SIZE.pt), checks that seed 0 builds the Python model
with the C++ model's weights ("init:param:NAME") and leaves the default
generator as C++ did ("rng:built"), loads the weights into the Python model
strictly, runs the same inputs and compares with the C++ output; each
dump's lines end with "FAMILY/SIZE: matches" or "... DIVERGES". Exit 0 when
every family matches, 1 when one diverges, 2 on bad input.

The C++ modules' fused/explicit attention switch is not mirrored: both
compute the same attention, and the Python models always use
scaled_dot_product_attention.
"""
import argparse
import os
import sys

import torch
import torch.jit._pickle  # restore_type_tag, for reading torch::pickle_save files

from ltb.pysuite.families import DECODERS, forward_module, size_entry

RTOL, ATOL = 1e-4, 1e-5  # ATOL relative to the largest |output|


# Buffers that are the model's state rather than computed from its options.
_STATE_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


class BadDump(Exception):
    pass


def _load_dump(path):
    name = os.path.basename(path)
    if not name.endswith(".pt") or "-" not in name:
        raise BadDump(f"{path}: expected a file named FAMILY-SIZE.pt")
    family, size = name[:-len(".pt")].split("-", 1)
    try:
        size_entry(family, size)
    except ValueError as e:
        raise BadDump(f"{path}: {e}") from e
    try:
        # torch::pickle_save tags a typed c10::Dict with restore_type_tag,
        # which only records the dict's type; everything else is tensors.
        with torch.serialization.safe_globals([torch.jit._pickle.restore_type_tag]):
            tensors = torch.load(path, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is bad input
        raise BadDump(f"{path}: cannot read: {e}") from e
    if not isinstance(tensors, dict) or "output" not in tensors or "input:0" not in tensors:
        raise BadDump(f"{path}: expected a dict with input:0 ... and output")
    return family, size, tensors


def _compare(what, got, want, atol=None):
    """(a line saying how far `got` is from `want`, whether they are close).
    `atol`: an absolute tolerance instead of ATOL times the output's scale."""
    if got.shape != want.shape:
        return f"{what}: shape {tuple(got.shape)}, C++ {tuple(want.shape)}  DIVERGES", False
    diff = (got - want).abs()
    scale = want.abs().max().item()
    bound = ATOL * scale if atol is None else atol
    ok = bool((diff <= bound + RTOL * want.abs()).all())
    line = f"{what}: max abs diff {diff.max().item():.3g} (scale {scale:.3g})"
    return line + ("" if ok else "  DIVERGES"), ok


def check_dump(path):
    """Loads one C++ dump into the Python model, runs its inputs and
    compares with the C++ output; returns (ok, lines to print)."""
    family, size, tensors = _load_dump(path)
    inputs = [tensors[f"input:{i}"] for i in range(len(tensors)) if f"input:{i}" in tensors]
    # A decoder's dump is of (B, T) tokens; a row whose seq sets its
    # positions (the Transformer's) is built for that T.
    seq = inputs[0].shape[1] if family in DECODERS else None
    torch.manual_seed(0)  # as the C++ test before building its model
    model = forward_module(family, size, seq=seq)
    built = torch.get_rng_state()
    state, drawn = {}, {}
    for key, value in tensors.items():
        kind, _, name = key.partition(":")
        if kind in ("param", "buffer"):
            state[name] = value
        elif kind == "init":  # "init:param:NAME": the C++ model's seed-0 weights
            drawn[name.partition(":")[2]] = value
    expected, dumped = set(model.state_dict()), set(state)
    if expected != dumped:
        return False, [f"{family}/{size}: names differ: only in Python "
                       f"{sorted(expected - dumped)}, only in C++ {sorted(dumped - expected)}",
                       verdict(family, size, False)]
    results = []
    if drawn:  # the same seed draws the same weights on both sides
        params = dict(model.named_parameters())
        differ = sorted(n for n, v in drawn.items()
                        if n not in params or not torch.equal(params[n].detach(), v))
        results.append((f"{family}/{size} weights drawn from seed 0: "
                        + (f"{len(drawn)} parameters equal" if not differ and
                           len(drawn) == len(params) else
                           f"differ from C++'s in {differ[:5]} ({len(differ)} of {len(drawn)})"),
                        not differ and len(drawn) == len(params)))
    if "rng:built" in tensors:  # and the same seed leaves the same generator state
        same = torch.equal(built, tensors["rng:built"])
        results.append((f"{family}/{size} default generator after building: "
                        + ("as C++'s" if same else "differs from C++'s (so do the next draws)"),
                        same))
    # Buffers the models compute (RoPE tables, Whisper's sinusoids) must come
    # out the same in Python, not only load; batch norm's statistics are
    # state (the dump's are random).
    for name, buffer in model.named_buffers():
        if not name.endswith(_STATE_BUFFERS):
            # Tables of sines and cosines of angles up to their number of
            # positions: two float32 roundings of the largest angle (another
            # LibTorch's exp or multiply may round it the other way).
            atol = 2.0 * buffer.shape[0] * torch.finfo(torch.float32).eps
            results.append(_compare(f"{family}/{size} buffer {name}", buffer, state[name], atol))
    model.load_state_dict(state, strict=True)
    phase = "encode" if family == "Whisper" else "forward"
    with torch.inference_mode():
        results.append(_compare(f"{family}/{size} {phase}", model(*inputs), tensors["output"]))
        if family == "Whisper" and "decode:input:0" in tensors:
            logits = model.decode(tensors["decode:input:0"], tensors["output"])
            results.append(_compare(f"{family}/{size} decode", logits, tensors["decode:output"]))
    ok = all(ok for _, ok in results)
    return ok, [line for line, _ in results] + [verdict(family, size, ok)]


def verdict(family, size, ok):
    """A dump's last line, which the parity test reads for its family."""
    return f"{family}/{size}: " + ("matches" if ok else "DIVERGES")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ltb.pysuite.check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("dumps", nargs="+", metavar="DUMP.pt")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    all_ok = True
    for path in args.dumps:
        try:
            ok, lines = check_dump(path)
        except BadDump as e:
            print(f"check: {e}", file=sys.stderr)
            return 2
        print("\n".join(lines))
        all_ok = all_ok and ok
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
