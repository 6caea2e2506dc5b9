"""gpu-check: the GPU acceptance, one module a check over a shared runner
(runner); GpuCheck runs the checks in the order the summary lists them."""
from ltb.gpu.check import (ctest, data_parallel, default_suite, generation, memory_guard, oom,
                           precision, profile, roofline, sanity, serve, sync, tf32_graphs,
                           train_epoch, transfers)
from ltb.gpu.check.runner import Runner
from ltb.gpu.check.summary import FAILED, RAN, Check

__all__ = ["Check", "FAILED", "GpuCheck", "RAN", "STEPS"]

# (label, check): the label names the step for --budget and the summary.
STEPS = (("bench", sanity.run), ("default suite", default_suite.run),
         ("roofline", roofline.run), ("precision", precision.run),
         ("tf32 and graphs", tf32_graphs.run), ("generation", generation.run),
         ("serve", serve.run), ("train_epoch", train_epoch.run), ("profile", profile.run),
         ("transfers", transfers.run), ("sync", sync.run), ("memory guard", memory_guard.run),
         ("out of memory", oom.run), ("data-parallel", data_parallel.run),
         ("ctest", ctest.run))


class GpuCheck(Runner):
    def __init__(self, args):
        super().__init__(args, STEPS)
