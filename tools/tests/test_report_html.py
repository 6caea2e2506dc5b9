"""tools/report --format html: what each section draws, checked from the
page's own data and, where Debian's chromium is installed, in headless
Chromium (no console error, no request leaving the file, every chart drawn
with one point or bar per benchmark)."""
import json
import os
import re
import subprocess
import unittest

from tests import browser
from tests.helpers import ToolTest, built_bench, doc, entry, repeated

SEQS = (32, 64, 128)
FWD = "Transformer/nano/cpu/forward/batch:2/seq:{}/fp32"
MATMUL = "Ops/matmul/256x256/cpu/fp32"
GEN = "GPT2/nano/cpu/generate/batch:1/prompt:32/new:16/fp32"
TRAIN = "EncDec/tiny/cpu/train_step/batch:8/seq:64/fp32"
PEAKS = {"peak_flops_cpu_fp32": "2e+11 FLOP/s (measured: fastest of 3 matmuls)",
         "peak_bandwidth_cpu": "2.5e+10 bytes/s (measured: copy)"}


def run(slow=1.0, fast=1.0, cv=2.0, date="2026-11-20T10:00:00+00:00", drop=()):
    """Five repetitions of each benchmark; slow scales the time of seq 128,
    fast that of the matmul."""
    entries = []
    for seq in SEQS:
        ms = seq / 16 * (slow if seq == 128 else 1.0)
        entries += repeated(FWD.format(seq), [ms * (1 + i / 1000) for i in range(5)],
                            tokens_per_s=[2000 * seq / ms / (1 + i / 1000) for i in range(5)],
                            FLOP_per_s=4e9 * seq / 32, bytes_per_s=1e9,
                            step_p50_ms=ms, step_p90_ms=ms * 1.1, step_p99_ms=ms * 1.3,
                            **{"step_cv_%": cv if seq == 64 else 1.0})
    entries += repeated(MATMUL, [0.2 * fast * (1 + i / 1000) for i in range(5)],
                        FLOP_per_s=1.6e11 / fast, bytes_per_s=3.9e9 / fast, mfu=0.8 / fast,
                        mbu=0.156 / fast)
    entries += repeated(GEN, [50.0] * 5, tokens_per_s=320.0, ttft_ms=3.0, tpot_ms=2.9,
                        FLOP_per_s=2e9, params=1e6)
    entries += repeated(GEN + "/aoti", [40.0] * 5, tokens_per_s=400.0, compile_s=12.0,
                        rel_err=1e-6)
    entries.append(entry(TRAIN.replace("tiny", "small"), 0.0, error="out of memory: needs 9 GiB"))
    entries = [e for e in entries if not any(e["name"].startswith(d) for d in drop)]
    return doc(entries, date=date, host_name="ci-box", suite_commit="abc123", **PEAKS)


def page_data(text):
    match = re.search(r'<script type="application/json" id="ltb-data">(.*?)</script>', text,
                      re.S)
    return json.loads(match[1])


def points_by_section(data):
    """What the page asks each section's charts to draw: the data points of
    datasets standing for benchmarks."""
    out = {}
    for chart in data["charts"]:
        for d in chart["config"]["data"]["datasets"]:
            if d.get("ltbKind") == "benchmarks":
                n = sum(1 for v in d["data"] if v is not None)
                out[chart["section"]] = out.get(chart["section"], 0) + n
    return out


