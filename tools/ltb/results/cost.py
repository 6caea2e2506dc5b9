"""What a result costs: the price of a million tokens or samples, or of an
epoch, from a price per device-hour."""

from ltb.base import BadInput


def add_cost_arguments(parser):
    parser.add_argument("--cost", nargs="+", type=float, metavar="PRICE",
                        help="price per device-hour of each file's machine, in file order")
    parser.add_argument("--device-count", nargs="+", type=int, metavar="N",
                        help="devices each file's run used (default: the context's "
                             "world_size, else 1)")


def device_count(doc):
    """Devices a run used, from its context (world_size of data-parallel
    runs), else 1."""
    value = doc.get("context", {}).get("world_size", 1)
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def hourly_prices(args, docs):
    """Each file's price per hour of the devices its run used, or None
    without --cost. BadInput when the counts do not match the files. In a
    file of several world sizes each benchmark's own ranks multiply it
    (Benchmark.world_size)."""
    if args.cost is None:
        if args.device_count is not None:
            raise BadInput("--device-count needs --cost")
        return None
    if len(args.cost) != len(docs):
        raise BadInput(f"--cost gives {len(args.cost)} prices for {len(docs)} files")
    if args.device_count is not None and len(args.device_count) != len(docs):
        raise BadInput(f"--device-count gives {len(args.device_count)} counts for "
                       f"{len(docs)} files")
    if any(p < 0 for p in args.cost) or any(n < 1 for n in args.device_count or []):
        raise BadInput("prices must be >= 0 and device counts >= 1")
    if args.device_count is not None and any("world_sizes" in d["context"] for d in docs):
        raise BadInput("--device-count does not apply to a file of several world sizes "
                       "(from tools/scaling): each benchmark's entries give its ranks")
    counts = args.device_count or [device_count(doc) for doc in docs]
    return [price * n for price, n in zip(args.cost, counts)]


def cost_per_million(bench, price_per_hour):
    """(cost of 1M tokens or samples, 'tokens' or 'samples'), or (None, None)."""
    rate, unit = bench.rate()
    if not rate:
        return None, None
    return price_per_hour * bench.world_size / 3600 / rate * 1e6, unit


def cost_per_epoch(bench, price_per_hour):
    """Cost of one epoch of a train_epoch benchmark (its epoch_s counter,
    else its time per iteration, which is one epoch), or None."""
    if bench.fields["phase"] != "train_epoch":
        return None
    epoch = bench.median("epoch_s") if bench.has("epoch_s") else bench.median_time
    return price_per_hour * bench.world_size / 3600 * epoch
