"""ltb.report.gpu_page on small hand-made visits whose every figure is
known: two GPUs side by side, a benchmark one visit lacks or failed, a
counter absent, repetitions, and the source of each peak."""
import json
import os
import tempfile
import unittest

from ltb.report import gpu_page

STEMS = ("roofline", "precision", "default", "generation", "cuda_graphs", "train_epoch_util",
         "profile", "transfers", "sync_true", "sync_false")
DATASHEET = "(datasheet: NVIDIA H200 SXM (NVIDIA H200 Tensor Core GPU datasheet))"


def entry(name, **counters):
    return dict(name=name + "/iterations:3/manual_time", run_type="iteration",
                real_time=1.0, time_unit="ms", **counters)


def repetitions(name, values, counter):
    return [dict(name=f"{name}/iterations:3/manual_time/repeats:{len(values)}",
                 run_name=f"{name}/iterations:3/manual_time/repeats:{len(values)}",
                 run_type="iteration", repetitions=len(values), repetition_index=i,
                 real_time=1.0, time_unit="ms", **{counter: v})
            for i, v in enumerate(values)]


def visit(root, label, gpu, files, context=None):
    """A gpu-check folder of `files` ({stem: entries}), the others empty."""
    folder = os.path.join(root, label)
    os.makedirs(folder)
    for stem in STEMS:
        with open(os.path.join(folder, stem + ".json"), "w") as f:
            json.dump({"context": dict(gpus=gpu, **(context or {})),
                       "benchmarks": files.get(stem, [])}, f)
    return folder


def section(page, title):
    """{first cell: [cells]} of the table under a heading starting with title."""
    body = page.split(f"#### {title}")[1].split("####")[0]
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")]
            for line in body.splitlines() if line.startswith("| ")]
    return rows[0], {r[0]: r for r in rows[1:]}


FORWARD = "Transformer/small/cuda/forward/batch:4/seq:512/{}"
CPU = "Transformer/small/cpu/forward/batch:1/seq:64/fp32"


class SideBySideTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_two_gpus_a_missing_a_failed_and_an_absent_counter(self):
        first = visit(self.tmp.name, "a", "NVIDIA H200", {
            "precision": [
                entry(FORWARD.format("fp32"), **{"tokens/s": 120000.0, "mfu": 0.5}),
                entry(FORWARD.format("bf16"), **{"tokens/s": 300000.0, "mfu": 0.25,
                                                 "peak_mem": 1.5 * 2**30, "rel_err": 0.01}),
                entry(FORWARD.format("fp16"), **{"tokens/s": 400000.0})],
            "default": [entry(CPU, **{"tokens/s": 10000.0}),
                        entry(CPU.replace("/cpu/", "/cuda/"), **{"tokens/s": 60000.0})]})
        failed = dict(entry(FORWARD.format("bf16"), **{"tokens/s": 999.0}),
                      error_occurred=True, error_message="out of memory")
        second = visit(self.tmp.name, "b", "NVIDIA H100 80GB HBM3", {
            # fp32 without its mfu, bf16 failed, fp16 not run at all
            "precision": [entry(FORWARD.format("fp32"), **{"tokens/s": 150000.0}), failed],
            "default": [entry(CPU, **{"tokens/s": 10000.0}),
                        entry(CPU.replace("/cpu/", "/cuda/"), **{"tokens/s": 45000.0})]})
        head, rows = section(gpu_page.render(first, second), "Every family")
        self.assertEqual(head[-2:], ["fp32 H100/H200", "bf16 H100/H200"])
        row = dict(zip(head, rows["Transformer/small forward"]))
        self.assertEqual(row["unit"], "tokens/s")
        self.assertEqual(row["fp32"], "120k / 150k")
        self.assertEqual(row["bf16"], "300k / —")  # the failed entry is no figure
        self.assertEqual(row["fp16"], "400k / —")
        self.assertEqual(row["mfu fp32"], "0.5 / —")
        self.assertEqual(row["peak GiB bf16"], "1.50 / —")
        self.assertEqual(row["rel_err bf16"], "0.01 / —")
        self.assertEqual(row["GPU/CPU fp32"], "6.0x / 4.5x")
        self.assertEqual(row["fp32 H100/H200"], "1.25")
        self.assertEqual(row["bf16 H100/H200"], "")  # nothing to divide by

    def test_repetitions_show_their_median_under_the_plain_name(self):
        """A visit run with repetitions shows each benchmark's median, in the
        same row as a visit's single run: not the last repetition, and not a
        row of its own named /repeats:N."""
        copy = "Ops/copy/2048MiB/cuda/fp32"
        context = {"peak_bandwidth_cuda": f"4.8e+12 bytes/s {DATASHEET}"}
        once = visit(self.tmp.name, "once", "NVIDIA H200", {
            "roofline": [entry(copy, **{"bytes/s": 4.0e12, "mbu": 4.0e12 / 4.8e12,
                                        "mbu_peak": 4.8e12})],
            "precision": [entry(FORWARD.format("fp32"), **{"tokens/s": 100000.0})]}, context)
        reps = repetitions(copy, [3.0e12, 2.0e12, 4.4e12], "bytes/s")
        for r in reps:
            r.update(mbu=r["bytes/s"] / 4.8e12, mbu_peak=4.8e12)
        thrice = visit(self.tmp.name, "thrice", "NVIDIA H200", {
            "roofline": reps,
            "precision": repetitions(FORWARD.format("fp32"), [90000.0, 300000.0, 110000.0],
                                     "tokens/s")}, context)
        page = gpu_page.render(once, thrice)
        _, roof = section(page, "The two ceilings")
        self.assertEqual(list(roof), [f"`{copy}`"])
        self.assertEqual(roof[f"`{copy}`"][1], "4.00 TB/s / 3.00 TB/s")
        self.assertEqual(roof[f"`{copy}`"][3], "0.833 / 0.625")
        self.assertEqual(roof[f"`{copy}`"][-1], "0.75")
        head, fam = section(page, "Every family")
        row = dict(zip(head, fam["Transformer/small forward"]))
        self.assertEqual(row["fp32"], "100k / 110k")
        self.assertEqual(row["fp32 thrice/once"], "1.10")

    def test_a_measured_peak_is_not_called_a_datasheet_peak(self):
        """bench divides by a datasheet's peak only where it knows the GPU;
        else it measures one (or is given one): the table says which."""
        matmul, copy = "Ops/matmul/8192x8192/cuda/bf16", "Ops/copy/2048MiB/cuda/fp32"
        context = {"peak_flops_cuda_bf16": f"9.894e+14 FLOP/s {DATASHEET}",
                   "peak_bandwidth_cuda": "1.5e+12 bytes/s (measured: the faster of a 256MiB "
                                          "copy (bytes read + written) and a matrix-vector "
                                          "product reading 256MiB; the best of 3 runs)"}
        folder = visit(self.tmp.name, "l4", "NVIDIA L4", {"roofline": [
            entry(matmul, **{"FLOP/s": 7.5e14, "mfu": 7.5e14 / 9.894e14, "mfu_peak": 9.894e14}),
            entry(copy, **{"bytes/s": 1.2e12, "mbu": 0.8, "mbu_peak": 1.5e12})]}, context)
        head, rows = section(gpu_page.render(folder), "The two ceilings")
        self.assertNotIn("datasheet peak", head)
        self.assertEqual(rows[f"`{matmul}`"][2], "989 TFLOP/s (datasheet)")
        self.assertEqual(rows[f"`{copy}`"][2], "1.5 TB/s (measured)")
        # A peak given on the command line, and one the context does not name.
        context["peak_bandwidth_cuda"] = "2e+12 bytes/s (--peak_bandwidth)"
        del context["peak_flops_cuda_bf16"]
        folder = visit(self.tmp.name, "given", "NVIDIA L4", {"roofline": [
            entry(matmul, **{"FLOP/s": 7.5e14, "mfu": 0.75, "mfu_peak": 1e15}),
            entry(copy, **{"bytes/s": 1.2e12, "mbu": 0.6, "mbu_peak": 2e12})]}, context)
        _, rows = section(gpu_page.render(folder), "The two ceilings")
        self.assertEqual(rows[f"`{copy}`"][2], "2 TB/s (--peak_bandwidth)")
        self.assertEqual(rows[f"`{matmul}`"][2], "1000 TFLOP/s (source unknown)")


if __name__ == "__main__":
    unittest.main()
