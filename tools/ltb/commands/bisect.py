"""Finds the commit that made a benchmark slower: git bisect with a build and
a gated measurement at each step.

    tools/bisect --good=SHA --bad=SHA --benchmark_filter=NAME
                 [--threshold 7%] [--alpha 0.05] [--repetitions 5]
                 [--worktree DIR] [--build CMD] [--bench PATH] [-- BENCH_ARGS...]

docs/tools.md, "bisect: the commit that did it".
"""
import argparse
import json
import os
import subprocess
import sys

from ltb.base import EXIT_OK, EXIT_REGRESSION, REPO, BadInput, run
from ltb.gate.options import alpha_value, percent
from ltb.gate.verdicts import REGRESSION, compare
from ltb.results.entries import SPEED_COUNTERS, aggregates_only, collect
from ltb.results.format import format_seconds, format_value
from ltb.results.load import load
from ltb.bench_process.bench import last_lines

GOOD, BAD, SKIP, STOP = 0, 1, 125, 128  # git bisect run's exit codes


def default_worktree():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "libtorch-bench", "bisect-worktree")


def git(repo, *args, check=True):
    run = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)
    if check and run.returncode != 0:
        raise BadInput(f"git {' '.join(args)}: {run.stderr.strip()}")
    return run.stdout.strip()


def log(message):
    print(f"bisect: {message}", file=sys.stderr, flush=True)


