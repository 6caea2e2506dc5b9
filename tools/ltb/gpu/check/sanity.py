"""The first step: bench runs and lists the suite, its --help says which
flags it has, and a Python has the tools' packages."""
import subprocess
import sys

from ltb.gpu.check.pythons import TOOL_MODULES, has_modules


def run(r):
    """bench runs and lists its benchmarks; its --help says which flags it has."""
    r.section("bench")
    c = r.check("bench runs and lists the suite")
    rc, out = r.command([r.bench, f"--devices={','.join(r.devices)}",
                         "--benchmark_list_tests"])
    if rc != 0:
        c.fail(f"bench --benchmark_list_tests exited with status {rc}")
    elif not out.strip():
        c.fail("bench --benchmark_list_tests listed nothing")
    else:
        c.notes.append(f"{len(out.split())} benchmarks in the default suite")
    r.say("$ " + r.bench + " --help  (output in console.log only)")
    try:
        proc = subprocess.run([r.bench, "--help"], capture_output=True, text=True,
                              errors="replace", timeout=min(120, r.args.timeout))
        r.help_text = proc.stdout + proc.stderr
    except (OSError, subprocess.SubprocessError) as e:
        r.help_text = ""
        c.fail(f"bench --help: {e}")
    r.log.write(r.help_text)
    python_packages(r)


def python_packages(r):
    """The tools this check and ctest run import what tools/requirements.txt
    pins; an offline machine's Python may lack some. The first Python that
    has them runs them (tools_python); named before anything else runs,
    rather than as a traceback in the middle."""
    p = r.check("the tools' Python packages")
    if not r.python_tried:
        p.notes.append(f"{r.tools_python} has {', '.join(TOOL_MODULES)}")
        return
    missing = [f"{m} ({who})" for m, who in TOOL_MODULES.items()
               if not has_modules(sys.executable, [m])]
    p.fail(f"no Python has {', '.join(TOOL_MODULES)} (tried {', '.join(r.python_tried)}); "
           f"{sys.executable} lacks {', '.join(missing) or 'none of them alone'}: run "
           "tools/setup, or pip install -r tools/requirements.txt into one of them "
           "(offline: the wheels, as docs/setup.md says)")
