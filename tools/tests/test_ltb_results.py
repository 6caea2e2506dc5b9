"""The shared module: names, medians, formatting, cost; and the tools'
documentation page."""
import argparse
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests.helpers import REPO, TOOLS, doc, entry, repeated

from ltb.base import BadInput
from ltb.results.cost import hourly_prices
from ltb.results.entries import all_names, collect, errors, seconds
from ltb.results.load import START_CONTEXT, load, parse
from ltb.results.format import format_bytes, format_change, format_seconds, format_value, markdown_table, relative_change
from ltb.results.names import base_name, name_without, parse_name, size_rank
from ltb.results.records import in_family, record_entries, split_contexts
from ltb.bench_process.bench import describe_exit, exact_filter

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
        # Without run_name (Google Benchmark before 1.5), an aggregate is still
        # its benchmark's, not one of its own that a file without repetitions lost.
        old = {"name": GEN + "/manual_time_median", "run_type": "aggregate",
               "aggregate_name": "median"}
        self.assertEqual(base_name(old), GEN)
        self.assertEqual(base_name({"name": GEN + "/manual_time"}), GEN)
        self.assertEqual(all_names(doc([{k: v for k, v in e.items() if k != "run_name"}
                                         for e in repeated(GEN, [1.0, 2.0, 3.0])])), [GEN])
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
        train = collect(doc(entry("T/s/cuda/train_step/batch:2/seq:8/fp32", 1.0,
                                  grad_buckets=2)))["T/s/cuda/train_step/batch:2/seq:8/fp32"]
        fwd = collect(doc(entry("T/s/cuda/forward/batch:2/seq:8/fp32", 1.0)))[
            "T/s/cuda/forward/batch:2/seq:8/fp32"]
        args = argparse.Namespace(cost=[2.0, 3.0], device_count=None)
        prices = hourly_prices(args, docs)
        # A data-parallel benchmark's counters sum 8 ranks' work; a forward
        # ran on each rank alone, and reports rank 0's device's.
        self.assertEqual([p.per_hour(train) for p in prices], [16.0, 3.0])
        self.assertEqual([p.per_hour(fwd) for p in prices], [2.0, 3.0])
        args.device_count = [1, 2]
        prices = hourly_prices(args, docs)
        self.assertEqual([p.per_hour(b) for p in prices for b in (train, fwd)],
                         [2.0, 2.0, 6.0, 6.0])
        args.cost = [1.0]
        with self.assertRaises(BadInput):
            hourly_prices(args, docs)


def bench_text(entries, start=True, end=True, **late):
    """A result file as bench writes it (the context at the start, each
    entry, the context as the run left it), laid out as Google Benchmark
    does: 2 spaces a level, an entry's members 6 deep."""
    context = {"date": "2026-11-27T10:00:00+00:00", "host_name": "h\u00f6st",
               "caches": [{"type": "Data", "level": 1, "size": 32768}],
               "peak_flops_cpu_fp32": "4e11 FLOP/s (measured)"}
    head = "{\n"
    if start:
        head += f'  "{START_CONTEXT}": ' + json.dumps(context, indent=2, ensure_ascii=False).replace("\n", "\n  ")
        head += ",\n"
    body = ",\n".join("    " + json.dumps(e, indent=2, ensure_ascii=False).replace("\n", "\n    ") for e in entries)
    text = head + '  "benchmarks": [\n' + body
    if end:
        text += '\n  ],\n  "context": ' + json.dumps(dict(context, **late), indent=2,
                                                     ensure_ascii=False).replace(
            "\n", "\n  ") + "\n}\n"
    return text


