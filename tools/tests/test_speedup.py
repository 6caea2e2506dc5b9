"""tools/speedup against fixture JSON files."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def entry(name, counter, value, error=False, run_type="iteration"):
    e = {"name": name + "/manual_time", "run_name": name + "/manual_time",
         "run_type": run_type, "real_time": 1.0, "cpu_time": 1.0, "time_unit": "ms",
         "iterations": 1, counter: value}
    if error:
        e.update(error_occurred=True, error_message="no CUDA device")
    return e


class SpeedupTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, content):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def run_tool(self, *files):
        return subprocess.run([sys.executable, os.path.join(TOOLS, "speedup"), *files],
                              capture_output=True, text=True)

    def test_speedup_over_cpu_from_two_files(self):
        cpu = self.write("cpu.json", {"context": {}, "benchmarks": [
            entry("GPT2/small/cpu/generate/batch:1/prompt:32/new:100/fp32", "tokens/s", 10),
            entry("GPT2/small/cpu/generate/batch:1/prompt:32/new:100/fp32", "tokens/s", 30),
            entry("Ops/matmul/2048x2048/cpu/fp32", "FLOP/s", 1e11)]})
        gpu = self.write("gpu.json", {"context": {}, "benchmarks": [
            entry("GPT2/small/cuda/generate/batch:1/prompt:32/new:100/fp32", "tokens/s", 54),
            entry("Ops/matmul/2048x2048/cuda/fp32", "FLOP/s", 0, error=True)]})
        proc = self.run_tool(cpu, gpu)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("GPT2/small/generate/batch:1/prompt:32/new:100/fp32", proc.stdout)
        self.assertIn("Speedup: 2.70x (cuda vs cpu)", proc.stdout)
        self.assertNotIn("Ops/matmul", proc.stdout)

    def test_two_machines_are_never_averaged_together(self):
        # Two machines' runs, each with its CPU and its GPU: each GPU is its
        # own row against its own CPU (A100 400/100 = 4x, H100 1000/50 =
        # 20x), never the mean of the two GPUs (700) over the mean of the
        # CPUs (75), 9.33x.
        gen = "GPT2/small/cpu/generate/batch:1/prompt:32/new:100/fp32"
        a100 = self.write("a100.json", {"context": {}, "benchmarks": [
            entry(gen, "tokens/s", 100), entry(gen.replace("/cpu/", "/cuda/"), "tokens/s", 400)]})
        h100 = self.write("h100.json", {"context": {}, "benchmarks": [
            entry(gen, "tokens/s", 50), entry(gen.replace("/cpu/", "/cuda/"), "tokens/s", 1000)]})
        proc = self.run_tool(a100, h100)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = [line.split() for line in proc.stdout.splitlines()[2:]]
        self.assertEqual(lines, [
            ["cpu", "(a100)", "100", "tokens/s"],
            ["cuda", "(a100)", "400", "tokens/s", "Speedup:", "4.00x", "(cuda", "vs", "cpu)"],
            ["cpu", "(h100)", "50", "tokens/s"],
            ["cuda", "(h100)", "1k", "tokens/s", "Speedup:", "20.00x", "(cuda", "vs", "cpu)"]])
        self.assertNotIn("9.33x", proc.stdout)

    def test_speedup_is_of_one_counter_and_finite_values(self):
        # The CPU reports samples/s alone, the GPU tokens/s too: the GPU's
        # 500 tokens/s over the CPU's 10 samples/s read 50x, where by
        # samples/s, which both report, the GPU is at half the CPU's speed.
        gen = "Whisper/tiny/cpu/transcribe/batch:1/prompt:4/new:32/fp32"
        cuda = gen.replace("/cpu/", "/cuda/")
        path = self.write("mixed.json", {"context": {}, "benchmarks": [
            entry(gen, "samples/s", 10), dict(entry(cuda, "samples/s", 5), **{"tokens/s": 500})]})
        proc = self.run_tool(path)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual([line.split() for line in proc.stdout.splitlines()[2:]], [
            ["cpu", "10", "samples/s"],
            ["cuda", "5", "samples/s", "Speedup:", "0.50x", "(cuda", "vs", "cpu)"]])
        # A repetition with no finite throughput (NaN, as the JSON writes
        # it) is not averaged in: the speedup read "nanx".
        path = self.write("nan.json", {"context": {}, "benchmarks": [
            entry(gen, "samples/s", 10), entry(gen, "samples/s", float("nan")),
            entry(gen, "samples/s", 30), entry(cuda, "samples/s", 60),
            entry(cuda, "samples/s", float("inf"))]})
        proc = self.run_tool(path)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual([line.split() for line in proc.stdout.splitlines()[2:]], [
            ["cpu", "20", "samples/s"],
            ["cuda", "60", "samples/s", "Speedup:", "3.00x", "(cuda", "vs", "cpu)"]])

    def test_a_missing_speedup_says_why(self):
        gen = "GPT2/small/cpu/generate/batch:1/prompt:32/new:100/fp32"
        a = self.write("a.json", {"context": {}, "benchmarks": [entry(gen, "tokens/s", 10)]})
        b = self.write("b.json", {"context": {}, "benchmarks": [entry(gen, "tokens/s", 20)]})
        gpu = self.write("gpu.json", {"context": {}, "benchmarks": [
            entry(gen.replace("/cpu/", "/cuda/"), "tokens/s", 100)]})
        proc = self.run_tool(a, b, gpu)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("100 tokens/s   no speedup: no cpu in its file, and several "
                      "files measured one", proc.stdout)
        samples = self.write("samples.json", {"context": {}, "benchmarks": [
            entry(gen, "samples/s", 10), entry(gen.replace("/cpu/", "/cuda/"), "tokens/s", 100)]})
        proc = self.run_tool(samples)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("no speedup: the cpu reports no tokens/s", proc.stdout)

    def test_aggregates_alone_are_named(self):
        # --benchmark_report_aggregates_only: no repetition to average. The
        # tool said no benchmark ran on two devices, where two did.
        gen = "GPT2/small/cpu/generate/batch:1/prompt:32/new:100/fp32"
        cuda = gen.replace("/cpu/", "/cuda/")
        aggregates = [dict(entry(name, "tokens/s", v, run_type="aggregate"),
                           name=f"{name}/manual_time_{agg}", aggregate_name=agg)
                      for name, v in ((gen, 10), (cuda, 50)) for agg in ("mean", "median")]
        path = self.write("agg.json", {"context": {}, "benchmarks": aggregates})
        proc = self.run_tool(path)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("2 reported by their aggregates alone (--benchmark_report_aggregates_only)"
                      f", with no repetition to average: {gen} (agg), {cuda} (agg)", proc.stderr)
        ops = "Ops/matmul/2048x2048/cpu/fp32"
        path = self.write("some.json", {"context": {}, "benchmarks": aggregates + [
            entry(ops, "FLOP/s", 1e11), entry(ops.replace("/cpu/", "/cuda/"), "FLOP/s", 1e12)]})
        proc = self.run_tool(path)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("Speedup: 10.00x", proc.stdout)
        self.assertIn(f"speedup: aggregates alone, no repetition to average, left out: {gen} "
                      "(some)", proc.stderr)

    def test_single_device_is_an_error(self):
        path = self.write("one.json", {"benchmarks": [
            entry("Transformer/nano/cpu/forward/batch:4/seq:512/fp32", "tokens/s", 1)]})
        proc = self.run_tool(path)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("two or more devices", proc.stderr)

    def test_bad_input_exits_2_with_the_file_named(self):
        for content in ("not json", json.dumps({"no": "benchmarks"})):
            path = self.write("bad.json", content)
            proc = self.run_tool(path)
            self.assertEqual(proc.returncode, 2)
            self.assertIn("bad.json", proc.stderr)
        proc = self.run_tool(os.path.join(self.tmp.name, "missing.json"))
        self.assertEqual(proc.returncode, 2)
        self.assertIn("cannot read", proc.stderr)


if __name__ == "__main__":
    unittest.main()
