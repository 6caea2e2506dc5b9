"""tools/report's numbers on fixture JSON files."""
import csv
import io
import unittest

from tests.helpers import ToolTest, doc, entry, repeated

FWD = "Transformer/nano/cpu/forward/batch:2/seq:32/fp32"
GEN = "GPT2/nano/cpu/generate/batch:1/prompt:32/new:100/fp32"
EPOCH = "EncDec/tiny/cuda/train_epoch/batch:32/seq:128/fp32"
IMG = "ResNet/resnet18/cuda/forward/batch:32/fp32"


class ReportTest(ToolTest):
    def csv_rows(self, *args):
        proc = self.run_tool("report", "--format", "csv", *args)
        self.assertExit(proc, 0)
        return list(csv.DictReader(io.StringIO(proc.stdout)))

    def test_one_file_medians_counters_and_memory(self):
        path = self.write("run.json", doc(
            repeated(FWD, [30.0, 10.0, 20.0], tokens_per_s=[2000.0, 6000.0, 3000.0],
                     FLOP_per_s=1e9, peak_mem=[2048.0, 2048.0, 4096.0]),
            entry(GEN, 500.0, tokens_per_s=200.0, ttft_ms=12.5, tpot_ms=4.9)))
        rows = self.csv_rows(path)
        self.assertEqual([r["benchmark"] for r in rows], [FWD, GEN])
        fwd, gen = rows
        self.assertEqual(float(fwd["median_s"]), 0.02)
        self.assertEqual(fwd["repetitions"], "3")
        self.assertEqual(float(fwd["tokens/s"]), 3000.0)
        self.assertEqual(float(fwd["FLOP/s"]), 1e9)
        self.assertEqual(float(fwd["peak_mem_bytes"]), 2048.0)
        self.assertEqual(float(gen["ttft_ms"]), 12.5)
        self.assertEqual(float(gen["tpot_ms"]), 4.9)
        self.assertNotIn("speedup", fwd)
        proc = self.run_tool("report", path)
        self.assertExit(proc, 0)
        self.assertIn(f"| `{FWD}` | 3 | 20 ms | 3k tokens/s | 1G FLOP/s | — | — | 2 KiB |",
                      proc.stdout)

    def test_generation_as_llama_bench_reports_it(self):
        # pp and tg at depth 0 and 1024: mean and sample standard deviation
        # over three repetitions; the size is params x the dtype's bytes.
        at0 = "Llama/1B/cpu/generate/batch:1/prompt:32/new:17/bf16"
        at1k = "Llama/1B/cpu/generate/batch:1/prompt:32/new:17/depth:1024/bf16"
        path = self.write("run.json", doc(
            repeated(at0, [900.0, 900.0, 900.0], pp_tok_per_s=[200.0, 220.0, 240.0],
                     tg_tok_per_s=[9.0, 10.0, 11.0], params=1235814400.0),
            repeated(at1k, [999.0], pp_tok_per_s=100.0, tg_tok_per_s=8.5,
                     params=1235814400.0),
            entry(FWD, 10.0, tokens_per_s=1.0), intra_op_threads="2"))
        proc = self.run_tool("report", path)
        self.assertExit(proc, 0)
        table = proc.stdout.split("Generation as llama-bench reports it", 1)[1]
        self.assertIn("| Llama 1B | 2.30 GiB | 1.236G | cpu | bf16 | 2 | pp32 | 220.00 ± 20.00 |",
                      table)
        self.assertIn("| Llama 1B | 2.30 GiB | 1.236G | cpu | bf16 | 2 | tg16 | 10.00 ± 1.00 |",
                      table)
        self.assertIn("| pp32 @ d1024 | 100.00 |", table)
        self.assertIn("| tg16 @ d1024 | 8.50 |", table)
        self.assertNotIn("Transformer", table)

    def test_generation_variants_are_rows_of_their_own(self):
        # The same model in fp32, quantised to int8 and replayed as CUDA
        # graphs: three rows each saying which it is. The int8 model's
        # weights do not take fp32's 4 bytes (no size, rather than 4 x
        # params); a model under a GiB is given in MiB, not as 0.00 GiB.
        gen = "GPT2/nano/cpu/generate/batch:1/prompt:32/new:8/fp32"
        path = self.write("run.json", doc(
            repeated(gen, [100.0], pp_tok_per_s=300.0, tg_tok_per_s=90.0, params=229632.0),
            repeated(gen + "/int8", [100.0], pp_tok_per_s=200.0, tg_tok_per_s=40.0,
                     params=229632.0),
            repeated(gen + "/graph", [100.0], pp_tok_per_s=310.0, tg_tok_per_s=95.0,
                     params=229632.0), intra_op_threads="2"))
        proc = self.run_tool("report", path)
        self.assertExit(proc, 0)
        table = proc.stdout.split("Generation as llama-bench reports it", 1)[1]
        self.assertIn("| GPT2 nano | 0.88 MiB | 229.6k | cpu | fp32 | 2 | tg7 | 90.00 |", table)
        self.assertIn("| GPT2 nano | — | 229.6k | cpu | fp32/int8 | 2 | tg7 | 40.00 |", table)
        self.assertIn("| GPT2 nano | 0.88 MiB | 229.6k | cpu | fp32/graph | 2 | tg7 | 95.00 |",
                      table)

    def test_a_percentage_short_of_100_is_not_shown_as_100(self):
        # 99.96% of the greedy tokens matching is a mismatch, which three
        # significant digits would round away.
        name = "GPT2/nano/cpu/generate/batch:1/prompt:32/new:8/fp32/int8"
        path = self.write("run.json", doc(
            entry(name, 100.0, **{"token_match_%": 99.96, "same_top1_%": 100.0})))
        proc = self.run_tool("report", path)
        self.assertExit(proc, 0)
        self.assertIn("| 100% | 99.96% |", proc.stdout)

    def test_the_spread_of_steps_inside_a_run(self):
        # cs336's table: the mean step (the time), its standard deviation and
        # their ratio; a 40 ms mean with a 5% coefficient of variation has a
        # 2 ms standard deviation.
        path = self.write("run.json", doc(
            entry(FWD, 40.0, **{"step_cv_%": 5.0, "step_p50_ms": 39.0, "step_p90_ms": 43.0,
                                "step_p99_ms": 47.5}),
            entry(GEN, 500.0)))
        fwd, gen = self.csv_rows(path)
        self.assertAlmostEqual(float(fwd["step_sd_ms"]), 2.0)
        self.assertEqual(float(fwd["step_cv_%"]), 5.0)
        self.assertEqual(float(fwd["step_p50_ms"]), 39.0)
        self.assertEqual(float(fwd["step_p99_ms"]), 47.5)
        self.assertEqual(gen["step_sd_ms"], "", "no spread where the run has none")

    def test_a_run_of_one_step_shows_its_percentiles(self):
        # A step longer than the minimum time runs once: bench writes its
        # percentiles (the one step's time) and no cv; the table shows them.
        path = self.write("run.json", doc(
            entry(FWD, 71.8, **{"step_p50_ms": 71.8, "step_p90_ms": 71.8,
                                "step_p99_ms": 71.8})))
        fwd, = self.csv_rows(path)
        self.assertEqual(float(fwd["step_p50_ms"]), 71.8)
        self.assertEqual(float(fwd["step_p99_ms"]), 71.8)
        self.assertEqual(fwd.get("step_sd_ms", ""), "", "no cv, so no standard deviation")

    def test_a_benchmark_reported_by_its_aggregates_alone_is_named(self):
        # --benchmark_report_aggregates_only writes no repetition: the
        # benchmark has no row, and the report says why rather than drop it.
        aggregates = [e for e in repeated(GEN, [500.0, 510.0], tokens_per_s=200.0)
                      if e["run_type"] == "aggregate"]
        path = self.write("run.json", doc(repeated(FWD, [30.0, 10.0]), aggregates))
        proc = self.run_tool("report", path)
        self.assertExit(proc, 0)
        self.assertNotIn(f"| `{GEN}` |", proc.stdout)
        self.assertIn("Reported by their aggregates alone (mean, median, ...: "
                      "--benchmark_report_aggregates_only), with no repetition to report:\n"
                      f"- `{GEN}` (run)", proc.stdout)
        proc = self.run_tool("report", "--format", "csv", path)
        self.assertExit(proc, 0)
        self.assertIn(f"report: aggregates alone, no repetition to report: `{GEN}` (run)",
                      proc.stderr)
        only = self.write("only.json", doc(aggregates))
        proc = self.run_tool("report", only)
        self.assertExit(proc, 2)
        self.assertIn(f"no measured benchmark in {only}: 1 reported by their aggregates alone",
                      proc.stderr)

    def test_the_spread_of_steps_is_the_median_repetitions(self):
        # Each repetition's standard deviation is its own mean step times its
        # own cv: 10 ms x 30% = 3 ms, 20 ms x 5% = 1 ms, 40 ms x 10% = 4 ms,
        # whose median is 3 ms; the median time by the median cv (20 ms x
        # 10% = 2 ms) is no repetition's.
        path = self.write("run.json", doc(
            repeated(FWD, [10.0, 20.0, 40.0], **{"step_cv_%": [30.0, 5.0, 10.0]})))
        (fwd,) = self.csv_rows(path)
        self.assertAlmostEqual(float(fwd["step_sd_ms"]), 3.0)
        self.assertEqual(float(fwd["step_cv_%"]), 10.0)
        self.assertEqual(float(fwd["median_s"]), 0.02)

    def test_accuracy_counters_the_divergence_first(self):
        # A bf16 generation checked against fp32: the teacher-forced KL and
        # same-top-1 before token_match_%, whatever order the file has.
        bf16 = GEN.replace("/fp32", "/bf16")
        path = self.write("run.json", doc(
            entry(GEN, 500.0, tokens_per_s=200.0),
            entry(bf16, 250.0, tokens_per_s=400.0, **{
                "token_match_%": 15.0, "same_top1_%": 97.5, "kld_max": 0.02,
                "kld_p99": 0.004, "kld_mean": 3.2e-4})))
        proc = self.run_tool("report", path)
        self.assertExit(proc, 0)
        self.assertIn("| benchmark | reps | median time | tokens/s | kld_mean | kld_p99 | kld_max "
                      "| same_top1_% | token_match_% |", proc.stdout)
        self.assertIn(f"| `{bf16}` | 1 | 250 ms | 400 tokens/s | 0.00032 | 0.004 | 0.02 | 97.5% "
                      "| 15% |", proc.stdout)
        self.assertIn(f"| `{GEN}` | 1 | 500 ms | 200 tokens/s | — | — | — | — | — |", proc.stdout)
        gen, row = self.csv_rows(path)
        self.assertEqual(float(row["kld_mean"]), 3.2e-4)
        self.assertEqual(float(row["same_top1_%"]), 97.5)
        self.assertEqual(gen["kld_mean"], "")

    def test_a_quantised_run_shows_its_top1_agreement(self):
        # An int8 generation: the teacher-forced same_top1_% against fp32
        # unquantised and top1_agree_% against the same dtype unquantised
        # (the prompt's logits) are two counters, each with its column, the
        # divergence first and the greedy tokens' match last.
        int8 = GEN + "/int8"
        path = self.write("run.json", doc(
            entry(GEN, 500.0, tokens_per_s=200.0),
            entry(int8, 250.0, tokens_per_s=400.0, **{
                "token_match_%": 50.0, "top1_agree_%": 87.5, "rel_err": 0.12,
                "same_top1_%": 97.5, "kld_mean": 3.2e-4})))
        proc = self.run_tool("report", path)
        self.assertExit(proc, 0)
        self.assertIn("| benchmark | reps | median time | tokens/s | kld_mean | same_top1_% "
                      "| top1_agree_% | token_match_% | rel_err |", proc.stdout)
        self.assertIn(f"| `{int8}` | 1 | 250 ms | 400 tokens/s | 0.00032 | 97.5% | 87.5% | 50% "
                      "| 0.12 |", proc.stdout)
        gen, row = self.csv_rows(path)
        self.assertEqual(float(row["top1_agree_%"]), 87.5)
        self.assertEqual(float(row["same_top1_%"]), 97.5)
        self.assertEqual(gen["top1_agree_%"], "")

    def test_compiled_against_eager(self):
        # AOTInductor at 2x eager's speed with 0.8x its memory; TorchScript
        # at eager's speed.
        path = self.write("run.json", doc(
            entry(FWD, 20.0, peak_mem=4096.0),
            entry(FWD + "/aoti", 10.0, peak_mem=5120.0, compile_s=41.5, rel_err=2e-7),
            entry(FWD + "/torchscript", 20.0, peak_mem=4096.0, compile_s=0.2, rel_err=0.0),
            entry(IMG + "/aoti", 5.0, compile_s=9.0)))  # no eager twin: no comparison
        proc = self.run_tool("report", path)
        self.assertExit(proc, 0)
        self.assertIn("Compiled against eager", proc.stdout)
        self.assertIn(f"| `{FWD}` | aoti | 20 ms | 10 ms | 2.00x | 0.80x | 41.5 s | 2e-07 |",
                      proc.stdout)
        self.assertIn(f"| `{FWD}` | torchscript | 20 ms | 20 ms | 1.00x | 1.00x | 0.2 s | 0 |",
                      proc.stdout)
        self.assertNotIn(f"| `{IMG}` |", proc.stdout.split("Compiled against eager")[1])
        rows = {r["benchmark"]: r for r in self.csv_rows(path)}
        self.assertEqual(float(rows[FWD + "/aoti"]["compile_s"]), 41.5)

    def test_speedup_of_several_machines_against_the_first(self):
        a = self.write("a100.json", doc(entry(FWD, 200.0), entry(GEN, 1000.0)))
        b = self.write("h100.json", doc(entry(FWD, 50.0), entry(GEN, 400.0)))
        c = self.write("cpu.json", doc(entry(FWD, 800.0)))
        rows = self.csv_rows(a, b, c)
        speedups = {(r["benchmark"], r["file"]): float(r["speedup"]) for r in rows}
        self.assertEqual(speedups, {(FWD, "a100"): 1.0, (FWD, "h100"): 4.0, (FWD, "cpu"): 0.25,
                                    (GEN, "a100"): 1.0, (GEN, "h100"): 2.5})
        proc = self.run_tool("report", a, b)
        self.assertExit(proc, 0)
        self.assertIn(f"| `{FWD}` | h100 | 1 | 50 ms | 4.00x |", proc.stdout)

    def test_cost_per_million_tokens_and_samples(self):
        # 3.60 per device-hour is 0.001 per second: at 1000 tokens/s, 1M
        # tokens take 1000 s and cost 1.00.
        a = self.write("a.json", doc(entry(FWD, 64.0, tokens_per_s=1000.0),
                                     entry(IMG, 100.0, samples_per_s=320.0)))
        # Two ranks (from the context) at 7.20 a device: a data-parallel
        # train_step's tokens/s sums both, 0.004 per second; at 2000 tokens/s,
        # 2.00 per 1M tokens. The forwards ran on each rank alone and report
        # rank 0's device's: 0.002 per second.
        train = FWD.replace("/forward/", "/train_step/")
        b = self.write("b.json", doc(entry(FWD, 32.0, tokens_per_s=2000.0),
                                     entry(train, 32.0, tokens_per_s=2000.0, grad_buckets=2),
                                     entry(IMG, 50.0, samples_per_s=640.0), world_size="2"))
        rows = self.csv_rows(a, b, "--cost", "3.60", "7.20")
        cost = {(r["benchmark"], r["file"]): r for r in rows}
        self.assertAlmostEqual(float(cost[FWD, "a"]["cost/1M tokens"]), 1.0, places=12)
        self.assertAlmostEqual(float(cost[FWD, "b"]["cost/1M tokens"]), 1.0, places=12)
        self.assertAlmostEqual(float(cost[train, "b"]["cost/1M tokens"]), 2.0, places=12)
        self.assertAlmostEqual(float(cost[IMG, "a"]["cost/1M samples"]), 3.125, places=12)
        self.assertAlmostEqual(float(cost[IMG, "b"]["cost/1M samples"]), 3.125, places=12)
        self.assertEqual(cost[FWD, "a"]["cost/1M samples"], "")
        # The device count given overrides the context's.
        rows = self.csv_rows(a, b, "--cost", "3.60", "7.20", "--device-count", "1", "1")
        self.assertAlmostEqual(float(rows[1]["cost/1M tokens"]), 1.0, places=12)
        proc = self.run_tool("report", a, b, "--cost", "3.60", "7.20")
        self.assertExit(proc, 0)
        self.assertIn("| cost/1M tokens | cost/1M samples |", proc.stdout)
        self.assertIn("| 1 | — |", proc.stdout)

    def test_cost_per_epoch_of_train_epoch_runs(self):
        path = self.write("epoch.json", doc(
            entry(EPOCH, 1_800_000.0, samples_per_s=100.0, epoch_s=1800.0),
            entry(FWD, 10.0, tokens_per_s=6400.0)))
        rows = self.csv_rows(path, "--cost", "2.00", "--device-count", "8")
        epoch, fwd = rows
        # 1800 s on 8 devices at 2.00 per device-hour.
        self.assertAlmostEqual(float(epoch["cost/epoch"]), 8.0, places=12)
        self.assertEqual(fwd["cost/epoch"], "")
        # Without an epoch_s counter, one iteration is one epoch.
        path = self.write("epoch2.json", doc(entry(EPOCH, 900_000.0, samples_per_s=100.0)))
        rows = self.csv_rows(path, "--cost", "4.00")
        self.assertAlmostEqual(float(rows[0]["cost/epoch"]), 1.0, places=12)

    def test_errored_entries_and_device_speedup(self):
        cpu_gen = GEN
        cuda_gen = GEN.replace("/cpu/", "/cuda/")
        path = self.write("run.json", doc(
            entry(cpu_gen, 500.0, tokens_per_s=10.0), entry(cpu_gen, 500.0, tokens_per_s=30.0),
            entry(cuda_gen, 100.0, tokens_per_s=54.0),
            entry("Ops/matmul/2048x2048/cuda/fp32", 0.0, error="no CUDA device")))
        proc = self.run_tool("report", path)
        self.assertExit(proc, 0)
        self.assertIn("Errored:\n- `Ops/matmul/2048x2048/cuda/fp32` (run): no CUDA device",
                      proc.stdout)
        self.assertIn("Speedup: 2.70x (cuda vs cpu)", proc.stdout)
        self.assertNotIn("| `Ops/matmul", proc.stdout)
        proc = self.run_tool("report", "--format", "csv", path)
        self.assertIn("errored `Ops/matmul/2048x2048/cuda/fp32`", proc.stderr)
        self.assertNotIn("Ops/matmul", proc.stdout)

    def test_bad_input_exits_2(self):
        good = self.write("good.json", doc(entry(FWD, 1.0)))
        for bad in self.bad_inputs():
            proc = self.run_tool("report", good, bad)
            self.assertExit(proc, 2)
            self.assertIn(bad, proc.stderr)
        for args in (("--cost", "1", "2"), ("--device-count", "2"), ("--cost", "x"),
                     ("--cost", "1", "--device-count", "0")):
            self.assertExit(self.run_tool("report", good, *args), 2)
        only_errors = self.write("errors.json", doc(entry(FWD, 0.0, error="out of memory")))
        proc = self.run_tool("report", only_errors)
        self.assertExit(proc, 2)
        self.assertIn("no measured benchmark", proc.stderr)


if __name__ == "__main__":
    unittest.main()