class CutFileTest(unittest.TestCase):
    """A file that a killed run cut short keeps its whole entries and context."""

    ENTRIES = [entry(f"Ops/copy/{n}MiB/cpu/fp32", 1.0 + n, bytes_per_s=1e9 * n,
                     label="caf\u00e9 \u2013 copy") for n in (1, 2, 4, 8)]

    def parse(self, text, path="r.json"):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            doc = parse(text.encode(), path)
        return doc, err.getvalue()

    def cut_at(self, text, marker, occurrence, after=0):
        """text cut `after` characters past the occurrence-th marker."""
        i = -1
        for _ in range(occurrence):
            i = text.index(marker, i + 1)
        return text[:i + after]

    def test_a_whole_file_reads_as_it_is_and_says_nothing(self):
        text = bench_text(self.ENTRIES, peak_flops_cpu_fp32="5e11 (raised)")
        doc, err = self.parse(text)
        self.assertEqual(err, "")
        self.assertEqual(doc["benchmarks"], self.ENTRIES)
        self.assertEqual(doc["context"]["peak_flops_cpu_fp32"], "5e11 (raised)")
        self.assertNotIn(START_CONTEXT, doc)

    def test_cuts_keep_every_whole_entry(self):
        text = bench_text(self.ENTRIES, peak_flops_cpu_fp32="5e11 (raised)")
        entry_starts = "\n    {"
        cases = [
            # (where, the cut text, whole entries, context's peak)
            ("right after the list opens", self.cut_at(text, '"benchmarks": [', 1, 16), 0, None),
            ("between entries 2 and 3", self.cut_at(text, entry_starts, 3), 2, "4e11"),
            ("after entry 2's comma", self.cut_at(text, entry_starts, 3, 1), 2, "4e11"),
            ("mid-entry 3, between members", self.cut_at(text, '"iterations"', 3), 2, "4e11"),
            ("mid-string, in entry 4's name", self.cut_at(text, '"name": "Ops/', 4, 14), 3,
             "4e11"),
            ("mid-number, in entry 4's time", self.cut_at(text, '"real_time": 9', 1, 14), 3,
             "4e11"),
            ("after the last entry", self.cut_at(text, "\n  ],", 1), 4, "4e11"),
            ("inside the context at the end", self.cut_at(text, '"caches"', 2), 4, "4e11"),
        ]
        for where, cut, whole, peak in cases:
            with self.subTest(where):
                self.assertNotEqual(cut, text)
                if whole == 0:
                    with self.assertRaisesRegex(BadInput, "r.json: not complete JSON, and no "
                                                "benchmark entry in it is whole"):
                        self.parse(cut)
                    continue
                doc, err = self.parse(cut)
                self.assertEqual(doc["benchmarks"], self.ENTRIES[:whole])
                self.assertTrue(doc["context"]["peak_flops_cpu_fp32"].startswith(peak))
                self.assertEqual(doc["context"]["caches"][0]["size"], 32768)
                self.assertNotIn(START_CONTEXT, doc)
                self.assertEqual(err.count("\n"), 1, err)
                self.assertIn(f"r.json: the run did not finish (the file is cut short): "
                              f"recovered {whole} complete benchmark entries and its context",
                              err)

    def test_a_cut_in_a_character_of_an_entry_keeps_those_before(self):
        raw = bench_text(self.ENTRIES).encode()
        cut = raw[:raw.index("\u2013".encode(), raw.index(b'"Ops/copy/4MiB')) + 2]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            doc = parse(cut, "r.json")
        self.assertEqual(doc["benchmarks"], self.ENTRIES[:2])
        self.assertIn("recovered 2 complete benchmark entries", err.getvalue())

    def test_a_cut_inside_the_context_at_the_start_has_nothing_to_give(self):
        text = bench_text(self.ENTRIES)
        for cut in (self.cut_at(text, '"caches"', 1), self.cut_at(text, '"date"', 1, 20),
                    text[:1], ""):
            with self.subTest(cut=cut[-20:]), self.assertRaisesRegex(BadInput, "r.json: not "):
                self.parse(cut)

    def test_google_benchmarks_own_layout_and_the_older_one(self):
        # Google Benchmark writes its context first; an older bench wrote it
        # only at the end, so its cut files have none.
        gb = json.dumps({"context": {"date": "d"}, "benchmarks": self.ENTRIES}, indent=2)
        doc, err = self.parse(gb[:gb.index('"Ops/copy/2MiB')])
        self.assertEqual((len(doc["benchmarks"]), doc["context"]), (1, {"date": "d"}))
        self.assertIn("recovered 1 complete benchmark entries and its context", err)
        older = bench_text(self.ENTRIES, start=False, end=False)
        doc, err = self.parse(older)
        self.assertEqual(doc["benchmarks"], self.ENTRIES)
        self.assertNotIn("context", doc)
        self.assertIn("recovered 4 complete benchmark entries and no context", err)

    def test_what_no_cut_explains_is_not_json(self):
        text = bench_text(self.ENTRIES)
        bad = {"garbage after the object": text + "]",
               "a member without a colon": '{"context" {}}',
               "not an object": "[1, 2",
               "not JSON at all": "{not json",
               "bytes that are not UTF-8 early": None}
        for what, cut in bad.items():
            with self.subTest(what), self.assertRaisesRegex(BadInput, "r.json: not JSON"):
                if cut is None:
                    parse(b"\xff\xfe" + text.encode(), "r.json")
                else:
                    self.parse(cut)

    def test_load_reads_a_cut_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.json")
            text = bench_text(self.ENTRIES)
            with open(path, "w") as f:
                f.write(self.cut_at(text, '"Ops/copy/8MiB', 1))
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                doc = load(path)
        self.assertEqual([e["name"] for e in doc["benchmarks"]],
                         [e["name"] for e in self.ENTRIES[:3]])
        self.assertIn("recovered 3 complete benchmark entries", err.getvalue())


