"""pybench: the suite's benchmarks in Python with PyTorch (tools/pybench)."""
import os
import sys

# The CPUs this process may run on, read before PyTorch loads where it can
# be: where OpenMP binds its threads (OMP_PROC_BIND, OMP_PLACES,
# GOMP_CPU_AFFINITY), its runtime pins the main thread to its first place
# when it loads, and bench counts every place's CPUs (lib/base/threads.cc,
# AllowedCpus).
_BEFORE_TORCH = None if "torch" in sys.modules else sorted(os.sched_getaffinity(0))


def allowed_cpus():
    """The CPUs this process may run on, as bench's AllowedCpus() counts them."""
    now = set(os.sched_getaffinity(0))
    return sorted(now | set(_BEFORE_TORCH or ()))
