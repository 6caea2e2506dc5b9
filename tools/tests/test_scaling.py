"""Weak scaling: tools/scaling on fixture runs at several world sizes, and
tools/launch sweeping world sizes over a stand-in program that writes such
runs."""
import json
import os
import subprocess
import sys
import textwrap
import time

from tests.helpers import TOOLS, ToolTest, doc, entry, repeated

STEP = "EncDec/tiny/cpu/train_step/batch:8/seq:64/fp32"
TRAIN2 = "EncDec/small/cpu/train_step/batch:8/seq:64/fp32"
FWD = "EncDec/tiny/cpu/forward/batch:8/seq:64/fp32"
LAUNCH = os.path.join(TOOLS, "launch")

# A stand-in for bench under a launcher: every rank appends its environment
# to $FAKE_RANKS_LOG; rank 0 writes --benchmark_out as bench would, with
# the world size in its context, a data-parallel train_step whose
# throughput is 1000 tokens/s a rank times 0.9 per doubling of ranks, and a
# forward that is not data-parallel. FAKE_FAIL_AT=N makes rank 0 of an
# N-rank run exit 1 after writing its results; FAKE_SKIP_AT=N exit 3 before.
# FAKE_RANK1_FAILS=1: rank 1 exits 4 once rank 0 waits for it (as in a
# collective; rank 0 says so in $FAKE_RANKS_LOG.waiting), and rank 0 waits
# until it is signalled, then writes its results and exits 1.
FAKE_RANK = textwrap.dedent("""\
    import json, math, os, signal, sys, time
    world = int(os.environ["WORLD_SIZE"])
    with open(os.environ["FAKE_RANKS_LOG"], "a") as f:
        f.write(json.dumps({k: os.environ.get(k) for k in (
            "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
            "MASTER_PORT", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")}
            | {"args": sys.argv[1:]}) + "\\n")
    rank1_fails = os.environ.get("FAKE_RANK1_FAILS") == "1"
    waiting = os.environ["FAKE_RANKS_LOG"] + ".waiting"
    if rank1_fails and os.environ["RANK"] == "1":
        deadline = time.monotonic() + 60
        while not os.path.exists(waiting) and time.monotonic() < deadline:
            time.sleep(0.02)
        sys.exit(4)
    if rank1_fails:
        stopped = []
        signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
        open(waiting, "w").close()
        deadline = time.monotonic() + 60
        while not stopped and time.monotonic() < deadline:
            time.sleep(0.05)
    if os.environ["RANK"] != "0":
        sys.exit(0)
    out = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--benchmark_out=")]
    rate = 1000.0 * world * 0.9 ** math.log2(world)
    entries = [
        {"name": "%(step)s/manual_time", "run_name": "%(step)s/manual_time",
         "run_type": "iteration", "repetitions": 1, "repetition_index": 0, "threads": 1,
         "iterations": 5, "real_time": 8000.0 / rate, "cpu_time": 1.0, "time_unit": "s",
         "tokens/s": rate, **({"grad_buckets": 2, "comm_exposed_ms": 1.5 * world}
                               if world > 1 else {})},
        {"name": "%(fwd)s/manual_time", "run_name": "%(fwd)s/manual_time",
         "run_type": "iteration", "repetitions": 1, "repetition_index": 0, "threads": 1,
         "iterations": 5, "real_time": 1.0, "cpu_time": 1.0, "time_unit": "s",
         "tokens/s": 500.0}]
    if out and os.environ.get("FAKE_SKIP_AT") == str(world):
        sys.exit(3)  # fails before writing anything
    if out:
        with open(out[0], "w") as f:
            json.dump({"context": {"world_size": str(world), "date": "run %%d" %% world,
                                   "libtorch_version": "2.15.0"}, "benchmarks": entries}, f)
    sys.exit(1 if os.environ.get("FAKE_FAIL_AT") == str(world) or rank1_fails else 0)
    """) % {"step": STEP, "fwd": FWD}


def run_at(world, rate, counters=True, **context):
    extra = {"grad_buckets": 3, "comm_exposed_ms": 2.0 * world} if counters and world > 1 else {}
    return doc(entry(STEP, 8000.0 / rate, tokens_per_s=rate, **extra),
               entry(FWD, 10.0, tokens_per_s=400.0 / world),
               world_size=str(world), **context)