class HtmlReportTest(ToolTest):
    def report(self, *args):
        """tools/report's main in this process (SciPy, which its comparisons
        load, loaded once); test_bad_input runs the command itself."""
        from ltb.report.cli import main
        return self.run_main("report", main, *args)

    def html(self, *paths, expect=0):
        proc = self.report("--format", "html", *paths)
        self.assertExit(proc, expect)
        if expect:
            return proc
        path = os.path.join(self.tmp, f"report{len(os.listdir(self.tmp))}.html")
        with open(path, "w") as f:
            f.write(proc.stdout)
        return path, proc.stdout

    def history_dir(self):
        directory = os.path.join(self.tmp, "history")
        os.makedirs(os.path.join(directory, "nested"))
        runs = [run(date="2026-11-01T10:00:00+00:00"), run(date="2026-11-02T10:00:00+00:00"),
                run(slow=1.5, date="2026-11-03T10:00:00+00:00"),  # seq 128 regressed
                run(slow=1.5, date="2026-11-04T10:00:00+00:00", drop=(MATMUL,))]  # lost
        # File names out of time order: the context's date orders them.
        for name, r in zip(("d.json", "nested/a.json", "c.json", "b.json"), runs):
            with open(os.path.join(directory, name), "w") as f:
                json.dump(r, f)
        # What CI keeps beside its runs and is not one: a file cut short, an
        # export, a world-size sweep's runs and their merge.
        for name, text in (("partial.json", '{"benchmarks": ['), ("export.json", "[]"),
                           ("s.ranks2.json", json.dumps(run(date="2026-11-05"))),
                           ("s.json", json.dumps(dict(run(), context={"world_sizes": "1,2"})))):
            with open(os.path.join(directory, name), "w") as f:
                f.write(text)
        return directory, runs

    def expected_points(self, docs):
        """Per section, the points each should draw, counted from the fixtures."""
        measured = [e for d in docs for e in d["benchmarks"]
                    if e["run_type"] == "iteration" and not e.get("error_occurred")
                    and e["repetition_index"] == 0]
        return {
            "roofline": sum(1 for e in measured
                            if "FLOP/s" in e and ("bytes/s" in e or "params" in e)),
            "scaling": sum(1 for e in measured if "/seq:" in e["name"] and "tokens/s" in e),
            "distributions": sum(1 for e in measured if "step_p50_ms" in e),
            "compiled": sum(1 for e in measured if e["name"].endswith("/aoti/manual_time")),
        }

    def check_in_browser(self, path, expected):
        why = browser.unavailable()
        if why:
            self.skipTest(f"headless Chromium: {why}")
        seen = browser.open_page(path)
        self.assertEqual(seen["console_errors"], [])
        self.assertEqual(seen["requests"], [seen["url"]])  # nothing leaves the file
        self.assertEqual(seen["drawn"]["canvases"], seen["drawn"]["charts"])
        self.assertEqual(seen["drawn"]["sections"], expected)

    def test_one_run_every_section_it_supports(self):
        r = run(cv=7.0)
        path, text = self.html(self.write("run.json", r))
        data = page_data(text)
        expected = self.expected_points([r])
        self.assertEqual(expected, {"roofline": 5, "scaling": 3, "distributions": 3,
                                    "compiled": 1})
        self.assertEqual(points_by_section(data), expected)
        for section in ("context", "roofline", "scaling", "distributions", "compiled", "errors"):
            self.assertTrue(f'<section id="{section}">' in text, section)
        for section in ("comparison", "history"):
            self.assertFalse(f'<section id="{section}">' in text, section)
        # Self-contained: Chart.js inlined, and a policy that forbids fetching.
        self.assertTrue("Chart.js v3.9.1" in text)
        self.assertTrue("default-src 'none'" in text)
        self.assertIsNone(re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text))
        # The roofline's ceiling is the context's peaks: 2.5e10 x intensity up
        # to the ridge at 8 FLOP/byte, then 2e11.
        roof = next(c for c in data["charts"] if c["section"] == "roofline")
        ceiling = roof["config"]["data"]["datasets"][2]["data"]
        self.assertAlmostEqual(ceiling[1]["y"], 2e11)
        self.assertAlmostEqual(ceiling[0]["y"] / ceiling[0]["x"], 2.5e10)
        points = roof["config"]["data"]["datasets"][0]
        tip = next(t for t in points["tips"] if t.startswith(MATMUL))
        self.assertIn("mfu 0.800", tip)
        self.assertIn("intensity 41 FLOP/byte", tip)
        # Generation has no byte count: its weights, 1e6 x 4 bytes, read once
        # per new token (the prompt's forward gives the first, 15 decode
        # steps the others: 16 reads, not 17); 2e9 FLOP/s x 50 ms a step.
        bound = roof["config"]["data"]["datasets"][1]
        self.assertEqual(len(bound["data"]), 1)
        self.assertAlmostEqual(bound["data"][0]["x"], 2e9 * 0.05 / (1e6 * 4 * 16))
        self.assertIn("(at most)", bound["tips"][0])
        ceiling = roof["config"]["data"]["datasets"][2]["data"]
        self.assertAlmostEqual(ceiling[1]["x"], 2e11 / 2.5e10)
        # The unsteady run is flagged, the steady ones not.
        self.assertEqual(text.count("<td>unsteady</td>"), 1)
        self.assertTrue("out of memory: needs 9 GiB" in text)
        self.check_in_browser(path, expected)

    def test_the_context_shows_what_of_the_host_decides_the_speed(self):
        # A run pinned to one CPU under a quota: the table says so beside the
        # other run, which has no such entries (an older file).
        pinned = run()
        pinned["context"].update(cpu_affinity="0 (1 of 2 logical CPUs)",
                                 cpu_quota="1 CPU (cgroup v2 cpu.max 100000 100000)",
                                 kernel="6.1.0", virtual_machine="yes (hypervisor flag)")
        _, text = self.html(self.write("pinned.json", pinned), self.write("full.json", run()))
        for key, value in (("cpu_affinity", "0 (1 of 2 logical CPUs)"),
                           ("cpu_quota", "1 CPU (cgroup v2 cpu.max 100000 100000)"),
                           ("kernel", "6.1.0")):
            self.assertRegex(text, rf"<td>{key}</td>\s*<td>{re.escape(value)}</td>")

    def test_a_quantised_roofline_divides_by_the_bytes_its_weights_take(self):
        # The same generation in fp32 and int4: bench writes the bytes a
        # decode step reads (weight_bytes); int4's are about an eighth of
        # the fp32 weights', which params x 4 would count. A quantised
        # result without them (an older bench's) is left out, not drawn
        # at the fp32 weights' bytes.
        int4 = GEN.replace("/fp32", "/bf16/int4:g32")
        r = doc(*repeated(GEN, [50.0] * 5, FLOP_per_s=2e9, params=1e6, weight_bytes=4e6),
                *repeated(int4, [20.0] * 5, FLOP_per_s=5e9, params=1e6, weight_bytes=5.6e5),
                *repeated(GEN.replace("/fp32", "/int8"), [30.0] * 5, FLOP_per_s=3e9,
                          params=1e6),
                **PEAKS)
        _, text = self.html(self.write("quant.json", r))
        points = {}  # over the roofline of each (device, precision)
        for roof in page_data(text)["charts"]:
            for dataset in roof["config"]["data"]["datasets"]:
                if roof["section"] != "roofline" or "tips" not in dataset:
                    continue
                for point, tip in zip(dataset["data"], dataset["tips"]):
                    points[tip.split("\n")[0]] = point["x"]
        self.assertAlmostEqual(points[GEN], 2e9 * 0.05 / (4e6 * 16))
        self.assertAlmostEqual(points[int4], 5e9 * 0.02 / (5.6e5 * 16))
        self.assertEqual(len(points), 2, points)

    def roofline_tips(self, text):
        """{benchmark: (chart title, x, y)} over every roofline, and {title:
        the ceiling's top}."""
        points, tops = {}, {}
        titles = re.findall(r"<h3>([^<]*)</h3>", text.split('<section id="roofline">')[1]
                            .split("</section>")[0])
        roofs = [c for c in page_data(text)["charts"] if c["section"] == "roofline"]
        for title, roof in zip(titles, roofs):
            for dataset in roof["config"]["data"]["datasets"]:
                if "tips" not in dataset:
                    tops[title] = max(p["y"] for p in dataset["data"])
                    continue
                for point, tip in zip(dataset["data"], dataset["tips"]):
                    points[tip.split("\n")[0]] = (title, point["x"], point["y"])
        return points, tops

    def test_a_roofline_point_divides_each_repetitions_own_flops(self):
        # Two repetitions of a forward that does 1e9 FLOPs a step, in 10 and
        # 30 ms: 1e11 and 3.33e10 FLOP/s. Its weights, 1e6 fp32 params, are
        # 4e6 bytes: 250 FLOP/byte. The median rate times the median time
        # (6.67e10 x 20 ms = 1.33e9 FLOPs) would put it at 333.
        name = FWD.format(32)
        r = doc(*repeated(name, [10.0, 30.0], FLOP_per_s=[1e9 / 0.01, 1e9 / 0.03],
                          params=1e6), **PEAKS)
        _, text = self.html(self.write("two.json", r))
        points, _ = self.roofline_tips(text)
        self.assertAlmostEqual(points[name][1], 250.0)

    def test_a_train_epoch_reads_its_weights_once_per_optimizer_step(self):
        # An epoch of 128 samples at batch 4 is 32 optimizer steps, each
        # reading the 1e6 fp32 weights (4e6 bytes): 1e10 FLOPs an epoch of
        # 0.5 s over 32 x 4e6 bytes, not over the 4e6 bytes of one step.
        name = "Transformer/nano/cpu/train_epoch/batch:4/seq:64/fp32"
        r = doc(*repeated(name + "/iterations:2", [500.0] * 3, FLOP_per_s=2e10,
                          samples_per_s=256.0, params=1e6), **PEAKS)
        _, text = self.html(self.write("epoch.json", r))
        points, _ = self.roofline_tips(text)
        self.assertAlmostEqual(points[name][1], 1e10 / (32 * 4e6))

    def test_a_small_mfu_keeps_its_digits(self):
        # 2.5e-4 of the peak is not 0.000.
        name = FWD.format(32)
        r = doc(*repeated(name, [10.0] * 3, FLOP_per_s=5e7, params=1e6, mfu=2.5e-4), **PEAKS)
        _, text = self.html(self.write("slow.json", r))
        tips = [tip for c in page_data(text)["charts"] if c["section"] == "roofline"
                for d in c["config"]["data"]["datasets"] for tip in d.get("tips", [])]
        self.assertEqual(len(tips), 1)
        self.assertIn("mfu 0.000250", tips[0])

    def test_a_loadgen_verdict_of_repetitions_that_disagree_says_so(self):
        # One repetition VALID, one INVALID: their median, 0.5, is no
        # verdict; the table says how many were VALID.
        name = "GPT2/nano/cpu/serve/scenario:SingleStream/max_batch:4/seq:16/fp32"
        r = doc(*repeated(name, [1.0, 1.0], p50_ms=1.0, p90_ms=2.0, p99_ms=3.0,
                          samples_per_s=900.0, valid=[1, 0], **{"p99.9_ms": 4.0}),
                *repeated(name.replace("seq:16", "seq:32"), [1.0, 1.0], p50_ms=1.0,
                          p90_ms=2.0, p99_ms=3.0, samples_per_s=900.0, valid=[1, 1],
                          **{"p99.9_ms": 4.0}))
        _, text = self.html(self.write("serve.json", r))
        self.assertIn("<td>VALID in 1 of 2 repetitions</td>", text)
        self.assertEqual(text.count("<td>VALID</td>"), 1)

    def test_tf32_and_a_second_gpu_under_their_own_ceilings(self):
        # bench names fp32 run as TF32 .../fp32/tf32 and keys its peaks by
        # precision (tf32) and by device (cuda, cuda:1): a TF32 matmul is
        # drawn under the TF32 peak, a second GPU's under its own.
        peaks = {"peak_flops_cuda_fp32": "6.7e+13 FLOP/s (datasheet)",
                 "peak_flops_cuda_tf32": "4.9e+14 FLOP/s (datasheet)",
                 "peak_flops_cuda:1_fp32": "1.9e+13 FLOP/s (datasheet)",
                 "peak_bandwidth_cuda": "3.35e+12 bytes/s (datasheet)",
                 "peak_bandwidth_cuda:1": "9e+11 bytes/s (datasheet)"}
        fp32 = "Ops/matmul/8192x8192/cuda/fp32"
        tf32 = fp32 + "/tf32"
        other = "Ops/matmul/8192x8192/cuda:1/fp32"
        r = doc(*repeated(fp32, [20.0] * 3, FLOP_per_s=5.5e13, bytes_per_s=4e10),
                *repeated(tf32, [3.0] * 3, FLOP_per_s=3.6e14, bytes_per_s=2.7e11),
                *repeated(other, [70.0] * 3, FLOP_per_s=1.5e13, bytes_per_s=1.1e10), **peaks)
        _, text = self.html(self.write("gpus.json", r))
        points, tops = self.roofline_tips(text)
        self.assertEqual(points[fp32][0], "cuda fp32")
        self.assertEqual(points[tf32][0], "cuda tf32")
        self.assertEqual(points[other][0], "cuda:1 fp32")
        self.assertEqual(tops, {"cuda fp32": 6.7e13, "cuda tf32": 4.9e14, "cuda:1 fp32": 1.9e13})
        self.assertNotIn("A benchmark beat the peak", text)

    def test_the_open_changes_table_names_what_each_column_holds(self):
        # The column of "+25.0% (slower)" is the change, not a step time.
        from ltb.history.changes import Change
        from ltb.report.html import render
        from ltb.report.tables import compiled_rows
        store = [{"name": MATMUL, "fingerprint": "box", "commits": ["a" * 40, "b" * 40, "c" * 40],
                  "values": [0.002, 0.0025, 0.0025],
                  "changes": [Change(1, "a" * 40, "b" * 40, 0.25, 0.99)]}]
        text = render([], [], compiled_rows=compiled_rows, store=store)
        table = text.split("<h3>Open changes</h3>")[1].split("</table>")[0]
        headers = re.findall(r"<th>([^<]*)</th>", table)
        cells = re.findall(r"<td>(.*?)</td>", table)
        self.assertEqual(cells[headers.index("change of the median step time")],
                         "+25.0% (slower)")

    def test_a_run_of_one_step_has_no_cv(self):
        # bench gives no step_cv_% where a repetition timed one step: the
        # distribution's tip says so rather than "cv 0%", a steady run's.
        name = "GPT2/nano/cpu/forward/batch:1/seq:512/fp32"
        r = doc(*repeated(name, [250.0] * 3, step_p50_ms=250.0, step_p90_ms=250.0,
                          step_p99_ms=250.0), **PEAKS)
        _, text = self.html(self.write("one.json", r))
        chart = next(c for c in page_data(text)["charts"] if c["section"] == "distributions")
        tip = chart["config"]["data"]["datasets"][0]["tips"][0]
        self.assertNotIn("cv 0%", tip)
        self.assertIn("cv — (one step)", tip)

    def test_a_hostile_name_stays_text(self):
        name = "Ops/x</script><!--<script>alert(1)//<b>/cpu/fp32"
        r = doc(entry(name, 1.0, FLOP_per_s=1e9, bytes_per_s=1e8, step_p50_ms=1.0,
                      step_p90_ms=1.0, step_p99_ms=1.0),
                entry("Ops/y<img src=x>/cpu/fp32", 0.0, error="<script>alert(2)</script>"),
                **PEAKS)
        path, text = self.html(self.write("hostile.json", r))
        body = text.split("Chart.js v3.9.1")[0] + text.split("</script>", 1)[1]
        for raw in ("<!--<script>", "<b>", "<img", "<script>alert"):
            self.assertFalse(raw in body, raw)
        self.assertEqual(page_data(text)["charts"][0]["config"]["data"]["datasets"][0]["tips"][0]
                         .split("\n")[0], name)
        self.check_in_browser(path, {"roofline": 1, "distributions": 1})

    def test_two_runs_compared_with_the_gates_verdicts(self):
        base, head = run(), run(slow=1.25, fast=0.5)
        path, text = self.html(self.write("base.json", base), self.write("head.json", head))
        data = page_data(text)
        chart = next(c for c in data["charts"] if c["section"] == "comparison")
        bars = chart["config"]["data"]
        # Sorted by change: the regression first, the improvement last.
        self.assertEqual(bars["labels"][0], FWD.format(128))
        self.assertEqual(bars["labels"][-1], MATMUL)
        self.assertEqual(len(bars["labels"]), 6)  # every benchmark both measured
        dataset = bars["datasets"][0]
        self.assertAlmostEqual(dataset["data"][0], 1 / 1.25)
        self.assertAlmostEqual(dataset["data"][-1], 2.0)
        self.assertEqual(dataset["backgroundColor"][0], "#d62728")
        self.assertEqual(dataset["backgroundColor"][-1], "#2ca02c")
        self.assertIn("regression, p = 0.0079", dataset["tips"][0])  # 5 against 5
        # The head's matmul beat the measured compute peak: its roofline's
        # ceiling is raised to it, saying so; the base's is the context's.
        roofs = [c for c in data["charts"] if c["section"] == "roofline"]
        tops = [max(p["y"] for p in c["config"]["data"]["datasets"][-1]["data"]) for c in roofs]
        self.assertEqual(tops, [2e11, 3.2e11])
        self.assertEqual(text.count("A benchmark beat the peak"), 1)
        # The gate's settings apply: at a 30% threshold nothing regressed.
        proc = self.report("--format", "html", "--threshold", "30%",
                             self.write("base.json", base), self.write("head.json", head))
        self.assertExit(proc, 0)
        loose = next(c for c in page_data(proc.stdout)["charts"] if c["section"] == "comparison")
        colours = loose["config"]["data"]["datasets"][0]["backgroundColor"]
        self.assertEqual(colours[0], "#7f7f7f")
        self.assertEqual(colours[-1], "#2ca02c")  # twice as fast clears 30%
        self.assertTrue("threshold 30%, alpha 0.05" in proc.stdout)
        rules = self.write("rules.txt", "^Transformer 30%\n")
        proc = self.report("--format", "html", "--thresholds", rules,
                             self.write("base.json", base), self.write("head.json", head))
        self.assertExit(proc, 0)
        self.assertTrue("per benchmark from" in proc.stdout)
        ruled = next(c for c in page_data(proc.stdout)["charts"] if c["section"] == "comparison")
        self.assertEqual(ruled["config"]["data"]["labels"][0], FWD.format(128))
        self.assertEqual(ruled["config"]["data"]["datasets"][0]["backgroundColor"][0],
                         "#7f7f7f")
        bad = self.report("--format", "html", "--threshold", "lots",
                            self.write("base.json", base))
        self.assertExit(bad, 2)
        expected = self.expected_points([base, head])
        expected["comparison"] = 6
        self.assertEqual(points_by_section(data), expected)
        self.check_in_browser(path, expected)

    def test_a_directory_of_runs_is_a_history_with_the_gates_failures(self):
        directory, runs = self.history_dir()
        path, text = self.html(directory)
        data = page_data(text)
        charts = {c["config"]["data"]["datasets"][0]["tips"][0].split("\n")[0]: c
                  for c in data["charts"] if c["section"] == "history"}
        self.assertEqual(len(charts), 6)  # 3 forwards, matmul, generate, aoti
        self.assertEqual([d[:10] for d in next(iter(charts.values()))["config"]["options"]
                          ["ltbXLabels"]], ["2026-11-01", "2026-11-02", "2026-11-03",
                                            "2026-11-04"])
        # The seq-128 forward regressed on 11-03: its third point is red, and
        # no other point of any benchmark is.
        reds = []
        for chart in charts.values():
            d = chart["config"]["data"]["datasets"][0]
            for point, colour, tip in zip(d["data"], d["pointBackgroundColor"], d["tips"]):
                if colour == "#d62728":
                    reds.append((point["x"], tip))
        self.assertEqual(len(reds), 1, reds)
        self.assertEqual(reds[0][0], 2)
        self.assertIn("the gate failed here", reds[0][1])
        self.assertTrue(f"<code>{FWD.format(128)}</code>" in text)
        self.assertTrue("Red points: 1." in text)
        # Left out, each with why; each run's error listed once.
        for name in ("partial.json", "export.json", "s.ranks2.json", "s.json"):
            self.assertTrue(f"{name}</td>" in text, name)
        self.assertTrue("a run of a world-size sweep" in text)
        self.assertEqual(text.count("out of memory: needs 9 GiB"), 4)
        # The matmul, lost in the last run, has three points.
        self.assertEqual(points_by_section(data)["history"], 5 * 4 + 3)
        # The other sections show the latest run.
        self.check_in_browser(path, dict(self.expected_points(runs[-1:]),
                                         history=5 * 4 + 3))

    def test_a_history_is_in_the_order_its_runs_ran(self):
        # By the instant each ran, whatever its UTC offset (the text would put
        # 02:10+01:00 before 02:30+02:00, which ran 40 minutes earlier), and
        # a merged file (sweep's, abtest's), whose dates are its entries', by
        # its first run's.
        directory = os.path.join(self.tmp, "offsets")
        os.makedirs(directory)
        merged = run(date="")
        merged["context"].pop("date", None)
        for e in merged["benchmarks"]:
            e["context"] = {"date": "2026-11-01T01:00:00+00:00"}
        for name, doc in (("x.json", run(date="2026-11-01T02:30:00+02:00")),
                          ("y.json", run(date="2026-11-01T02:10:00+01:00")),
                          ("z.json", merged)):
            with open(os.path.join(directory, name), "w") as f:
                json.dump(doc, f)
        _, text = self.html(directory)
        charts = [c for c in page_data(text)["charts"] if c["section"] == "history"]
        self.assertTrue(charts)
        for chart in charts:
            self.assertEqual([label.split()[-1] for label in
                              chart["config"]["options"]["ltbXLabels"]],
                             ["x.json", "z.json", "y.json"])

    def test_a_history_marks_a_metric_the_gate_lost(self):
        # The second run lost its peak_mem: the gate fails it, so its point is red.
        directory = os.path.join(self.tmp, "lost")
        os.makedirs(directory)
        for day, counters in ((1, {"peak_mem": 1_000_000}), (2, {})):
            with open(os.path.join(directory, f"{day}.json"), "w") as f:
                json.dump(doc(entry(FWD.format(32), 10.0, **counters),
                              date=f"2026-11-0{day}T10:00:00+00:00"), f)
        _, text = self.html(directory)
        self.assertTrue("Red points: 1." in text)

    def test_scaling_efficiency_against_ranks(self):
        paths = []
        for ranks, rate in ((1, 1000.0), (2, 1700.0)):
            extra = {"grad_buckets": 2} if ranks > 1 else {}
            paths.append(self.write(f"r{ranks}.json", doc(
                entry(TRAIN, 8.0, tokens_per_s=rate, **extra), world_size=str(ranks))))
        merged = os.path.join(self.tmp, "scaling.json")
        self.assertExit(self.run_tool("scaling", "--out", merged, *paths), 0)
        path, text = self.html(merged)
        chart = next(c for c in page_data(text)["charts"] if c["section"] == "scaling")
        line = chart["config"]["data"]["datasets"][0]
        self.assertEqual(line["data"], [{"x": 1, "y": 1.0}, {"x": 2, "y": 0.85}])
        self.assertEqual(chart["config"]["options"]["scales"]["y"]["min"], 0)
        self.check_in_browser(path, {"scaling": 2})

    def test_serve_results_get_a_latency_chart_per_scenario(self):
        def served(scenario, p50, **counters):
            return entry(f"GPT2/nano/cpu/serve/scenario:{scenario}/max_batch:4/seq:16/fp32",
                         1.0, p50_ms=p50, p90_ms=2 * p50, p99_ms=3 * p50,
                         **{"p99.9_ms": 4 * p50}, **counters)
        served_doc = doc(served("SingleStream", 1.0, samples_per_s=900.0, valid=1),
                         served("Offline", 50.0, samples_per_s=3000.0, valid=0),
                         entry(FWD.format(32), 2.0, step_p50_ms=2.0, step_p90_ms=2.2,
                               step_p99_ms=2.6),
                         entry(FWD.replace("nano", "tiny").format(32), 2.0,
                               error="out of memory"))
        server = []
        for qps, bound in ((100, 20.0), (200, 20.0)):
            e = served("Server", 4.0, samples_per_s=qps * 0.95, bound_ms=bound, valid=1)
            e["name"] = e["run_name"] = e["name"].replace("Server", f"Server/qps:{qps}")
            server.append(e)
        path, text = self.html(self.write("serve.json", doc(served_doc["benchmarks"]
                                                            + server)))
        charts = [c for c in page_data(text)["charts"] if c["section"] == "serving"]
        # One chart a scenario, in LoadGen's order, one row a benchmark.
        self.assertEqual([c["config"]["data"]["labels"] for c in charts], [
            ["GPT2/nano/cpu/serve/scenario:SingleStream/max_batch:4/seq:16/fp32"],
            [f"GPT2/nano/cpu/serve/scenario:Server/qps:{q}/max_batch:4/seq:16/fp32"
             for q in (100, 200)],
            ["GPT2/nano/cpu/serve/scenario:Offline/max_batch:4/seq:16/fp32"]])
        single = charts[0]["config"]
        self.assertEqual([d["label"] for d in single["data"]["datasets"]],
                         ["p50", "p90", "p99", "p99.9"])
        self.assertEqual([d["data"] for d in single["data"]["datasets"]],
                         [[1.0], [2.0], [3.0], [4.0]])
        # Server's bound is the line; the other scenarios have none.
        self.assertEqual(charts[1]["config"]["options"]["ltbRefX"], 20.0)
        self.assertNotIn("ltbRefX", single["options"])
        self.assertEqual(points_by_section(page_data(text))["serving"], 4)
        self.assertIn("<td>VALID</td>", text)
        self.assertIn("<td>INVALID</td>", text)
        # The forward's step times stay in their own section.
        self.assertEqual(points_by_section(page_data(text))["distributions"], 1)
        self.check_in_browser(path, {"serving": 4, "distributions": 1})

    def test_a_real_run(self):
        bench = built_bench()
        if not os.access(bench, os.X_OK):
            self.skipTest(f"no built bench at {bench}")
        out = os.path.join(self.tmp, "real.json")
        # Small matmuls (Ops/matmul goes up to 8192x8192: tens of seconds a
        # step here) and the nano Transformer's forward phases.
        proc = subprocess.run(
            [bench, "--benchmark_filter=^(Ops/matmul/(256x256|2048x768x768)/|"
                    "Transformer/nano/cpu/forward)",
             "--batch=2", "--seq=32", "--benchmark_min_time=0.05", "--warmup_s=0.05", "--peak_flops=1e11",
             "--peak_bandwidth=1e10", f"--benchmark_out={out}", "--benchmark_out_format=json"],
            capture_output=True, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(out) as f:
            real = json.load(f)
        path, text = self.html(out)
        data = page_data(text)
        expected = {"roofline": sum(1 for e in real["benchmarks"]
                                    if "FLOP/s" in e and ("bytes/s" in e or "params" in e)),
                    "distributions": sum(1 for e in real["benchmarks"] if "step_p50_ms" in e)}
        self.assertGreaterEqual(expected["roofline"], 2)
        found = points_by_section(data)
        for section, n in expected.items():
            self.assertEqual(found[section], n, section)
        self.check_in_browser(path, found)

    def test_bad_input(self):
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)
        proc = self.html(empty, expect=2)
        self.assertIn("no .json result files", proc.stderr)
        corrupt = os.path.join(self.tmp, "corrupt")
        os.makedirs(corrupt)
        with open(os.path.join(corrupt, "x.json"), "w") as f:
            f.write("{not json")
        proc = self.html(corrupt, expect=2)
        self.assertIn("no bench result among its .json files", proc.stderr)
        self.assertIn("x.json: not JSON", proc.stderr)
        proc = self.run_tool("report", empty)
        self.assertExit(proc, 2)
        self.assertIn("is a directory", proc.stderr)
        for bad in self.bad_inputs():
            self.html(bad, expect=2)


if __name__ == "__main__":
    unittest.main()