def measure(state, label):
    """Builds the worktree's checkout and runs the benchmarks; the result
    file's path, or None when the build or the bench failed."""
    tree = state["worktree"]
    sha = git(tree, "rev-parse", "HEAD")
    log(f"{label} {sha[:12]}: building")
    # The worktree's own build directory, whatever the caller's environment.
    env = dict(os.environ, LTB_BUILD_DIR=os.path.join(tree, "build"))
    build = subprocess.run(state["build"], shell=True, cwd=tree, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, env=env)
    if build.returncode != 0:
        log(f"{sha[:12]} does not build: {last_lines(build.stderr, 3)}")
        return None
    runs = state["runs"]
    os.makedirs(runs, exist_ok=True)
    out = os.path.join(runs, f"{sha[:12]}.json")
    if os.path.exists(out):
        os.remove(out)  # a run of an earlier search is not this one's
    bench = os.path.join(tree, state["bench"])
    command = [bench, f"--benchmark_filter={state['filter']}",
               f"--benchmark_repetitions={state['repetitions']}",
               f"--benchmark_out={out}", "--benchmark_out_format=json", *state["bench_args"]]
    ran = subprocess.run(command, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    if ran.returncode != 0 or not os.path.exists(out):
        log(f"{sha[:12]}: bench failed: {last_lines(ran.stderr, 3)}")
        return None
    try:
        doc = load(out)
    except BadInput as e:
        log(f"{sha[:12]}: {e}")
        return None
    if not collect(doc):
        if aggregates_only(doc):
            log(f"{sha[:12]}: the run reported aggregates alone, no repetition to judge: "
                "drop --benchmark_report_aggregates_only from the arguments after --")
        else:
            log(f"{sha[:12]}: no benchmark matched --benchmark_filter={state['filter']}")
        return None
    return out


def verdict(state, path):
    """BAD when the gate finds a regression against the good run."""
    good = load(state["good_run"])
    this = load(path)
    # Speed only: the step time, and the throughputs that say the same.
    rows = [r for r in compare(good, this, [], state["threshold"], state["alpha"])
            if r.metric == "time" or r.metric in SPEED_COUNTERS]
    worse = [r for r in rows if r.verdict == REGRESSION]
    for r in rows:
        log(f"  {r.name} {r.metric}: {format_value(r.metric, r.baseline)} -> "
            f"{format_value(r.metric, r.contender)} ({r.verdict})")
    if not rows:
        log("  nothing in common with the good run to compare")
        return SKIP
    return BAD if worse else GOOD


def step(state_path):
    """One `git bisect run` step: exit GOOD, BAD or SKIP; anything that goes
    wrong in the tool itself stops the search (exit 128) rather than calling
    the commit bad."""
    try:
        with open(state_path) as f:
            state = json.load(f)
        path = measure(state, "step")
        if path is None:
            return SKIP
        return verdict(state, path)
    except BaseException as e:  # noqa: BLE001 - git bisect must not read it as "bad"
        log(f"the step failed, stopping the search: {type(e).__name__}: {e}")
        return STOP


def summary(path):
    doc = load(path)
    return ", ".join(f"{name} {format_seconds(b.median_time)}"
                     for name, b in collect(doc).items())


def bisect_main():
    if len(sys.argv) == 3 and sys.argv[1] == "--step":
        sys.exit(step(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--good", required=True, help="a commit without the slowdown")
    parser.add_argument("--bad", required=True, help="a commit with it")
    parser.add_argument("--benchmark_filter", required=True,
                        help="the benchmarks to measure (bench's regular expression)")
    parser.add_argument("--threshold", type=percent, default=0.07,
                        help="the gate's threshold (default 7%%)")
    parser.add_argument("--alpha", type=alpha_value, default=0.05)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--repo", default=REPO)
    parser.add_argument("--worktree", default=default_worktree())
    parser.add_argument("--build", default="LTB_TARGETS=bench tools/setup",
                        help="shell command that builds the worktree's checkout")
    parser.add_argument("--bench", default=os.path.join("build", "bench", "bench"),
                        help="the binary, relative to the worktree")
    argv = sys.argv[1:]
    bench_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, bench_args = argv[:i], argv[i + 1:]
    args = parser.parse_args(argv)
    if args.repetitions < 1:
        raise BadInput("--repetitions must be at least 1")
    repo = git(args.repo, "rev-parse", "--show-toplevel")
    good = git(repo, "rev-parse", "--verify", f"{args.good}^{{commit}}")
    bad = git(repo, "rev-parse", "--verify", f"{args.bad}^{{commit}}")
    if subprocess.run(["git", "-C", repo, "merge-base", "--is-ancestor", good, bad]
                      ).returncode != 0:
        raise BadInput(f"--good={args.good} is not an ancestor of --bad={args.bad}")
    tree = os.path.realpath(args.worktree)
    if tree == os.path.realpath(repo):
        raise BadInput("--worktree must not be the repository's own checkout")
    if os.path.isdir(tree):
        # Only a worktree of this repository, at its top: never a folder
        # inside a checkout, nor another repository.
        top = git(tree, "rev-parse", "--show-toplevel", check=False)
        common = git(tree, "rev-parse", "--path-format=absolute", "--git-common-dir",
                     check=False)
        ours = git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
        if os.path.realpath(top or "/") != tree or os.path.realpath(common or "/") != \
                os.path.realpath(ours):
            raise BadInput(f"--worktree={tree} exists and is not a worktree of "
                                       f"{repo}: choose another folder")
        subprocess.run(["git", "-C", tree, "bisect", "reset"], capture_output=True)
        git(tree, "checkout", "--quiet", "--detach", good)
    else:
        os.makedirs(os.path.dirname(tree), exist_ok=True)
        subprocess.run(["git", "-C", repo, "worktree", "prune"], capture_output=True)
        git(repo, "worktree", "add", "--quiet", "--detach", tree, good)
    state = {"worktree": tree, "runs": tree + ".runs", "build": args.build,
             "bench": args.bench,
             "filter": args.benchmark_filter, "repetitions": args.repetitions,
             "bench_args": bench_args, "threshold": args.threshold, "alpha": args.alpha}
    good_run = measure(state, "good")
    if good_run is None:
        raise BadInput(f"the good commit {good[:12]} could not be measured")
    state["good_run"] = good_run
    git(tree, "checkout", "--quiet", "--detach", bad)
    bad_run = measure(state, "bad")
    if bad_run is None:
        raise BadInput(f"the bad commit {bad[:12]} could not be measured")
    if verdict(state, bad_run) != BAD:
        print(f"{bad[:12]} is not slower than {good[:12]} by the gate "
              f"(threshold {args.threshold * 100:g}%, alpha {args.alpha:g}): nothing to "
              f"search. good: {summary(good_run)}; bad: {summary(bad_run)}")
        return EXIT_REGRESSION
    state_path = os.path.join(state["runs"], "state.json")
    with open(state_path, "w") as f:
        json.dump(state, f)
    git(tree, "bisect", "start", bad, good)
    try:
        # The steps' own lines go to stderr as they come; git's are kept to
        # find the first bad commit.
        run = subprocess.Popen(["git", "-C", tree, "bisect", "run", sys.executable,
                                os.path.join(REPO, "tools", "bisect"), "--step", state_path],
                               stdout=subprocess.PIPE, text=True)
        lines = []
        for line in run.stdout:
            lines.append(line.rstrip("\n"))
            log(f"git: {lines[-1]}")
        run.wait()
        first = None
        for line in lines:
            if line.endswith("is the first bad commit"):
                first = line.split()[0]
        if first is None:
            raise BadInput("git bisect found no first bad commit: "
                                       + last_lines("\n".join(lines), 30))
    finally:
        subprocess.run(["git", "-C", tree, "bisect", "reset"], capture_output=True)
    subject = git(repo, "show", "-s", "--format=%h %s", first)
    measured = os.path.join(state["runs"], f"{first[:12]}.json")
    parent = os.path.join(state["runs"], f"{git(repo, 'rev-parse', first + '^')[:12]}.json")
    print(f"first bad commit: {first}\n  {subject}")
    if os.path.exists(measured):
        print(f"  measured: {summary(measured)}")
    if os.path.exists(parent):
        print(f"  its parent: {summary(parent)}")
    print(f"  good {good[:12]}: {summary(good_run)}")
    return EXIT_OK



def main():
    run(bisect_main)
