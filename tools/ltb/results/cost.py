"""What a result costs: the price of a million tokens or samples, or of an
epoch, from a price per device-hour."""

import math

from ltb.base import BadInput
from ltb.results.scaling import DATA_PARALLEL_COUNTERS


def add_cost_arguments(parser):
    parser.add_argument("--cost", nargs="+", type=float, metavar="PRICE",
                        help="price per device-hour of each file's machine, in file order")
    parser.add_argument("--device-count", nargs="+", type=int, metavar="N",
                        help="devices each file's run used (default: each benchmark's: "
                             "a data-parallel one's ranks, else 1)")


def device_count(doc):
    """Devices a run used, from its context (world_size of data-parallel
    runs), else 1."""
    value = doc.get("context", {}).get("world_size", 1)
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def data_parallel_ranks(bench, doc):
    """The ranks whose work a benchmark's counters sum: a data-parallel
    one's (its entries' world_size in a file of several world sizes, else
    the run's), else 1: a benchmark that does not run data-parallel runs on
    each rank alone, and rank 0 reports its own device's."""
    if not any(bench.has(c) for c in DATA_PARALLEL_COUNTERS):
        return 1
    return bench.world_size if "world_size" in bench.entries[0] else device_count(doc)


class Price:
    """A file's price per device-hour, and the devices --device-count gave
    its run (None: each benchmark's own, data_parallel_ranks)."""

    def __init__(self, per_device_hour, doc, devices=None):
        self.per_device_hour, self.doc, self.devices = per_device_hour, doc, devices

    def per_hour(self, bench):
        """The price of an hour of the devices a benchmark's counters sum."""
        devices = self.devices or data_parallel_ranks(bench, self.doc)
        return self.per_device_hour * devices


def hourly_prices(args, docs):
    """Each file's Price, or None without --cost. BadInput when the counts
    do not match the files."""
    if args.cost is None:
        if args.device_count is not None:
            raise BadInput("--device-count needs --cost")
        return None
    if len(args.cost) != len(docs):
        raise BadInput(f"--cost gives {len(args.cost)} prices for {len(docs)} files")
    if args.device_count is not None and len(args.device_count) != len(docs):
        raise BadInput(f"--device-count gives {len(args.device_count)} counts for "
                       f"{len(docs)} files")
    if not all(0 <= p < math.inf for p in args.cost) or \
            any(n < 1 for n in args.device_count or []):
        raise BadInput("prices must be finite numbers >= 0 and device counts >= 1 (--cost "
                       f"{' '.join(f'{p:g}' for p in args.cost)})")
    if args.device_count is not None and any("world_sizes" in d["context"] for d in docs):
        raise BadInput("--device-count does not apply to a file of several world sizes "
                       "(from tools/scaling): each benchmark's entries give its ranks")
    counts = args.device_count or [None] * len(docs)
    return [Price(price, doc, n) for price, doc, n in zip(args.cost, docs, counts)]


def cost_per_million(bench, price):
    """(cost of 1M tokens or samples, 'tokens' or 'samples'), or (None, None)."""
    rate, unit = bench.rate()
    if not rate:
        return None, None
    return price.per_hour(bench) / 3600 / rate * 1e6, unit


def cost_per_epoch(bench, price):
    """Cost of one epoch of a train_epoch benchmark (its epoch_s counter,
    else its time per iteration, which is one epoch), or None."""
    if bench.fields["phase"] != "train_epoch":
        return None
    epoch = bench.median("epoch_s") if bench.has("epoch_s") else bench.median_time
    return price.per_hour(bench) / 3600 * epoch