class ForeignFileTest(unittest.TestCase):
    """A JSON file whose entries are not Google Benchmark's is one sentence
    naming the file and the entry, in every tool, never a traceback."""

    GOOD = {"name": "Ops/noop/cpu", "run_type": "iteration", "iterations": 1,
            "real_time": 1.0, "cpu_time": 1.0, "time_unit": "ms"}

    def write(self, tmp, document):
        path = os.path.join(tmp, "r.json")
        with open(path, "w") as f:
            json.dump(document, f)
        return path

    def test_each_malformed_entry_or_context_is_named(self):
        cases = {
            "a name that is no string": ([dict(self.GOOD, name=5)], {},
                                         "entry 1 has no name"),
            "an empty name": ([self.GOOD, dict(self.GOOD, name="")], {},
                              "entry 2 has no name"),
            "a time that is no number": ([{"name": "a/b", "real_time": None}], {},
                                         "a/b: its real_time is not a number"),
            "a time that is text": ([dict(self.GOOD, cpu_time="x")], {},
                                    "Ops/noop/cpu: its cpu_time is not a number"),
            "an unknown unit": ([dict(self.GOOD, time_unit="fortnights")], {},
                                "Ops/noop/cpu: unknown time unit 'fortnights'; valid: ns, us, "
                                "ms, s"),
            "a context that is a list": ([self.GOOD], [], "its context is not an object"),
            "a counter that is text": ([dict(self.GOOD, **{"tokens/s": "fast"})], {},
                                       "Ops/noop/cpu: its tokens/s is not a number"),
            "a counter that is a list": ([dict(self.GOOD, peak_mem=[1, 2])], {},
                                         "Ops/noop/cpu: its peak_mem is not a number"),
            "a counter that is null": ([dict(self.GOOD, mfu=None)], {},
                                       "Ops/noop/cpu: its mfu is not a number"),
            "a counter that is true": ([dict(self.GOOD, mbu=True)], {},
                                       "Ops/noop/cpu: its mbu is not a number"),
            "iterations that are text": ([dict(self.GOOD, iterations="3")], {},
                                         "Ops/noop/cpu: its iterations is not a number"),
        }
        with tempfile.TemporaryDirectory() as tmp:
            for what, (entries, context, message) in cases.items():
                with self.subTest(what):
                    path = self.write(tmp, {"context": context, "benchmarks": entries})
                    with self.assertRaises(BadInput) as caught:
                        load(path)
                    self.assertIn(f"{path}: not a Google Benchmark JSON ({message}",
                                  str(caught.exception))
            # A failed entry or an aggregate needs no time of its own, and a
            # measured one's absent time is refused by the reader that needs it.
            path = self.write(tmp, {"benchmarks": [
                self.GOOD, {"name": "x/y", "error_occurred": True, "error_message": "no"},
                {"name": "x/z", "run_type": "aggregate", "aggregate_name": "BigO",
                 "big_o": "N", "cpu_coefficient": 1, "real_coefficient": 1},
                {"name": "x/w"},
                # Not counters: what bench, pybench and sweep write beside them.
                dict(self.GOOD, label="cache-resident", context={"date": "today"},
                     aggregate_unit="percentage", skipped=False, skip_message="")]})
            self.assertEqual(len(load(path)["benchmarks"]), 5)
            with self.assertRaisesRegex(BadInput, "x/w: no real_time, so no time to read"):
                seconds(load(path)["benchmarks"][3])

    def test_tools_exit_2_without_a_traceback(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = self.write(tmp, {"context": [], "benchmarks": [dict(self.GOOD, name=5)]})
            for tool in ("report", "compare", "gate", "plot", "scaling"):
                with self.subTest(tool):
                    proc = subprocess.run([sys.executable, os.path.join(TOOLS, tool), bad, bad],
                                          capture_output=True, text=True, timeout=300)
                    self.assertEqual(proc.returncode, 2, proc.stderr)
                    self.assertNotIn("Traceback", proc.stderr)
                    self.assertIn(f"{bad}: not a Google Benchmark JSON", proc.stderr)
            untimed = self.write(tmp, {"context": {}, "benchmarks": [{"name": "a/b"}]})
            for tool in ("report", "gate"):
                with self.subTest(tool, untimed=True):
                    proc = subprocess.run([sys.executable, os.path.join(TOOLS, tool), untimed,
                                           untimed], capture_output=True, text=True, timeout=300)
                    self.assertEqual(proc.returncode, 2, proc.stderr)
                    self.assertNotIn("Traceback", proc.stderr)
                    self.assertIn("a/b: no real_time", proc.stderr)
            # A counter every tool reads as a number, given as text.
            text = self.write(tmp, {"context": {}, "benchmarks": [
                dict(self.GOOD, **{"tokens/s": "fast"}),
                dict(self.GOOD, name="Ops/noop/cuda", **{"tokens/s": 2.0})]})
            for tool in ("report", "compare", "gate", "plot"):
                with self.subTest(tool, counter="text"):
                    proc = subprocess.run([sys.executable, os.path.join(TOOLS, tool), text, text],
                                          capture_output=True, text=True, timeout=300)
                    self.assertEqual(proc.returncode, 2, proc.stderr)
                    self.assertNotIn("Traceback", proc.stderr)
                    self.assertIn(f"{text}: not a Google Benchmark JSON (Ops/noop/cpu: its "
                                  "tokens/s is not a number)", proc.stderr)
            # Google's compare.py reads the process time too.
            no_cpu = {k: v for k, v in self.GOOD.items() if k != "cpu_time"}
            bad = self.write(tmp, {"context": {}, "benchmarks": [no_cpu]})
            proc = subprocess.run([sys.executable, os.path.join(TOOLS, "compare"), bad, bad],
                                  capture_output=True, text=True, timeout=300)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertNotIn("Traceback", proc.stderr)
            self.assertIn(f"{bad}: Ops/noop/cpu has no cpu_time, which compare.py compares",
                          proc.stderr)


class RunTest(unittest.TestCase):
    """ltb.base.run: how every tool ends."""

    def test_a_ctrl_c_main_does_not_handle_is_one_line_and_exit_130(self):
        from ltb.base import EXIT_INTERRUPTED, run

        def interrupted():
            raise KeyboardInterrupt

        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as done:
            run(interrupted)
        self.assertEqual(done.exception.code, EXIT_INTERRUPTED)
        self.assertEqual(err.getvalue(), f"{os.path.basename(sys.argv[0])}: interrupted\n")


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
