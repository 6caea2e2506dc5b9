"""train_epoch's data (lib/workloads/loader.cc, epoch.cc) with
--data=memory: the synthetic dataset generated once in memory as bench
generates its shards, handed over a batch at a time by a background
thread, and how many samples an epoch passes over."""
import queue
import threading

import torch

from ltb.pysuite import facts
from ltb.pysuite.family import Refused

PREFETCH_BATCHES = facts.load()["measurement"]["prefetch_batches"]


def epoch_samples(args, batch):
    """lib/workloads/epoch.cc EpochSamples: the dataset's whole batches (one rank)."""
    return args.dataset_samples // batch * batch


class MemoryLoader:
    """lib/workloads/loader.cc with --data=memory: the dataset generated
    once as bench generates its shards (GenerateShard: each shard's tokens
    from a CPU generator seeded seed * 1000003 + shard), its whole batches
    handed over each epoch by a background thread through a queue of
    PREFETCH_BATCHES, then moved to the device (from pinned memory, without
    blocking, where the device is a GPU)."""

    def __init__(self, args, batch, sample_tokens, vocab, device):
        per_shard = max(1, (args.shard_mb << 20) // (sample_tokens * 2))
        parts = []
        for index in range(-(-args.dataset_samples // per_shard)):
            n = min(per_shard, args.dataset_samples - index * per_shard)
            gen = torch.Generator().manual_seed(args.seed * 1000003 + index)
            parts.append(torch.randint(vocab, (n, sample_tokens), generator=gen))
        self.batch, self.device = batch, device
        self.batches = args.dataset_samples // batch
        if self.batches == 0:
            raise Refused(f"--dataset_samples={args.dataset_samples} gives no whole batch of "
                        f"{batch} per rank")
        self.pin = device.startswith("cuda")
        self.memory = torch.cat(parts)[:self.batches * batch].contiguous()
        if self.pin:
            self.memory = self.memory.pin_memory()
        self.thread = None

    def start_epoch(self):
        self.stop()
        self.queue, self.stopping = queue.Queue(maxsize=PREFETCH_BATCHES), False
        self.thread = threading.Thread(target=self._produce, daemon=True)
        self.thread.start()

    def _produce(self):
        items = [self.memory[b * self.batch:(b + 1) * self.batch] for b in range(self.batches)]
        for item in items + [None]:  # None: the end of the epoch
            while not self.stopping:
                try:
                    self.queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    pass

    def next(self):
        """The next batch on the device, or None at the end of the epoch."""
        host = self.queue.get()
        return None if host is None else host.to(self.device, non_blocking=self.pin)

    def stop(self):
        if self.thread is not None:
            self.stopping = True
            self.thread.join()
            self.thread = None