class ScalingToolTest(ToolTest):
    def merge(self, *docs, expect=0):
        paths = [self.write(f"run{i}.json", d) for i, d in enumerate(docs)]
        out = os.path.join(self.tmp, "merged.json")
        proc = self.run_tool("scaling", "--out", out, *paths)
        self.assertExit(proc, expect)
        with open(out) as f:
            return json.load(f), proc

    def test_efficiency_is_throughput_per_rank_over_one_ranks(self):
        merged, proc = self.merge(run_at(2, 1800.0, date="b"), run_at(1, 1000.0, date="a"),
                                  run_at(4, 3000.0, date="c"))
        by_name = {e["name"]: e for e in merged["benchmarks"]}
        self.assertEqual(list(by_name), [
            f"{STEP}/ranks:1/manual_time", f"{FWD}/ranks:1/manual_time",
            f"{STEP}/ranks:2/manual_time", f"{FWD}/ranks:2/manual_time",
            f"{STEP}/ranks:4/manual_time", f"{FWD}/ranks:4/manual_time"])
        step = {n: by_name[f"{STEP}/ranks:{n}/manual_time"] for n in (1, 2, 4)}
        self.assertEqual([step[n]["world_size"] for n in (1, 2, 4)], [1, 2, 4])
        self.assertEqual(step[1]["scaling_efficiency"], 1.0)
        self.assertAlmostEqual(step[2]["scaling_efficiency"], 1800 / (2 * 1000), places=12)
        self.assertAlmostEqual(step[4]["scaling_efficiency"], 3000 / (4 * 1000), places=12)
        # forward ran on each rank alone: no efficiency claimed for it.
        self.assertFalse(any("scaling_efficiency" in e for n, e in by_name.items()
                             if n.startswith(FWD)))
        self.assertEqual(merged["context"]["world_sizes"], "1,2,4")
        self.assertNotIn("world_size", merged["context"])
        self.assertEqual(merged["context"]["libtorch_version"], "2.15.0")
        self.assertEqual(step[2]["context"], {"date": "b"})  # a run's own stays with it
        self.assertEqual(len({e["family_index"] for e in merged["benchmarks"]}), 6)
        self.assertIn(f"| `{STEP}` | 1k tokens/s (100%) | 1.8k tokens/s (90%) | "
                      f"3k tokens/s (75%) | 8 ms |", proc.stdout)
        self.assertNotIn(f"`{FWD}`", proc.stdout)
        path = self.write("merged-again.json", merged)
        self.assertComparePyReads(path, path, f"{STEP}/ranks:2/manual_time")
        # report and plot read it as they read any result file.
        report = self.run_tool("report", "--format", "csv", path)
        self.assertExit(report, 0)
        self.assertIn(f"{STEP}/ranks:4", report.stdout)

    def test_bench_names_of_several_ranks_are_kept_as_they_are(self):
        # bench names a data-parallel run over N > 1 ranks .../ranks:N itself:
        # merged, it is not named twice, and pairs with the one-rank run.
        two = run_at(2, 1800.0)
        two["benchmarks"][0] = dict(two["benchmarks"][0],
                                    name=f"{STEP}/ranks:2/manual_time",
                                    run_name=f"{STEP}/ranks:2/manual_time")
        merged, proc = self.merge(run_at(1, 1000.0), two)
        names = [e["name"] for e in merged["benchmarks"]]
        self.assertEqual(names, [f"{STEP}/ranks:1/manual_time", f"{FWD}/ranks:1/manual_time",
                                 f"{STEP}/ranks:2/manual_time", f"{FWD}/ranks:2/manual_time"])
        step = merged["benchmarks"][2]
        self.assertEqual(step["world_size"], 2)
        self.assertAlmostEqual(step["scaling_efficiency"], 1800 / (2 * 1000), places=12)
        self.assertIn(f"| `{STEP}` | 1k tokens/s (100%) | 1.8k tokens/s (90%) |", proc.stdout)

    def test_a_bucket_size_pairs_with_one_rank_that_has_no_buckets(self):
        # One rank without a process group has no gradient buckets, so its
        # name has no /bucket_mb: --bucket_mb=1 left every run unpaired, and
        # scaling said no data-parallel benchmark was measured.
        one = doc(entry(STEP, 8.0, tokens_per_s=1000.0), world_size="1")
        two = doc(entry(STEP + "/bucket_mb:1/ranks:2", 9.0, tokens_per_s=1800.0,
                        grad_buckets=7, comm_exposed_ms=2.0), world_size="2")
        merged, proc = self.merge(one, two)
        by_name = {e["name"]: e for e in merged["benchmarks"]}
        self.assertAlmostEqual(
            by_name[f"{STEP}/bucket_mb:1/ranks:2/manual_time"]["scaling_efficiency"], 0.9)
        self.assertEqual(by_name[f"{STEP}/ranks:1/manual_time"]["scaling_efficiency"], 1.0)
        self.assertIn(f"| `{STEP}` | 1k tokens/s (100%) | 1.8k tokens/s (90%) | 2 ms |",
                      proc.stdout)

    def test_without_one_rank_the_fewest_ranks_are_the_base(self):
        merged, proc = self.merge(run_at(2, 2000.0), run_at(4, 3600.0))
        effs = {e["world_size"]: e["scaling_efficiency"] for e in merged["benchmarks"]
                if "scaling_efficiency" in e}
        self.assertEqual(effs[2], 1.0)
        self.assertAlmostEqual(effs[4], (3600 / 4) / (2000 / 2), places=12)
        self.assertIn("(90%)", proc.stdout)

    def test_medians_of_repetitions_and_aggregates_renamed(self):
        one = doc(repeated(STEP, [8.0, 8.0, 8.0], tokens_per_s=[900.0, 1000.0, 5000.0]),
                  world_size="1")
        two = doc(repeated(STEP, [8.0, 8.0, 8.0], tokens_per_s=[1600.0, 1700.0, 100.0],
                           grad_buckets=2), world_size="2")
        merged, _ = self.merge(one, two)
        names = [e["name"] for e in merged["benchmarks"]]
        self.assertIn(f"{STEP}/ranks:2/manual_time_median", names)
        self.assertEqual({e["world_size"] for e in merged["benchmarks"]}, {1, 2})
        eff = [e["scaling_efficiency"] for e in merged["benchmarks"]
               if e["world_size"] == 2 and e["run_type"] == "iteration"]
        self.assertEqual(eff, [1600 / (2 * 1000)] * 3)
        # Aggregates (mean, median, stddev, cv) carry none.
        self.assertFalse([e for e in merged["benchmarks"]
                          if e["run_type"] == "aggregate" and "scaling_efficiency" in e])

    def test_a_benchmark_missing_at_the_fewest_ranks_gets_no_efficiency(self):
        one = run_at(1, 1000.0)
        one["benchmarks"] = [e for e in one["benchmarks"] if not e["name"].startswith(STEP)]
        one["benchmarks"].append(entry(TRAIN2, 9.0, tokens_per_s=500.0))
        two = run_at(2, 1800.0)
        two["benchmarks"].append(entry(TRAIN2, 9.0, tokens_per_s=900.0, grad_buckets=1))
        four = run_at(4, 3000.0)
        merged, proc = self.merge(one, two, four)
        effs = {(e["name"].split("/")[1], e["world_size"]): e["scaling_efficiency"]
                for e in merged["benchmarks"] if "scaling_efficiency" in e}
        # The tiny step has no one-rank run: not measured against its two-rank one.
        self.assertEqual(set(effs), {("small", 1), ("small", 2)})
        self.assertAlmostEqual(effs[("small", 2)], 0.9, places=12)
        self.assertNotIn(f"`{STEP}`", proc.stdout)

    def test_every_world_size_is_read_by_one_counter(self):
        # One rank reported samples/s alone, two ranks tokens/s too: 12.8k
        # tokens/s over 100 samples/s read as 12.8k samples/s at 6400%. By
        # samples/s, which both report, two ranks scale at 190 / (2 x 100).
        one = doc(entry(STEP, 10.0, samples_per_s=100.0), world_size="1")
        two = doc(entry(STEP, 10.0, tokens_per_s=12800.0, samples_per_s=190.0, grad_buckets=3),
                  world_size="2")
        merged, proc = self.merge(one, two)
        effs = {e["world_size"]: e["scaling_efficiency"] for e in merged["benchmarks"]}
        self.assertEqual(effs[1], 1.0)
        self.assertAlmostEqual(effs[2], 190 / (2 * 100), places=12)
        self.assertIn(f"| `{STEP}` | 100 samples/s (100%) | 190 samples/s (95%) |", proc.stdout)
        # A world size without the fewest ranks' counter has no efficiency.
        two = doc(entry(STEP, 10.0, tokens_per_s=12800.0, grad_buckets=3), world_size="2")
        four = doc(entry(STEP, 10.0, samples_per_s=360.0, grad_buckets=3), world_size="4")
        merged, proc = self.merge(one, two, four)
        effs = {e["world_size"]: e.get("scaling_efficiency") for e in merged["benchmarks"]}
        self.assertEqual(effs, {1: 1.0, 2: None, 4: 360 / (4 * 100)})
        self.assertIn(f"| `{STEP}` | 100 samples/s (100%) | — | 360 samples/s (90%) |",
                      proc.stdout)

    def test_runs_that_differ_in_threads_are_named(self):
        # torchrun runs one world size at a time: one rank with 2 threads
        # and two ranks with 1 each measure threads as much as ranks, and
        # scaling said nothing.
        _, proc = self.merge(run_at(1, 1000.0, intra_op_threads="2"),
                             run_at(2, 1800.0, intra_op_threads="1"))
        self.assertIn("scaling: the runs differ in intra_op_threads: 2 at 1 rank, 1 at 2 ranks: "
                      "the efficiency is not the ranks' alone", proc.stderr)
        _, proc = self.merge(run_at(1, 1000.0, intra_op_threads="1"),
                             run_at(2, 1800.0, intra_op_threads="1"))
        self.assertNotIn("differ", proc.stderr)

    def test_aggregates_alone_are_named(self):
        # --benchmark_report_aggregates_only: nothing to read a throughput
        # from, and scaling said no data-parallel benchmark was measured.
        def aggregates(d):
            d["benchmarks"] = [dict(e, run_type="aggregate", aggregate_name="mean",
                                    name=e["name"] + "_mean") for e in d["benchmarks"]]
            return d
        _, proc = self.merge(aggregates(run_at(1, 1000.0)), aggregates(run_at(2, 1800.0)),
                             expect=2)
        self.assertIn("4 reported by their aggregates alone (--benchmark_report_aggregates_only)"
                      ", with no repetition to read", proc.stderr)
        self.assertIn(f"scaling: aggregates alone, no repetition to read, left out: "
                      f"{STEP}/ranks:2", proc.stderr)

    def test_compiled_benchmarks_keep_their_eager_twin(self):
        docs = []
        for ranks in (1, 2):
            docs.append(doc(entry(FWD, 10.0, tokens_per_s=100.0),
                            entry(FWD + "/aoti", 5.0, tokens_per_s=200.0, compile_s=3.0),
                            entry(STEP, 8.0, tokens_per_s=1000.0 * ranks,
                                  **({"grad_buckets": 1} if ranks > 1 else {})),
                            world_size=str(ranks)))
        merged, _ = self.merge(*docs)
        path = self.write("merged-compiled.json", merged)
        proc = self.run_tool("report", path)
        self.assertExit(proc, 0)
        self.assertIn(f"| `{FWD}/ranks:2` | aoti | 10 ms | 5 ms | 2.00x |", proc.stdout)

    def test_errored_entries_are_kept_and_listed(self):
        two = run_at(2, 1800.0)
        two["benchmarks"].append(entry(STEP.replace("tiny", "small"), 0.0, error="out of memory"))
        merged, proc = self.merge(run_at(1, 1000.0), two)
        errored = [e for e in merged["benchmarks"] if e.get("error_occurred")]
        self.assertEqual([e["name"] for e in errored],
                         [f"{STEP.replace('tiny', 'small')}/ranks:2/manual_time"])
        self.assertIn("out of memory", proc.stderr)

    def test_bad_input(self):
        proc = self.run_tool("scaling", self.write("a.json", run_at(2, 1.0)),
                             self.write("b.json", run_at(2, 2.0)))
        self.assertExit(proc, 2)
        self.assertIn("a second run at 2 ranks", proc.stderr)
        proc = self.run_tool("scaling", self.write("c.json", run_at(1, 1.0)),
                             self.write("d.json", run_at(2, 2.0, counters=False)))
        self.assertExit(proc, 2)
        self.assertIn("no data-parallel benchmark", proc.stderr)
        self.assertIn("world sizes 1,2", proc.stderr)
        proc = self.run_tool("scaling", self.write("e.json", run_at(1, 1.0)),
                             self.write("f.json", doc(world_size="two")))
        self.assertExit(proc, 2)
        self.assertIn("'two' is not a number of ranks", proc.stderr)
        for path in self.bad_inputs():
            self.assertExit(self.run_tool("scaling", path, self.write("g.json", run_at(1, 1.0))),
                            2)


