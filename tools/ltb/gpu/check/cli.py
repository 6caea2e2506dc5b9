"""The GPU acceptance in one command: everything a first run on a GPU must
show, on the first GPU, in a few minutes (tools/gpu-check). What each check
shows, --quick, --pack, --budget and the rehearsal: docs/devices.md.
Standard library only: the GPU machine may lack the tools' Python packages."""
import argparse
import os
import re
import sys

from ltb.base import REPO
from ltb.gpu.check import GpuCheck
from ltb.gpu.check.ctest import CTEST_TIMEOUT
from ltb.gpu.check.runner import COMMAND_TIMEOUT

EPILOG = """\
The checks, in order: bench runs and lists the suite, the tools' Python
packages, the default suite (with the CPU/GPU speedup summary), the roofline,
precision, TF32 and CUDA graphs, generation, train_epoch, --profile, the
transfer ops, --sync, the memory guard, out-of-memory errors, data-parallel
runs through tools/launch, ctest. OUTDIR gets one JSON per bench run,
console.log and summary.md (with --pack: summary.md, console.log and
results.tar.gz alone). --devices=cpu is the rehearsal at nano sizes.

Exit 0 when everything that ran passed, 1 when anything failed or was skipped
as out of time, 2 on bad usage, 128 + the signal when interrupted.
docs/devices.md (tools/gpu-check) says what each check shows."""


def main():
    parser = argparse.ArgumentParser(
        prog="gpu-check", description=__doc__.split(" (tools/gpu-check)")[0] + ".",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    parser.add_argument("outdir", help="where the JSON results, console.log and summary.md go")
    parser.add_argument("--devices", default="cuda",
                        help="devices to check (default cuda, the first GPU); cpu is the rehearsal")
    build = os.environ.get("LTB_BUILD_DIR") or os.path.join(REPO, "build")
    parser.add_argument("--build", default=build, help=f"build directory for ctest (default {build})")
    parser.add_argument("--bench", default=None, help="the bench binary (default BUILD/bench/bench)")
    parser.add_argument("--quick", action="store_true",
                        help="the checks sized for a short GPU lease (implies --pack; no ctest)")
    parser.add_argument("--pack", action="store_true",
                        help="OUTDIR holds summary.md, console.log and results.tar.gz alone")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole check: a step that would start past it "
                             "is skipped as out of time")
    ctest = parser.add_mutually_exclusive_group()
    ctest.add_argument("--no-ctest", action="store_true", help="do not run ctest")
    ctest.add_argument("--ctest", action="store_true", help="with --quick: run ctest too")
    parser.add_argument("--timeout", type=float, default=COMMAND_TIMEOUT,
                        help=f"seconds before one bench run is stopped as failed "
                             f"(default {COMMAND_TIMEOUT}; ctest: {CTEST_TIMEOUT})")
    parser.add_argument("--ctest-args", default="",
                        help="more arguments for ctest, one string (e.g. '-E bench_e2e_older_cpu')")
    args = parser.parse_args()
    if args.bench is None:
        args.bench = os.path.join(args.build, "bench", "bench")
    devices = [d for d in args.devices.split(",") if d]
    bad = [d for d in devices if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", d)]
    if not devices or bad:
        parser.error(f"--devices: {','.join(bad) or 'empty'}: valid: cpu, cuda, cuda:N, mps")
    if args.budget is not None and not args.budget > 0:
        parser.error(f"--budget: {args.budget:g}: give a number of seconds above 0")
    if args.ctest and not args.quick:
        parser.error("--ctest goes with --quick (without it, ctest runs unless --no-ctest)")
    if not os.access(args.bench, os.X_OK):
        parser.error(f"--bench: {args.bench} is not an executable file (build it, or name it)")
    sys.exit(GpuCheck(args).run_all())

