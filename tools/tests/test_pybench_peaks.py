"""The peaks pybench divides by where bench's run does not settle one:
a dtype missing from --peaks_from's file, or left out of --peak_flops, is
measured, as bench measures what it is not given, never left without a
peak (which would drop mfu without a word); a given --peak_flops or
--peak_bandwidth wins over the file's and leaves its other peaks in use;
and the aggregates of repetitions carry the label, as Google Benchmark's do.
"""
import json
import os
import tempfile
import types
import unittest
import unittest.mock

from tests.helpers import ToolTest

try:
    import torch
except ImportError:  # the tools' tests also run without torch
    torch = None


def bench_file(folder, context):
    path = os.path.join(folder, "cpp.json")
    with open(path, "w") as f:
        json.dump({"context": context, "benchmarks": []}, f)
    return path


def args(**given):
    return types.SimpleNamespace(**dict(dict(peak_flops=None, peak_bandwidth=None,
                                             peaks_from=None, device_list=["cpu"],
                                             dtypes=["fp32"]), **given))


FP32_ONLY = {"peak_flops_cpu_fp32": "4.203e+11 FLOP/s (measured: ...)",
             "peak_bandwidth_cpu": "3.246e+10 bytes/s (measured: ...)"}


@unittest.skipIf(torch is None, "needs torch")
class PeaksTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def peaks(self, **given):
        from ltb.pysuite import peaks
        with unittest.mock.patch.object(peaks, "native_cpu_arithmetic",
                                        lambda dtype, flags=None: True):
            return peaks.peak_flops(args(**given))

    def test_a_dtype_the_bench_file_lacks_is_measured(self):
        path = bench_file(self.tmp.name, FP32_ONLY)
        p = self.peaks(peaks_from=path, dtypes=["fp32", "bf16"])
        self.assertEqual(p[("cpu", "fp32")][0], 4.203e11)
        self.assertEqual(p[("cpu", "bandwidth")][0], 3.246e10)
        value, how = p[("cpu", "bf16")]
        self.assertGreater(value, 0)
        self.assertTrue(how.startswith("measured: "), how)
        self.assertIn(f"{path} holds no peak_flops_cpu_bf16", how)

    def test_the_files_peaks_are_taken_whole(self):
        """bench's context writes a peak to 4 digits; its entries' mfu_peak
        and mbu_peak hold the peak it divided by whole, which pybench divides
        by too (not the rounded one)."""
        path = os.path.join(self.tmp.name, "whole.json")
        entries = [
            {"name": "GPT2/nano/cpu/forward/batch:1/seq:8/fp32/manual_time",
             "mfu_peak": 420305728457.76697},
            {"name": "GPT2/nano/cpu/forward/batch:1/seq:8/fp32/manual_time_mean",
             "mfu_peak": 420305728457.76697},
            {"name": "GPT2/nano/cpu/forward/batch:1/seq:8/bf16/manual_time",
             "mfu_peak": 173034462442.49332},
            # a peak raised by a later benchmark, and another device's
            {"name": "GPT2/nano/cpu/train_step/batch:1/seq:8/fp32/manual_time",
             "mfu_peak": 4.4e11},
            {"name": "GPT2/nano/cuda/forward/batch:1/seq:8/fp32/manual_time",
             "mfu_peak": 420333333333.0},
            {"name": "Llama/1B/cpu/generate/batch:1/prompt:32/new:100/fp32/manual_time",
             "mbu_peak": 32459876543.21},
        ]
        with open(path, "w") as f:
            json.dump({"context": dict(FP32_ONLY, peak_flops_cpu_bf16="1.73e+11 FLOP/s (...)"),
                       "benchmarks": entries}, f)
        p = self.peaks(peaks_from=path, dtypes=["fp32", "bf16"])
        self.assertEqual(p[("cpu", "fp32")][0], 420305728457.76697)
        self.assertEqual(p[("cpu", "bf16")][0], 173034462442.49332)
        self.assertEqual(p[("cpu", "bandwidth")][0], 32459876543.21)

    def test_a_given_bandwidth_is_not_replaced_by_the_files(self):
        path = bench_file(self.tmp.name, FP32_ONLY)
        p = self.peaks(peaks_from=path, peak_bandwidth=1e11)
        self.assertEqual(p[("cpu", "bandwidth")], (1e11, "given (--peak_bandwidth)"))
        self.assertEqual(p[("cpu", "fp32")][0], 4.203e11)

    def test_a_given_peak_flops_keeps_the_files_bandwidth(self):
        path = bench_file(self.tmp.name, FP32_ONLY)
        p = self.peaks(peaks_from=path, peak_flops="fp32=1e12")
        self.assertEqual(p[("cpu", "fp32")], (1e12, "given (--peak_flops)"))
        self.assertEqual(p[("cpu", "bandwidth")][0], 3.246e10)

    def test_peaks_measured_under_other_threads_or_instructions_are_refused(self):
        """A bench file's CPU peaks hold for its threads and instructions:
        divided into a run of one thread, or of a simulated AVX2 CPU, they
        would be another machine's (mfu against two threads' AVX-512 peak)."""
        from ltb.pysuite.flags import BadFlag
        from ltb.pysuite import allowed_cpus, cpu_host
        host = cpu_host.entries(allowed_cpus(), os.cpu_count())
        here = {"intra_op_threads": str(torch.get_num_threads()),
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "cpu_affinity": host["cpu_affinity"], "cpu_quota": host["cpu_quota"]}
        path = bench_file(self.tmp.name, dict(FP32_ONLY, **here))
        self.assertEqual(self.peaks(peaks_from=path)[("cpu", "fp32")][0], 4.203e11)
        for other, said in (({"intra_op_threads": str(torch.get_num_threads() + 1)},
                             f"intra_op_threads {torch.get_num_threads() + 1} there, "
                             f"{torch.get_num_threads()} here"),
                            ({"onednn_max_cpu_isa": "AVX2"},
                             "onednn_max_cpu_isa AVX2 there, unset here"),
                            # measured under taskset -c 0: one CPU's peak
                            ({"cpu_affinity": "0 (1 of 64 logical CPUs)"},
                             "cpu_affinity 0 (1 of 64 logical CPUs) there")):
            path = bench_file(self.tmp.name, {**FP32_ONLY, **here, **other})
            with self.assertRaisesRegex(BadFlag, "its CPU peaks were measured under other "
                                                 "settings than this run's"):
                self.peaks(peaks_from=path)
            try:
                self.peaks(peaks_from=path)
            except BadFlag as e:
                self.assertIn(said, str(e))
        path = bench_file(self.tmp.name, {**FP32_ONLY, **here, "onednn_max_cpu_isa": "AVX2"})
        # A run on no CPU takes the file as it is (its CPU peaks unused).
        self.assertEqual(self.peaks(peaks_from=path, device_list=[], dtypes=[])
                         [("cpu", "fp32")][0], 4.203e11)
        with unittest.mock.patch.dict(os.environ, {"ONEDNN_MAX_CPU_ISA": "AVX2"}):
            self.assertEqual(self.peaks(peaks_from=path)[("cpu", "fp32")][0], 4.203e11)

    def test_a_dtype_peak_flops_leaves_out_is_measured(self):
        p = self.peaks(peak_flops="bf16=1e12", dtypes=["fp32", "bf16"])
        self.assertEqual(p[("cpu", "bf16")], (1e12, "given (--peak_flops)"))
        value, how = p[("cpu", "fp32")]
        self.assertGreater(value, 0)
        self.assertTrue(how.startswith("measured: "), how)
        self.assertNotIn("holds no", how)


