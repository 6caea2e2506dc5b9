"""Data-parallel weak scaling from runs of the same benchmarks at several
world sizes.

    tools/scaling [--out FILE] RANKS1.json RANKS2.json [MORE.json ...]

Prints the weak-scaling table and, with --out, writes the runs as one file:
docs/data-parallel.md, "Scaling efficiency", and docs/tools.md, "scaling".
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
