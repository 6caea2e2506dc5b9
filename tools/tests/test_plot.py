"""tools/plot writes valid PNG files, and draws bars only on a linear axis
from zero, points or lines on a logarithmic one, and a chart only where it
compares something."""
import contextlib
import io
import os
import struct
import sys
import unittest

from tests.helpers import ToolTest, doc, entry

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

    def plot(self, *args):
        """tools/plot's main in this process (matplotlib loaded once);
        test_writes_every_chart_as_png runs the command."""
        from ltb.commands import plot
        return self.run_main("plot", plot.main, *args)

    def test_charts_need_their_data(self):
        # Two sizes, one length, one device, no cost: throughput by size only.
        path = self.write("two.json", doc([
            entry("GPT2/nano/cpu/forward/batch:1/seq:64/fp32", 10, tokens_per_s=6400),
            entry("GPT2/small/cpu/forward/batch:1/seq:64/fp32", 20, tokens_per_s=3200)]))
        proc = self.plot(path, "--out", self.tmp)
        self.assertExit(proc, 0)
        self.assertEqual([os.path.basename(p) for p in proc.stdout.split()],
                         ["throughput_by_size-GPT2.png"])
        png_size(proc.stdout.split()[0])
        # One bar compares with nothing: no chart.
        one = self.write("one.json", doc(entry(
            "GPT2/nano/cpu/forward/batch:1/seq:64/fp32", 10, tokens_per_s=6400)))
        proc = self.plot(one, "--out", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("nothing to plot", proc.stderr)

    def charts(self, *files, extra=()):
        """Runs tools/plot in this process and returns, per chart, its axes'
        scales, limits and what they draw (bars or lines)."""
        from ltb.commands import plot
        seen = {}
        original = plot.save

        def save(fig, out, name):
            ax = fig.axes[0]
            bars = [p for p in ax.patches if p.get_width() > 0 and p.get_height() > 0]
            seen[name] = {"xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
                          "xlim": ax.get_xlim(), "ylim": ax.get_ylim(),
                          "bars": len(bars), "points": sum(len(l.get_xdata()) for l in ax.lines
                                                           if l.get_marker() not in (None, "None", "")),
                          "lines": [(list(l.get_xdata()), list(l.get_ydata())) for l in ax.lines
                                    if l.get_marker() not in (None, "None", "")],
                          "legend": [t.get_text() for t in ax.get_legend().get_texts()]
                          if ax.get_legend() else []}
            return original(fig, out, name)

        plot.save = save
        argv = sys.argv
        sys.argv = ["plot", *files, "--out", self.tmp, *extra]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                plot.plot_main()
        finally:
            sys.argv = argv
        return seen

    def test_bars_stand_on_zero_and_decades_are_points_on_a_log_axis(self):
        close = self.write("close.json", doc([
            entry("GPT2/nano/cpu/forward/batch:1/seq:64/fp32", 10, tokens_per_s=163),
            entry("GPT2/small/cpu/forward/batch:1/seq:64/fp32", 12, tokens_per_s=129)]))
        chart = self.charts(close)["throughput_by_size-GPT2.png"]
        # 129 against 163 reads as 0.8 to 1, not as one to four.
        self.assertEqual((chart["yscale"], chart["bars"], chart["points"]), ("linear", 2, 0))
        self.assertEqual(chart["ylim"][0], 0)
        charts = self.charts(self.write("a.json", machine(1.0)), self.write("b.json", machine(0.5)),
                             extra=("--cost", "2.5", "4.0"))
        spread = charts["throughput_by_size-Transformer.png"]
        # 3 sizes x (3 lengths x 2 devices) x 2 files, two decades apart: points.
        self.assertEqual((spread["yscale"], spread["bars"], spread["points"]), ("log", 0, 36))
        # The cost of the same 18 benchmarks on 2 machines, 60x apart: points
        # too (they were bars, whatever the spread).
        cost = charts["cost_per_1M_tokens.png"]
        self.assertEqual((cost["xscale"], cost["bars"], cost["points"]), ("log", 0, 36))
        # Every device 6x the CPU: bars from zero.
        speedup = charts["speedup_by_device.png"]
        self.assertEqual((speedup["xscale"], speedup["xlim"][0], speedup["points"]),
                         ("linear", 0, 0))
        self.assertGreater(speedup["bars"], 0)
        for name, chart in charts.items():
            if chart["bars"]:
                scale, low = ((chart["xscale"], chart["xlim"][0]) if "speedup" in name
                              or "cost" in name else (chart["yscale"], chart["ylim"][0]))
                self.assertEqual((scale, low), ("linear", 0), name)
            if "log" in (chart["xscale"], chart["yscale"]):
                self.assertEqual(chart["bars"], 0, name)

    def test_a_chart_of_two_counters_names_each_series_counter(self):
        # Whisper's encode reports samples/s, its generate tokens/s: on one
        # axis labelled "samples/s or tokens/s" nothing said which was which.
        enc, gen = "Whisper/{}/cpu/encode/batch:1/fp32", "Whisper/{}/cpu/generate/batch:1/fp32"
        path = self.write("whisper.json", doc([
            entry(enc.format("tiny"), 160, samples_per_s=6.2),
            entry(enc.format("base"), 320, samples_per_s=3.1),
            entry(gen.format("tiny"), 150, tokens_per_s=210),
            entry(gen.format("base"), 300, tokens_per_s=105)]))
        chart = self.charts(path)["throughput_by_size-Whisper.png"]
        self.assertEqual(chart["legend"], ["Whisper/*/cpu/encode/batch:1/fp32 (samples/s)",
                                           "Whisper/*/cpu/generate/batch:1/fp32 (tokens/s)"])
        self.assertEqual(chart["lines"], [([0, 1], [6.2, 3.1]), ([0, 1], [210, 105])])
        # One counter: the series need not say it.
        path = self.write("gen.json", doc([entry(gen.format("tiny"), 150, tokens_per_s=210),
                                           entry(gen.format("base"), 300, tokens_per_s=105)]))
        chart = self.charts(path)["throughput_by_size-Whisper.png"]
        self.assertEqual(chart["legend"], ["Whisper/*/cpu/generate/batch:1/fp32"])

    def test_a_throughput_of_zero(self):
        # Time per token divided by it (a ZeroDivisionError), and on a
        # logarithmic axis its point vanished without a word: bars from zero.
        fwd = "GPT2/{}/cpu/forward/batch:1/seq:{}/fp32"
        path = self.write("zero.json", doc([
            entry(fwd.format("nano", 64), 10, tokens_per_s=0.0),
            entry(fwd.format("nano", 128), 10, tokens_per_s=12800.0),
            entry(fwd.format("nano", 256), 10, tokens_per_s=25600.0),
            entry(fwd.format("small", 128), 10, tokens_per_s=6400.0)]))
        charts = self.charts(path)
        self.assertEqual(charts["time_per_token-GPT2.png"]["lines"],
                         [([128, 256], [1e6 / 12800, 1e6 / 25600])])
        size = charts["throughput_by_size-GPT2.png"]
        self.assertEqual((size["yscale"], size["ylim"][0], size["bars"]), ("linear", 0, 3))

    def test_scaling_efficiency_against_ranks(self):
        step = "EncDec/tiny/cpu/train_step/batch:8/seq:64/fp32"
        runs = []
        for ranks, rate in ((1, 1000.0), (2, 1800.0), (4, 3000.0)):
            extra = {"grad_buckets": 2} if ranks > 1 else {}
            runs.append(self.write(f"r{ranks}.json", doc(
                entry(step, 8.0, tokens_per_s=rate, **extra), world_size=str(ranks))))
        merged = os.path.join(self.tmp, "scaling.json")
        self.assertExit(self.run_tool("scaling", "--out", merged, *runs), 0)
        chart = self.charts(merged)["scaling_efficiency.png"]
        self.assertEqual(chart["lines"], [([1, 2, 4], [1.0, 0.9, 0.75])])
        self.assertEqual((chart["yscale"], chart["ylim"][0], chart["bars"]), ("linear", 0, 0))
        # One world size alone draws no scaling chart (and here nothing at all).
        proc = self.plot(runs[1], "--out", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("nothing to plot", proc.stderr)

    def test_nothing_to_plot_and_bad_input_exit_2(self):
        ops = self.write("ops.json", doc(entry("Ops/noop/empty/cpu/fp32", 1e-5)))
        proc = self.plot(ops, "--out", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("nothing to plot", proc.stderr)
        for bad in self.bad_inputs():
            self.assertExit(self.plot(bad, "--out", self.tmp), 2)
        # --benchmark_report_aggregates_only: said "no measured benchmark".
        gpt2 = "GPT2/nano/cpu/forward/batch:1/seq:64/fp32"
        aggregates = self.write("agg.json", doc([
            dict(entry(gpt2, 10, tokens_per_s=6400), name=f"{gpt2}/manual_time_{agg}",
                 run_type="aggregate", aggregate_name=agg) for agg in ("mean", "median")]))
        proc = self.plot(aggregates, "--out", self.tmp)
        self.assertExit(proc, 2)
        self.assertIn("1 reported by their aggregates alone (--benchmark_report_aggregates_only),"
                      " with no repetition to plot", proc.stderr)
        self.assertExit(self.plot(ops, "--cost", "1", "2"), 2)
        # A price of nan or inf drew an empty cost chart, or cost inf.
        gen = self.write("gen.json", doc(entry("GPT2/nano/cpu/forward/batch:1/seq:64/fp32", 10,
                                               tokens_per_s=6400)))
        for price in ("nan", "inf", "-1"):
            proc = self.plot(gen, "--out", self.tmp, "--cost", price)
            self.assertExit(proc, 2)
            self.assertIn(f"prices must be finite numbers >= 0 and device counts >= 1 (--cost "
                          f"{price})", proc.stderr)


if __name__ == "__main__":
    unittest.main()
