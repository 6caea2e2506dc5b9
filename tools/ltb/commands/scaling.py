"""Data-parallel weak scaling from runs of the same benchmarks at several
world sizes.

    tools/scaling [--out FILE] RANKS1.json RANKS2.json [MORE.json ...]

Each file is one bench run (rank 0's --benchmark_out), its context's
world_size saying how many ranks it had: tools/launch --nproc_per_node=1,2,...
writes them and calls this; with torchrun, run once per world size and give
the files here. Prints, per benchmark that ran data-parallel, its throughput
(summed over ranks; one counter at every world size: tokens/s where all
report it, else samples/s, and no efficiency at a world size without the
fewest ranks' counter) at each world size with the
weak-scaling efficiency, T(N) / (N x T(1)) (--batch is per rank, so N ranks
do N times the work of one; with no one-rank run, the fewest ranks measured
stand for 1), and the exposed communication of a step (comm_exposed_ms) at
the most ranks.

Settings of the runs' contexts that decide a rank's speed besides the
number of ranks (machine, threads, LibTorch, malloc, grad mode, warm-up)
and differ between world sizes are named on stderr.

--out writes the runs as one Google Benchmark JSON that compare.py, gate,
report and plot read: each entry named with /ranks:N and carrying
world_size, each data-parallel benchmark's entries their
scaling_efficiency (measured entries only, not aggregates), errored
entries kept. A benchmark not measured at the fewest ranks gets no
efficiency. Exit 0 on success, 2 on bad input
(an unreadable file, two files at one world size, no data-parallel
benchmark measured at two world sizes; benchmarks reported by their
aggregates alone, --benchmark_report_aggregates_only, are named).
"""
import argparse
import sys

from ltb.base import BadInput, run, write_json
from ltb.results.entries import aggregates_only, errors
from ltb.results.load import load_all
from ltb.results.scaling import merge_world_sizes, scaling_markdown, setting_differences


def scaling_main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("files", nargs="+", help="bench JSON files, one per world size")
    parser.add_argument("--out", help="the merged Google Benchmark JSON")
    args = parser.parse_args()
    docs = load_all(args.files)
    merged = merge_world_sizes(docs, args.files)
    for line in setting_differences(docs):
        print(f"scaling: the runs differ in {line}: the efficiency is not the ranks' alone",
              file=sys.stderr)
    if args.out:
        write_json(args.out, merged)
        print(f"scaling: wrote {args.out}", file=sys.stderr)
    table = scaling_markdown(merged)
    failures = errors(merged)
    if table:
        fewest = merged["context"]["world_sizes"].split(",")[0]
        base = "T(1)" if fewest == "1" else f"T({fewest}) / {fewest}"
        print(f"Weak scaling: throughput summed over ranks, and in brackets the efficiency "
              f"T(N) / (N x {base}):\n")
        print(table)
    for name, message in failures.items():
        print(f"scaling: errored {name}: {message}", file=sys.stderr)
    unread = aggregates_only(merged)
    for name in unread:
        print(f"scaling: aggregates alone, no repetition to read, left out: {name}",
              file=sys.stderr)
    if not table:
        raise BadInput(
            "no data-parallel benchmark (one reporting grad_buckets or comm_exposed_ms) "
            f"measured at the fewest ranks and at more in {', '.join(args.files)} "
            f"(world sizes {merged['context']['world_sizes']})" + (
                f"; {len(unread)} reported by their aggregates alone "
                "(--benchmark_report_aggregates_only), with no repetition to read: run bench "
                "without that flag" if unread else ""))



def main():
    run(scaling_main)