class LaunchTest(ToolTest):
    def setUp(self):
        super().setUp()
        self.program = self.write("fake_rank.py", FAKE_RANK)
        self.log = os.path.join(self.tmp, "ranks.jsonl")

    def launch(self, *args, env=None, program_args=(), unset=()):
        """tools/launch ARGS over the stand-in rank, given --x=1 and
        program_args; OMP_NUM_THREADS and the unset variables removed from
        this environment, env added."""
        full = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", *unset)}
        full.update(FAKE_RANKS_LOG=self.log, **(env or {}))
        return subprocess.run([LAUNCH, *args, sys.executable, self.program, "--x=1",
                               *program_args],
                              capture_output=True, text=True, timeout=120, env=full)

    def ranks(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [json.loads(line) for line in f]

    def test_a_list_runs_each_world_size_and_merges(self):
        out = os.path.join(self.tmp, "res", "s.json")
        proc = self.launch("--nproc_per_node=1,2,4", f"--scaling_out={out}")
        self.assertExit(proc, 0)
        ranks = self.ranks()
        self.assertEqual(sorted((r["WORLD_SIZE"], r["RANK"]) for r in ranks), sorted(
            [("1", "0"), ("2", "0"), ("2", "1")] + [("4", str(i)) for i in range(4)]))
        for r in ranks:
            self.assertEqual(r["LOCAL_WORLD_SIZE"], r["WORLD_SIZE"])
            self.assertEqual(r["MASTER_ADDR"], "127.0.0.1")
            self.assertEqual(r["args"][0], "--x=1")
            self.assertEqual(r["args"][1:], [f"--benchmark_out={out[:-5]}.ranks{r['WORLD_SIZE']}"
                                             f".json", "--benchmark_out_format=json"])
        # One thread count for every rank of every run: each rank its share.
        threads = {r["OMP_NUM_THREADS"] for r in ranks}
        self.assertEqual(len(threads), 1)
        self.assertGreaterEqual(int(threads.pop()), 1)
        ports = {r["WORLD_SIZE"]: r["MASTER_PORT"] for r in ranks}
        self.assertEqual(len(set(ports.values())), 3)
        for n in (1, 2, 4):
            self.assertTrue(os.path.exists(f"{out[:-5]}.ranks{n}.json"))
        with open(out) as f:
            merged = json.load(f)
        effs = {e["world_size"]: e["scaling_efficiency"] for e in merged["benchmarks"]
                if "scaling_efficiency" in e}
        self.assertEqual(effs[1], 1.0)
        self.assertAlmostEqual(effs[2], 0.9, places=12)
        self.assertAlmostEqual(effs[4], 0.81, places=12)
        self.assertIn(f"| `{STEP}` | 1k tokens/s (100%) | 1.8k tokens/s (90%) | "
                      f"3.24k tokens/s (81%) | 6 ms |", proc.stdout)

    def test_the_first_rank_to_fail_stops_the_others_whichever_it_is(self):
        # Rank 1 fails while rank 0 waits for it: the launcher sees rank 1
        # first and stops rank 0 at once, which writes what it measured.
        out = os.path.join(self.tmp, "out.json")
        start = time.monotonic()
        proc = self.launch("--nproc_per_node=2", env={"FAKE_RANK1_FAILS": "1"},
                           program_args=(f"--benchmark_out={out}",))
        self.assertLess(time.monotonic() - start, 30, "rank 0 was waited out, not stopped")
        self.assertExit(proc, 4)
        self.assertIn("launch: rank 1 exited with status 4; stopping the other ranks",
                      proc.stderr)
        with open(out) as f:
            self.assertEqual(len(json.load(f)["benchmarks"]), 2)

    def test_a_given_port_and_thread_count(self):
        out = os.path.join(self.tmp, "s.json")
        proc = self.launch("--nproc_per_node=1,2", "--master_port=31000",
                           f"--scaling_out={out}", env={"OMP_NUM_THREADS": "3"})
        self.assertExit(proc, 0)
        self.assertEqual({(r["WORLD_SIZE"], r["MASTER_PORT"]) for r in self.ranks()},
                         {("1", "31000"), ("2", "31001")})
        self.assertEqual({r["OMP_NUM_THREADS"] for r in self.ranks()}, {"3"})

    def test_a_failing_world_size_keeps_the_others(self):
        out = os.path.join(self.tmp, "s.json")
        proc = self.launch("--nproc_per_node=1,2", f"--scaling_out={out}",
                           env={"FAKE_FAIL_AT": "1"})
        self.assertExit(proc, 1)
        self.assertEqual({r["WORLD_SIZE"] for r in self.ranks()}, {"1", "2"})
        with open(out) as f:
            self.assertEqual(json.load(f)["context"]["world_sizes"], "1,2")

    def test_gpu_counts_the_visible_gpus(self):
        proc = self.launch("--nproc_per_node=gpu", env={"CUDA_VISIBLE_DEVICES": "0,1,-1,3"})
        self.assertExit(proc, 0)
        self.assertEqual(sorted(r["RANK"] for r in self.ranks()), ["0", "1"])
        # The user's own CUDA_VISIBLE_DEVICES is left as it is.
        self.assertEqual({r["CUDA_VISIBLE_DEVICES"] for r in self.ranks()}, {"0,1,-1,3"})
        # Without CUDA_VISIBLE_DEVICES: what nvidia-smi -L lists.
        smi = os.path.join(self.tmp, "bin", "nvidia-smi")
        os.makedirs(os.path.dirname(smi))
        with open(smi, "w") as f:
            f.write("#!/bin/sh\nfor i in 0 1 2; do echo \"GPU $i: NVIDIA H100 (UUID: GPU-$i)\"; "
                    "done\n")
        os.chmod(smi, 0o755)
        os.remove(self.log)
        proc = self.launch("--nproc_per_node=gpu", unset=("CUDA_VISIBLE_DEVICES",),
                           env={"PATH": f"{os.path.dirname(smi)}:{os.environ['PATH']}"})
        self.assertExit(proc, 0)
        self.assertEqual(sorted(r["RANK"] for r in self.ranks()), ["0", "1", "2"])
        # Each rank sees its own GPU alone, as cuda:0: every rank names it cuda.
        self.assertEqual({(r["LOCAL_RANK"], r["CUDA_VISIBLE_DEVICES"]) for r in self.ranks()},
                         {("0", "0"), ("1", "1"), ("2", "2")})

    def test_a_stale_run_is_never_merged_and_one_size_is_no_sweep(self):
        out = os.path.join(self.tmp, "s.json")
        stale = os.path.join(self.tmp, "s.ranks2.json")
        with open(stale, "w") as f:
            json.dump(run_at(2, 5000.0), f)
        proc = self.launch("--nproc_per_node=1,2", f"--scaling_out={out}",
                           env={"FAKE_SKIP_AT": "2"})
        self.assertExit(proc, 3)
        self.assertFalse(os.path.exists(stale))
        self.assertIn("the run at 2 ranks left no readable results (exit status 3)", proc.stderr)
        self.assertIn("one world size measured", proc.stderr)
        self.assertFalse(os.path.exists(out))
        # Leading zeros are decimal, not octal.
        os.remove(self.log)
        self.assertExit(self.launch("--nproc_per_node=010"), 0)
        self.assertEqual(len(self.ranks()), 10)

    def test_bad_input(self):
        cases = [  # (launcher arguments, program arguments, environment, message)
            (["--nproc_per_node=gpu"], [], {"CUDA_VISIBLE_DEVICES": ""}, "found no visible GPU"),
            (["--nproc_per_node=1,x"], [], {}, "'x' is not a number of ranks"),
            (["--nproc_per_node=0"], [], {}, "'0' is not a number of ranks"),
            (["--nproc_per_node=2,2"], [], {}, "lists 2 twice"),
            (["--nproc_per_node=1,2"], ["--benchmark_out=a.json"], {},
             "drop --benchmark_out=a.json"),
            (["--nnodes=2", "--node_rank=2"], [], {}, "must be below --nnodes=2"),
            (["--nnodes=2", "--node_rank=1"], [], {}, "give every node the same --master_port"),
            (["--nproc=2"], [], {}, "unknown option --nproc"),
        ]
        for args, program_args, env, message in cases:
            with self.subTest(args=args):
                proc = self.launch(*args, env=env, program_args=program_args)
                self.assertExit(proc, 2)
                self.assertIn(message, proc.stderr)
                self.assertEqual(self.ranks(), [])
