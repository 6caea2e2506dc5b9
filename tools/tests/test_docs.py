"""The documentation: a short README that links every page under docs/, and
relative links that lead to files (and headings) that exist."""
import glob
import os
import re
import unittest

from tests.helpers import REPO

README = os.path.join(REPO, "README.md")
DOCS = os.path.join(REPO, "docs")
README_MAX_LINES = 300

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:.|\n)*?\1")
# [text](target) and ![alt](target); a target ends at a space or ')'.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def pages():
    return sorted(glob.glob(os.path.join(DOCS, "*.md")))


def prose(text):
    """The text without fenced code blocks and code spans, where brackets
    and parentheses are code, not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text):
    return LINK.findall(prose(text))


def relative(target):
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not target.startswith("//")


def anchors(text):
    """GitHub's heading anchors: lower case, punctuation other than '-' and
    '_' dropped, spaces as '-', a repeated anchor numbered -1, -2, ..."""
    seen = {}
    found = set()
    for heading in re.findall(r"(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$", FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


class DocsTest(unittest.TestCase):
    def test_the_readme_is_short(self):
        with open(README, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        self.assertLessEqual(lines, README_MAX_LINES,
                             "README.md is a short read: move detail into a page under docs/")

    def test_the_readme_links_every_page(self):
        self.assertTrue(pages(), "docs/ has no pages")
        linked = {os.path.normpath(os.path.join(REPO, t.split("#", 1)[0]))
                  for t in links(read(README)) if relative(t)}
        for page in pages():
            self.assertIn(page, linked, f"README.md does not link docs/{os.path.basename(page)}")

    def test_every_page_starts_with_a_title_and_links_back(self):
        for page in pages():
            text = read(page)
            self.assertRegex(text, r"^# \S", f"{page} starts with its title")
            self.assertIn("](../README.md)", text, f"{page} links back to the README")

    def test_relative_links_lead_to_files_and_headings_that_exist(self):
        for doc in [README] + pages():
            text = read(doc)
            for target in links(text):
                if not relative(target):
                    continue
                path, _, anchor = target.partition("#")
                where = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
                name = os.path.relpath(doc, REPO)
                self.assertTrue(os.path.exists(where), f"{name} links {target}: no such file")
                if anchor and where.endswith(".md"):
                    self.assertIn(anchor, anchors(read(where)),
                                  f"{name} links {target}: no such heading")


if __name__ == "__main__":
    unittest.main()


class GpuResultsPageTest(unittest.TestCase):
    """docs/gpu-results.md's tables are what ltb.report.gpu_page writes from
    the JSON they name: a number edited by hand, or a file replaced without
    the page, fails here."""

    PAGE = os.path.join(DOCS, "gpu-results.md")
    MARK = re.compile(r"<!-- tables from ([^>]+?) -->\n(.*?)<!-- end of tables -->", re.S)

    def folders(self):
        found = self.MARK.findall(read(self.PAGE))
        self.assertTrue(found, "no <!-- tables from DIR --> in docs/gpu-results.md")
        return [([os.path.join(DOCS, f) for f in folders.split()], tables)
                for folders, tables in found]

    def test_the_tables_are_written_from_the_json(self):
        from ltb.report import gpu_page
        for folders, tables in self.folders():
            self.assertEqual(tables, gpu_page.render(*folders), folders)

    def test_every_family_and_phase_at_its_small_size_ran_in_three_dtypes(self):
        from ltb.report import gpu_page
        for folder in [f for folders, _ in self.folders() for f in folders]:
            ran = gpu_page.entries(folder, "precision")
            for family, size in gpu_page.SMALL.items():
                phases = {n.split("/")[3] for n in ran if n.startswith(f"{family}/{size}/cuda/")}
                self.assertTrue(phases, f"{folder}: {family}")
                for phase in phases:
                    for dtype in gpu_page.DTYPES:
                        self.assertTrue(any(n.startswith(f"{family}/{size}/cuda/{phase}/")
                                            and f"/{dtype}" in n for n in ran),
                                        f"{folder}: {family}/{size} {phase} {dtype}")
            for name, e in ran.items():  # a peak a benchmark beats is a wrong peak
                for u in ("mfu", "mbu"):
                    self.assertLessEqual(e.get(u, 0), 1, f"{folder}: {name}: {u}")

    def test_a_visit_that_served_generation_shows_ttft_and_tpot(self):
        """A visit whose gpu-check served generation gains its section, with
        LoadGen's TTFT and TPOT percentiles and the graphed run beside the
        eager one; visits without those files have no such section."""
        import json
        import shutil
        import tempfile
        from ltb.report import gpu_page
        h100 = os.path.join(DOCS, "results", "h100-2026-11-27")
        title = "#### Generation under load"
        self.assertNotIn(title, gpu_page.render(h100))
        name = "GPT2/small/cuda/serve/scenario:{}/max_batch:8/prompt:32:128/output:16:64/fp32"
        server = dict(name=name.format("Server/qps:8") + "/iterations:1/manual_time",
                      run_type="iteration", **{"tokens/s": 310.5, "ttft_p50_ms": 12.25,
                      "ttft_p99_ms": 40.0, "tpot_p50_ms": 6.5, "tpot_p99_ms": 9.75,
                      "mean_active_slots": 5.5},
                      label="scenario:Server VALID")
        eager = dict(name=name.format("Offline") + "/iterations:1/manual_time",
                     run_type="iteration", **{"tokens/s": 900.0, "mean_active_slots": 7.9},
                     label="scenario:Offline VALID")
        graphed = dict(eager, name=name.format("Offline") + "/graph/iterations:1/manual_time",
                       **{"tokens/s": 1800.0})
        with tempfile.TemporaryDirectory() as tmp:
            visit = shutil.copytree(h100, os.path.join(tmp, "h100"))
            for stem, entries in (("serve_generate", [server]),
                                  ("serve_graphs", [eager, graphed])):
                with open(os.path.join(visit, stem + ".json"), "w") as f:
                    json.dump({"context": {}, "benchmarks": entries}, f)
            page = gpu_page.render(visit)
            both = gpu_page.render(h100, visit)
        rows = [line for line in page.split(title)[1].split("####")[0].splitlines()
                if line.startswith("| `")]
        self.assertEqual(rows, [
            f"| `{name.format('Server/qps:8')}` | 310.5 | 12.2 | 40 | 6.5 | 9.75 | 5.5 | VALID |",
            f"| `{name.format('Offline')}` | 900 |  |  |  |  | 7.9 | VALID |",
            f"| `{name.format('Offline')}/graph` | 1.8k |  |  |  |  | 7.9 | VALID |"])
        # Beside a visit that did not serve: its cells are marked missing,
        # one figure a visit in each cell.
        self.assertIn(f"| `{name.format('Server/qps:8')}` | — / 310.5 | — / 12.2 | — / 40 |",
                      both)

    def test_two_gpus_side_by_side(self):
        """Each cell of two visits' tables is the two visits' own cells, the
        ratio columns divide the second's figure by the first's as the JSON
        has them, and a row one visit lacks is marked in its place."""
        import json
        import shutil
        import tempfile
        from ltb.report import gpu_page
        h200, h100 = (os.path.join(DOCS, "results", f) for f in ("h200-2026-11-26",
                                                                  "h100-2026-11-27"))
        with tempfile.TemporaryDirectory() as tmp:
            fewer = shutil.copytree(h100, os.path.join(tmp, "h100"))
            path = os.path.join(fewer, "roofline.json")
            with open(path) as f:
                doc = json.load(f)
            doc["benchmarks"] = [e for e in doc["benchmarks"]
                                 if not e["name"].startswith("Ops/copy/2048MiB/cuda/bf16")]
            with open(path, "w") as f:
                json.dump(doc, f)
            page = gpu_page.render(h200, fewer)

        def table(text, title):
            section = text.split(f"#### {title}")[1].split("####")[0]
            rows = [line.strip("|").split(" | ") for line in section.strip().splitlines()
                    if line.startswith("| ")]
            return rows[0], {r[0].strip(): [c.strip() for c in r] for r in rows[1:]}

        self.assertIn("Each cell reads H200 / H100", page)
        title = "The two ceilings"
        head, both = table(page, title)
        self.assertEqual(head[-1].strip(), "measured H100/H200")
        _, one = table(gpu_page.render(h200), title)
        _, other = table(gpu_page.render(h100), title)
        bf16_copy, fp32_copy = "`Ops/copy/2048MiB/cuda/bf16`", "`Ops/copy/2048MiB/cuda/fp32`"
        for name in one:
            theirs = other[name] if name != bf16_copy else [name] + ["—"] * 3
            self.assertEqual(both[name][1:4], [f"{a} / {b}" for a, b in
                                               zip(one[name][1:4], theirs[1:4])], name)
        self.assertEqual(both[bf16_copy][-1], "")  # no ratio to a missing row
        rates = []
        for folder in (h200, h100):
            with open(os.path.join(folder, "roofline.json")) as f:
                rates.append(next(e["bytes/s"] for e in json.load(f)["benchmarks"]
                                  if e["name"].startswith("Ops/copy/2048MiB/cuda/fp32")))
        self.assertEqual(both[fp32_copy][-1], f"{rates[1] / rates[0]:.2f}")
        self.assertEqual(both[fp32_copy][-1], "0.71")  # 3.35 TB/s against 4.8: 0.70

    def test_a_folder_without_the_files_is_named(self):
        from ltb.base import BadInput
        from ltb.report import gpu_page
        with self.assertRaisesRegex(BadInput, "no-such-visit: no such folder"):
            gpu_page.render(os.path.join(DOCS, "no-such-visit"))
        with self.assertRaisesRegex(BadInput, "roofline.json: no such file"):
            gpu_page.roofline(DOCS)


class PeakCacheTableTest(unittest.TestCase):
    """docs/measurement.md's table of runs sharing a peak record holds what
    the files in docs/results/peak-cache/ say, and what it shows holds
    there: each run divides by the best of the runs so far."""
    ROWS = {"2-core AVX2 EPYC": "epyc-runs.txt", "16-vCPU AMX Xeon": "xeon-runs.txt"}

    @staticmethod
    def runs(path):
        own, used, sums = [], [], []
        for line in read(path).splitlines():
            m = re.match(r"run \d+: peak (\S+) \| this run measured (\S+) \|", line)
            if m:
                used.append(float(m[1]) / 1e9)
                own.append(float(m[2]) / 1e9)
            m = re.match(r"torch\.sum .* best of \d+: (\S+) bytes/s", line)
            if m:
                sums.append((len(used), float(m[1]) / 1e9))  # (runs before it, GB/s)
        return own, used, sums

    def test_the_table_is_the_files(self):
        text = read(os.path.join(DOCS, "measurement.md"))
        for machine, name in self.ROWS.items():
            own, used, sums = self.runs(os.path.join(DOCS, "results", "peak-cache", name))
            self.assertEqual(len(own), 6, name)
            row = next(line for line in text.splitlines() if line.startswith(f"| {machine}"))
            cells = [c.strip() for c in row.strip("|").split("|")]
            self.assertEqual(cells[1], ", ".join(f"{v:.4g}" for v in own), machine)
            self.assertEqual(cells[2], ", ".join(f"{v:.4g}" for v in used), machine)
            self.assertTrue(cells[3].startswith(f"{max(s for _, s in sums):.1f} "), machine)
            # Each run divided by the best measured so far, which no
            # torch.sum before it beat.
            for i, peak in enumerate(used):
                self.assertAlmostEqual(peak, max(own[:i + 1]), delta=0.006, msg=f"{name} run {i + 1}")
            for before, rate in sums:
                if before < len(used):
                    self.assertLess(rate, used[before], f"{name}: torch.sum before run {before + 1}")
