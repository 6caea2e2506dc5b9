"""The shared module: names, medians, formatting, cost; and the tools'
documentation page."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import unittest

from tests.helpers import REPO, TOOLS, doc, entry, repeated

from ltb.base import BadInput
from ltb.results.cost import hourly_prices
from ltb.results.entries import collect, errors, seconds
from ltb.results.format import format_bytes, format_change, format_seconds, format_value, markdown_table, relative_change
from ltb.results.names import base_name, name_without, parse_name, size_rank
from ltb.results.records import in_family, record_entries, split_contexts
from ltb.running.bench import describe_exit, exact_filter

GEN = "GPT2/small/cuda/generate/batch:1/prompt:32/new:100/fp32"


class NamesTest(unittest.TestCase):
    def test_parse_name(self):
        self.assertEqual(parse_name(GEN), {
            "family": "GPT2", "size": "small", "device": "cuda", "phase": "generate",
            "settings": {"batch": 1, "prompt": 32, "new": 100}, "dtype": "fp32",
            "nosync": False})
        ops = parse_name("Ops/matmul/2048x2048/cpu/bf16")
        self.assertEqual((ops["family"], ops["size"], ops["phase"], ops["device"], ops["dtype"]),
                         ("Ops", "matmul", "2048x2048", "cpu", "bf16"))
        nosync = parse_name("Transformer/nano/cuda:1/forward/batch:4/seq:512/fp16/nosync")
        self.assertTrue(nosync["nosync"])
        self.assertEqual(nosync["device"], "cuda:1")
        self.assertEqual(nosync["dtype"], "fp16")

    def test_base_name_and_name_without(self):
        e = {"name": GEN + "/manual_time/repeats:9_median", "run_name": GEN + "/manual_time/repeats:9"}
        self.assertEqual(base_name(e), GEN)
        self.assertEqual(name_without(GEN, "size"),
                         "GPT2/*/cuda/generate/batch:1/prompt:32/new:100/fp32")
        self.assertEqual(name_without(GEN, "prompt"),
                         "GPT2/small/cuda/generate/batch:1/prompt:*/new:100/fp32")
        self.assertEqual(name_without("Ops/copy/256MiB/cpu/fp32", "device"),
                         "Ops/copy/256MiB/*/fp32")

    def test_sizes_sort_small_to_large(self):
        sizes = ["2.7B", "xl", "nano", "resnet18", "medium", "small", "tiny", "large"]
        self.assertEqual(sorted(sizes, key=size_rank),
                         ["nano", "tiny", "small", "medium", "large", "xl", "2.7B", "resnet18"])


class ResultsTest(unittest.TestCase):
    def test_collect_takes_measured_repetitions_only(self):
        d = doc(repeated(GEN, [3.0, 1.0, 2.0], tokens_per_s=[1.0, 3.0, 2.0]),
                entry("Ops/noop/empty/cuda/fp32", 0.0, error="no CUDA device"))
        found = collect(d)
        self.assertEqual(list(found), [GEN])
        bench = found[GEN]
        self.assertEqual(bench.repetitions, 3)
        self.assertEqual(bench.median_time, 0.002)
        self.assertEqual(bench.median("tokens/s"), 2.0)
        self.assertEqual(bench.rate(), (2.0, "tokens"))
        self.assertEqual(errors(d), {"Ops/noop/empty/cuda/fp32": "no CUDA device"})

    def test_seconds_of_every_time_unit(self):
        for unit, expected in (("ns", 2e-9), ("us", 2e-6), ("ms", 2e-3), ("s", 2.0)):
            self.assertEqual(seconds({"real_time": 2, "time_unit": unit}), expected)
        with self.assertRaises(BadInput):
            seconds({"name": "x", "real_time": 2, "time_unit": "min"})

    def test_formatting(self):
        self.assertEqual(format_seconds(0.0123), "12.3 ms")
        self.assertEqual(format_seconds(2.5e-8), "25 ns")
        self.assertEqual(format_bytes(3 * 1024 ** 3), "3 GiB")
        self.assertEqual(format_value("tokens/s", 12345.0), "12.35k tokens/s")
        self.assertEqual(format_change(0.0712), "+7.1%")
        self.assertEqual(relative_change(0, 0), 0.0)
        self.assertEqual(markdown_table(["a", "b"], [["x|y", 1]]),
                         "| a | b |\n|---|---|\n| x\\|y | 1 |")

    def test_hourly_prices(self):
        docs = [doc(world_size="8"), doc()]
        args = argparse.Namespace(cost=[2.0, 3.0], device_count=None)
        self.assertEqual(hourly_prices(args, docs), [16.0, 3.0])
        args.device_count = [1, 2]
        self.assertEqual(hourly_prices(args, docs), [2.0, 6.0])
        args.cost = [1.0]
        with self.assertRaises(BadInput):
            hourly_prices(args, docs)


class RunningTest(unittest.TestCase):
    """What sweep and abtest share about bench processes and their output."""

    def test_exact_filter_escapes_the_name(self):
        name = "Ops/matmul/2048x768x768/cpu/fp32/manual_time"
        regex = exact_filter(name)
        self.assertEqual(regex, "^" + name + "$")
        self.assertTrue(re.search(regex, name))
        self.assertFalse(re.search(regex, name + "_mean"))
        self.assertEqual(exact_filter("a.b(c)"), "^a\\.b\\(c\\)$")

    def test_split_contexts_keeps_what_differs_with_each_run(self):
        runs = [{"status": "ok", "context": {"libtorch_version": "2.9.0", "date": "1",
                                             "peak": 5}, "benchmarks": [{"name": "a"}]},
                {"status": "failed", "name": "b", "error": "bench was killed by SIGKILL"},
                {"status": "ok", "context": {"libtorch_version": "2.9.0", "date": "2",
                                             "extra": 1}, "benchmarks": [{"name": "c"}]}]
        common, own = split_contexts(runs)
        self.assertEqual(common, {"libtorch_version": "2.9.0"})
        self.assertEqual(record_entries(runs[0], own),
                         [{"name": "a", "context": {"date": "1", "peak": 5}}])
        self.assertEqual(record_entries(runs[2], own),
                         [{"name": "c", "context": {"date": "2", "extra": 1}}])
        failed, = record_entries(runs[1], own)
        self.assertEqual((failed["name"], failed["error_occurred"], failed["error_message"]),
                         ("b", True, "bench was killed by SIGKILL"))
        # One run: everything is common, the entries stay as bench wrote them.
        common, own = split_contexts(runs[:1])
        self.assertEqual(common, runs[0]["context"])
        self.assertEqual(record_entries(runs[0], own), [{"name": "a"}])
        self.assertEqual(split_contexts([]), ({}, {}))

    def test_in_family_numbers_an_entry(self):
        e = {"name": "x", "family_index": 0, "real_time": 1.0}
        self.assertEqual(list(in_family(e, 3).items()),
                         [("name", "x"), ("family_index", 3), ("per_family_instance_index", 0),
                          ("real_time", 1.0)])

    def test_describe_exit(self):
        self.assertEqual(describe_exit(-9),
                         "bench was killed by SIGKILL (out of memory?)")
        self.assertEqual(describe_exit(-6), "bench was killed by SIGABRT")
        self.assertEqual(describe_exit(3), "bench exited with code 3")


def python_without_matplotlib():
    for python in ("/usr/bin/python3", shutil.which("python3")):
        if python and os.path.exists(python) and subprocess.run(
                [python, "-c", "import matplotlib"], capture_output=True).returncode != 0:
            return python
    return None


class VenvTest(unittest.TestCase):
    """A tool started by a Python without its packages uses the venv's."""

    @unittest.skipUnless(python_without_matplotlib(), "every Python here has matplotlib")
    def test_a_tool_restarts_with_the_venv_python(self):
        python = python_without_matplotlib()
        tool = os.path.join(TOOLS, "plot")
        env = dict(os.environ, LTB_VENV=sys.prefix)
        env.pop("LTB_REEXEC", None)
        proc = subprocess.run([python, tool, "--help"], capture_output=True, text=True, env=env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("PNG charts", proc.stdout)
        env["LTB_VENV"] = "/nonexistent/venv"
        proc = subprocess.run([python, tool, "--help"], capture_output=True, text=True, env=env)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("needs the Python packages matplotlib: run tools/setup", proc.stderr)


class ReadmeTest(unittest.TestCase):
    def test_every_tool_is_documented_with_an_example(self):
        with open(os.path.join(REPO, "docs", "tools.md")) as f:
            page = f.read()
        for tool in ("compare", "gate", "abtest", "report", "plot", "sweep", "export", "speedup"):
            self.assertRegex(page, rf"(?m)^tools/{tool} ", tool)
            self.assertTrue(os.access(os.path.join(TOOLS, tool), os.X_OK), tool)
        with open(os.path.join(REPO, "README.md")) as f:
            readme = f.read()
        self.assertIn("](docs/tools.md)", readme)
        # The source layout has its own page, which the README links.
        self.assertTrue(os.path.isfile(os.path.join(REPO, "docs", "layout.md")))
        self.assertIn("](docs/layout.md)", readme)


if __name__ == "__main__":
    unittest.main()
