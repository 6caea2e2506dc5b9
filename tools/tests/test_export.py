"""tools/export's github-action-benchmark and Bencher formats."""
import json
import unittest

from tests.helpers import ToolTest, built_bench, doc, entry, repeated

FWD = "Transformer/nano/cpu/forward/batch:2/seq:32/fp32"
GEN = "GPT2/nano/cpu/generate/batch:1/prompt:32/new:100/fp32"
BROKEN = "Ops/matmul/2048x2048/cuda/fp32"


class ExportTest(ToolTest):
    def setUp(self):
        super().setUp()
        self.path = self.write("run.json", doc(
            repeated(FWD, [10.0, 12.0, 11.0], tokens_per_s=[6400.0, 5333.0, 5818.0],
                     peak_mem=2048.0),
            entry(GEN, 500.0, tokens_per_s=200.0, tg_tok_per_s=210.0, ttft_ms=12.5),
            entry(BROKEN, 1.0, error="no CUDA device", FLOP_per_s=1.0)))

    def export(self, fmt, *args):
        proc = self.run_tool("export", fmt, self.path, *args)
        self.assertExit(proc, 0)
        return json.loads(proc.stdout)

    def test_bigger_is_better_has_the_throughput_counters(self):
        entries = {e["name"]: e for e in self.export("bigger")}
        self.assertEqual(sorted(entries), sorted([
            f"{FWD} - tokens/s", f"{GEN} - tg_tok/s", f"{GEN} - tokens/s"]))
        fwd = entries[f"{FWD} - tokens/s"]
        self.assertEqual(fwd["unit"], "tokens/s")
        self.assertEqual(fwd["value"], 5818.0)
        self.assertTrue(fwd["range"].startswith("± "))
        self.assertEqual(fwd["extra"], "median of 3 repetitions")
        self.assertNotIn("range", entries[f"{GEN} - tokens/s"])

    def test_smaller_is_better_has_time_and_memory(self):
        entries = {e["name"]: e for e in self.export("smaller")}
        self.assertEqual(entries[f"{FWD} - time"], {
            "name": f"{FWD} - time", "unit": "ms", "value": 11.0, "range": "± 1",
            "extra": "median of 3 repetitions"})
        self.assertEqual(entries[f"{FWD} - peak_mem"]["unit"], "bytes")
        self.assertEqual(entries[f"{GEN} - ttft_ms"]["value"], 12.5)
        self.assertFalse(any(BROKEN in name for name in entries))
        self.assertFalse(any("_mean" in name or "_median" in name for name in entries))

    def test_bencher_metric_format(self):
        out = self.run_tool("export", "bencher", self.path, "-o", self.tmp + "/bmf.json")
        self.assertExit(out, 0)
        with open(self.tmp + "/bmf.json") as f:
            bmf = json.load(f)
        self.assertEqual(sorted(bmf), sorted([FWD, GEN]))
        self.assertEqual(bmf[FWD]["latency"], {"value": 11e6, "lower_value": 10e6,
                                               "upper_value": 12e6})
        self.assertEqual(bmf[FWD]["tokens-per-second"]["value"], 5818.0)
        self.assertEqual(bmf[FWD]["peak-mem"]["value"], 2048.0)
        self.assertIn("tg-tok-per-second", bmf[GEN])
        self.assertIn("ttft-ms", bmf[GEN])

    def test_bad_input_exits_2(self):
        for bad in self.bad_inputs():
            self.assertExit(self.run_tool("export", "bigger", bad), 2)
        self.assertExit(self.run_tool("export", "csv", self.path), 2)
        no_counters = self.write("plain.json", doc(entry("Ops/noop/empty/cpu/fp32", 1e-5)))
        proc = self.run_tool("export", "bigger", no_counters)
        self.assertExit(proc, 2)
        self.assertIn("no measured benchmark with throughput counters", proc.stderr)

    def test_a_benchmark_reported_by_its_aggregates_alone_is_named(self):
        aggregates = [e for e in repeated(GEN, [500.0, 510.0], tokens_per_s=200.0)
                      if e["run_type"] == "aggregate"]
        path = self.write("agg.json", doc(repeated(FWD, [10.0, 12.0]), aggregates))
        proc = self.run_tool("export", "smaller", path)
        self.assertExit(proc, 0)
        self.assertEqual([e["name"] for e in json.loads(proc.stdout)], [f"{FWD} - time"])
        self.assertIn(f"export: {path}: {GEN} has only aggregates (mean, median, ...), no "
                      "repetition: left out", proc.stderr)
        only = self.write("only.json", doc(aggregates))
        proc = self.run_tool("export", "bigger", only)
        self.assertExit(proc, 2)
        self.assertIn("no measured benchmark with throughput counters; run bench without "
                      "--benchmark_report_aggregates_only", proc.stderr)


if __name__ == "__main__":
    unittest.main()


class ModelExportTest(ToolTest):
    """tools/export's model formats: the input checks (compiling is tested end
    to end in test/e2e, where bench runs the files)."""

    def test_bad_input_exits_2_naming_the_valid_choices(self):
        # The tool's main in this process: torch loaded once, not once a case.
        from ltb.commands.export import main
        for args, expected in (
                (["aoti", "Mamba", "nano"], "unknown family 'Mamba'; valid: Transformer, GPT2"),
                (["aoti", "GPT2", "huge"], "unknown GPT2 size 'huge'; valid: nano, small"),
                (["torchscript", "CNN", "nano", "--batch=0"], "--batch must be positive"),
                (["aoti", "CNN", "nano", "--device=tpu"], "valid: cpu, cuda, cuda:N")):
            proc = self.run_main("export", main, *args, "--out", self.tmp)
            self.assertExit(proc, 2)
            self.assertIn(expected, proc.stderr, args)

    def test_names_follow_the_eager_benchmark(self):
        from ltb.commands import export as tool
        self.assertEqual(tool.benchmark_name("Transformer", "nano", "cpu", 2, 16, "bf16"),
                         "Transformer/nano/cpu/forward/batch:2/seq:16/bf16")
        self.assertEqual(tool.benchmark_name("Whisper", "tiny", "cuda:0", 1, None, "fp32"),
                         "Whisper/tiny/cuda/encode/batch:1/fp32")
        self.assertEqual(tool.file_stem("CNN/nano/cpu/forward/batch:2/fp32"),
                         "CNN-nano-cpu-forward-batch2-fp32")

    def test_the_default_shapes_name_a_benchmark_bench_has(self):
        """Without --batch and --seq, each family's file is named after
        bench's default inference benchmark, which bench lists."""
        import os
        import subprocess

        from ltb.commands import export as tool
        if not os.access(built_bench(), os.X_OK):
            self.skipTest(f"no bench binary at {built_bench()}")
        from ltb.pysuite import facts
        for family in facts.names():
            if family == "Ops":  # operators, no model to compile
                continue
            size = facts.family(family)["sizes"][0]["name"]
            settings = facts.settings(family)
            seq = settings["seqs"][0] if tool.has_seq(family) else None
            name = tool.benchmark_name(family, size, "cpu", settings["batch"], seq, "fp32")
            listed = subprocess.run(
                [built_bench(), "--benchmark_list_tests", "--devices=cpu",
                 f"--benchmark_filter=^{family}/{size}/cpu/"],
                capture_output=True, text=True, check=True).stdout.split()
            self.assertIn(name + "/manual_time", listed, family)
