"""Device speedup summary from saved bench JSON, as bench prints at the end
of a run that measured the same benchmark on several devices.

    tools/speedup results/run.json [more.json ...]

Each benchmark measured on two or more devices is listed with every device's
throughput and its speedup over the CPU, all its devices by one counter: the
first of tokens/s, samples/s, FLOP/s, bytes/s that every one of them
reports (else each its own, and no speedup where the CPU lacks it). A
device with no speedup says why. Repetitions are averaged, over those with
a finite value; errored entries are left out, and benchmarks reported by
their aggregates alone (--benchmark_report_aggregates_only) are named on
stderr and left out. Files are
never averaged together: a device several files measured is one row a file,
"cuda (FILE)", against its own file's CPU, else the one file's CPU.
Exit 0 on success, 2 on bad input or when no benchmark ran on two devices.
"""
import argparse
import sys

from ltb.base import BadInput, run
from ltb.results.entries import aggregates_only
from ltb.results.load import file_labels, load_all
from ltb.results.speedup import device_speedup_lines


def speedup_main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="bench --benchmark_format=json output")
    args = parser.parse_args()
    docs, labels = load_all(args.files), file_labels(args.files)
    lines = device_speedup_lines(docs, labels)
    unread = [f"{name} ({label})" for doc, label in zip(docs, labels)
              for name in aggregates_only(doc)]
    if not lines:
        raise BadInput("no benchmark was measured on two or more devices in "
                       + ", ".join(args.files) + (
                           f"; {len(unread)} reported by their aggregates alone "
                           "(--benchmark_report_aggregates_only), with no repetition to "
                           f"average: {', '.join(unread)}" if unread else ""))
    for line in unread:
        print(f"speedup: aggregates alone, no repetition to average, left out: {line}",
              file=sys.stderr)
    print("Device speedup (throughput, and speedup over cpu):")
    print("\n".join(lines))



def main():
    run(speedup_main)
