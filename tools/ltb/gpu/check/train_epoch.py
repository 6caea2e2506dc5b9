"""train_epoch from memory and from disk, and gpu_util_% over an epoch
sized to be long enough to sample."""
import math
import os
import re
import shutil
import tempfile

from ltb.gpu.check.results import counters, fmt, short


# bench's --dataset_samples default, and the most the gpu_util_% run uses.
DEFAULT_DATASET_SAMPLES = 128
MAX_UTIL_SAMPLES = 1 << 18


def run(r):
    r.section("train_epoch")
    sel = (f"--benchmark_filter=^(EncDec/{r.sizes['EncDec']}|"
           f"Transformer/{r.sizes['Transformer']})/{r.step_re}/train_epoch/")
    # The rehearsal: one epoch, no warm-up (an epoch that also writes the
    # dataset to disk takes seconds on a 2-core CPU).
    epochs = ["--epochs=2", "--warmup_epochs=1"] if r.gpu else ["--epochs=1",
                                                                "--warmup_epochs=0"]
    common = [f"--devices={','.join(r.step_devices)}", *epochs, sel, *r.shape]
    util = r.check("gpu_util_% during train_epoch")
    if not r.gpu:
        util.skip("needs a CUDA GPU and NVML")
    data = tempfile.mkdtemp(prefix="gpu-check-data-")
    encdec_epoch_s = None
    try:
        for source in ("memory", "disk"):
            c = r.check(f"train_epoch from {source}")
            extra = ["--data=memory"] if source == "memory" else [f"--data_dir={data}"]
            doc = r.bench_run(c, f"train_epoch_{source}", [*common, *extra])
            for e in counters(c, f"train_epoch_{source}", doc, "/train_epoch/",
                              ("epoch_s", "samples/s")):
                c.notes.append(f"{short(e['name'])}: epoch_s {fmt(e['epoch_s'])}, "
                               f"samples/s {fmt(e['samples/s'])}")
                if source == "memory" and "/cuda" in e["name"] and \
                        e["name"].startswith("EncDec/"):
                    encdec_epoch_s = e["epoch_s"]
            if source == "disk" and doc is not None:
                shards = [f for _, _, fs in os.walk(data) for f in fs if f.startswith("shard_")]
                if not shards:
                    c.fail(f"--data_dir={data}: no shards were written")
                else:
                    c.notes.append(f"{len(shards)} shards written and read")
    finally:
        shutil.rmtree(data, ignore_errors=True)
    if r.gpu:
        gpu_util(r, util, encdec_epoch_s)


def gpu_util(r, util, epoch_s):
    """gpu_util_% averages NVML's utilisation, sampled every 100 ms, and
    needs 10 samples: on a GPU an epoch of the default 128 samples takes
    milliseconds, so the dataset is sized from the epoch just measured
    until each of the two measured epochs takes about a second."""
    if not epoch_s or epoch_s <= 0:
        util.fail("gpu_util: no EncDec epoch_s on the GPU to size the dataset from")
        return
    samples = min(DEFAULT_DATASET_SAMPLES * math.ceil(1.2 / epoch_s), MAX_UTIL_SAMPLES)
    doc = r.bench_run(util, "train_epoch_util", [
        f"--devices={r.gpus[0]}", "--epochs=2", "--warmup_epochs=1", "--data=memory",
        f"--dataset_samples={samples}",
        f"--benchmark_filter=^EncDec/{r.sizes['EncDec']}/{re.escape(r.gpus[0])}/"
        "train_epoch/"])
    for e in counters(util, "train_epoch_util", doc, "/train_epoch/",
                      ("epoch_s", "gpu_util_%")):
        util.notes.append(f"{short(e['name'])} over {samples} samples: epoch_s "
                          f"{fmt(e['epoch_s'])}, gpu_util_% {fmt(e['gpu_util_%'])}")
