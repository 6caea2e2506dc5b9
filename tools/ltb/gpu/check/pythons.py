"""Which Python runs the tools gpu-check starts: the first that has the
modules they import (the GPU machine's own Python may lack them)."""
import os
import shutil
import subprocess
import sys

from ltb.base import venv_dir

# The Python modules the tools that gpu-check and ctest run import.
TOOL_MODULES = {"scipy": "tools/gate, tools/compare and compare.py",
                "matplotlib": "tools/plot", "yaml": "the workflow tests"}


def has_modules(python, modules):
    try:
        probe = subprocess.run([python, "-c", "import " + ", ".join(modules)],
                               capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def venv_python():
    return os.path.join(venv_dir(), "bin", "python")


def tools_python(modules=tuple(TOOL_MODULES)):
    """The first Python that has the modules: this one, the project's venv,
    LTB_PYTHON (the offline machine's Python with torch), python3 on the
    PATH; (python, []) or (this Python, the candidates tried) when none has."""
    candidates = [sys.executable, venv_python(), os.environ.get("LTB_PYTHON"),
                  shutil.which("python3")]
    tried = []
    for python in dict.fromkeys(c for c in candidates if c):
        if not (os.path.isfile(python) or shutil.which(python)):
            continue
        tried.append(python)
        if has_modules(python, modules):
            return python, []
    return sys.executable, tried