@unittest.skipIf(torch is None, "needs torch")
class EndToEndTest(ToolTest):
    def run_pybench(self, *flags):
        from tests.test_pybench import pybench_in_process
        out = os.path.join(self.tmp, "py.json")
        code, stderr = pybench_in_process(
            "--benchmark_filter=^GPT2/nano/cpu/forward/", "--batch=1", "--seq=8",
            "--benchmark_min_time=0.01", "--warmup_s=0", f"--benchmark_out={out}", *flags)
        self.assertEqual(code, 0, stderr)
        with open(out) as f:
            return json.load(f)

    def test_mfu_of_a_dtype_the_bench_file_lacks(self):
        """A bench run of fp32 given to a pybench run of bf16 and fp32:
        both report mfu, and the context says how each peak was found."""
        from ltb.pysuite import peaks
        path = bench_file(self.tmp, FP32_ONLY)
        with unittest.mock.patch.object(peaks, "native_cpu_arithmetic",
                                        lambda dtype, flags=None: True):
            doc = self.run_pybench("--dtype=fp32,bf16", f"--peaks_from={path}")
        by_dtype = {e["name"].split("/")[-3]: e for e in doc["benchmarks"]}
        self.assertEqual(by_dtype["fp32"]["mfu_peak"], 4.203e11)
        self.assertIn("mfu", by_dtype["bf16"], by_dtype["bf16"])
        self.assertIn("holds no peak_flops_cpu_bf16", doc["context"]["peak_flops_cpu_bf16"])

    def test_aggregates_carry_the_label(self):
        """--benchmark_report_aggregates_only keeps why a counter is left
        out, as bench's aggregates do (Google Benchmark copies the label)."""
        doc = self.run_pybench("--peak_flops=1", "--benchmark_repetitions=2",
                               "--benchmark_report_aggregates_only=true")
        self.assertEqual([e["aggregate_name"] for e in doc["benchmarks"]],
                         ["mean", "median", "stddev", "cv"])
        for e in doc["benchmarks"]:
            self.assertRegex(e.get("label", ""), r"^mfu left out: the rate is ", e["name"])


if __name__ == "__main__":
    unittest.main()
