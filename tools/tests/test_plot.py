"""tools/plot writes valid PNG files."""
import os
import struct
import unittest

from helpers import ToolTest, doc, entry

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path):
    """(width, height) from a PNG's IHDR chunk; fails on anything else."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != PNG_MAGIC or head[12:16] != b"IHDR":
        raise AssertionError(f"{path} is not a PNG file")
    return struct.unpack(">II", head[16:24])


def machine(factor):
    """Transformer sizes and sequence lengths on cpu and cuda, and an op."""
    entries = []
    for size, scale in (("nano", 1), ("small", 8), ("medium", 30)):
        for seq in (128, 256, 512):
            for device, speed in (("cpu", 1), ("cuda", 6)):
                ms = scale * seq * (1 + seq / 1024) / speed * factor
                entries.append(entry(f"Transformer/{size}/{device}/forward/batch:4/seq:{seq}/fp32",
                                     ms, tokens_per_s=4 * seq / ms * 1000))
    entries.append(entry("Ops/matmul/2048x2048/cpu/fp32", 100, FLOP_per_s=1.7e11))
    return doc(entries)


class PlotTest(ToolTest):
    def test_writes_every_chart_as_png(self):
        a = self.write("a100.json", machine(1.0))
        b = self.write("h100.json", machine(0.5))
        out = os.path.join(self.tmp, "charts")
        proc = self.run_tool("plot", a, b, "--out", out, "--cost", "2.5", "4.0")
        self.assertExit(proc, 0)
        paths = proc.stdout.split()
        self.assertEqual([os.path.basename(p) for p in paths], [
            "throughput_by_size-Transformer.png", "time_per_token-Transformer.png",
            "speedup_by_device.png", "cost_per_1M_tokens.png"])
        for path in paths:
            self.assertTrue(path.startswith(out), path)
            width, height = png_size(path)
            self.assertGreater(width, 300)
            self.assertGreater(height, 200)
        self.assertEqual(sorted(os.listdir(out)), sorted(os.path.basename(p) for p in paths))

    def test_charts_need_their_data(self):
        # One size, one length, one device, no cost: throughput by size only.
        path = self.write("one.json", doc(entry(
            "GPT2/nano/cpu/forward/batch:1/seq:64/fp32", 10, tokens_per_s=6400)))
        proc = self.run_tool("plot", path, "--out", self.tmp)
        self.assertExit(proc, 0)
        self.assertEqual([os.path.basename(p) for p in proc.stdout.split()],
                         ["throughput_by_size-GPT2.png"])
        png_size(proc.stdout.split()[0])

    def test_nothing_to_plot_and_bad_input_exit_2(self):
        ops = self.write("ops.json", doc(entry("Ops/noop/empty/cpu/fp32", 1e-5)))
        proc = self.run_tool("plot", ops, "--out", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("nothing to plot", proc.stderr)
        for bad in self.bad_inputs():
            self.assertExit(self.run_tool("plot", bad, "--out", self.tmp), 2)
        self.assertExit(self.run_tool("plot", ops, "--cost", "1", "2"), 2)


if __name__ == "__main__":
    unittest.main()
