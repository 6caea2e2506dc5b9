"""tools/setup on machines this one is made to look like, in a mount
namespace (unshare -m, root only) that hides what the machine has:

- no CUDA toolkit: no nvcc anywhere, /usr/local/cuda* empty; the build takes
  the CUDA runtime and headers from the torch wheel and still compiles the
  CUDA code path;
- no network (unshare -n) and no Debian -dev packages: `tools/setup
  --offline KIT` builds from a kit made by tools/offline-kit and the torch of
  an installed Python, fetches nothing, and bench runs with the kit's
  libraries.

One test does both in fresh build directories with LTB_JOBS (default 2)
jobs, building what the toolkit and the kit change rather than the whole
suite again: the CUDA boundary (lib/device/cuda_runtime.cc) compiled from the
wheel's headers and linked with LibTorch, the CUDA runtime, Google Benchmark
and Abseil as bench links them (the `cuda_boundary` target): about a minute. LTB_SKIP_SETUP_TESTS=1 skips them.
LTB_BUILD_LOCK=FILE runs each build under `flock FILE` (for machines whose
builds take turns). The tests reuse the set-up virtual environment (LTB_VENV,
or the Python running them when it is one); they never install torch."""
import glob
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests.helpers import REPO

SETUP = os.path.join(REPO, "tools", "setup")
OFFLINE_KIT = os.path.join(REPO, "tools", "offline-kit")


def _venv():
    if os.environ.get("LTB_VENV"):
        return os.environ["LTB_VENV"]
    if sys.prefix != sys.base_prefix:
        return sys.prefix
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "libtorch-bench", "venv")


def _why_not():
    """Why these tests cannot run here; None when they can."""
    if os.environ.get("LTB_SKIP_SETUP_TESTS") == "1":
        return "LTB_SKIP_SETUP_TESTS=1"
    if not sys.platform.startswith("linux"):
        return "needs Linux mount namespaces"
    if os.geteuid() != 0:
        return "needs root for unshare -m (mount namespaces)"
    if not shutil.which("unshare"):
        return "no unshare (util-linux)"
    probe = subprocess.run(["unshare", "-m", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "unshare -m -n is not allowed here: " + probe.stderr.strip()
    venv = _venv()
    stamp = os.path.join(venv, ".ltb-requirements")
    with open(os.path.join(REPO, "tools", "requirements.txt"), "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    try:
        with open(stamp) as f:
            if f.read().strip() != want:
                return f"{venv} is not set up for tools/requirements.txt: run tools/setup first"
    except OSError:
        return f"no set-up virtual environment at {venv}: run tools/setup first"
    return None


WHY_NOT = _why_not()


def _lock():
    lock = os.environ.get("LTB_BUILD_LOCK")
    return f"flock {shlex.quote(lock)} " if lock else ""


def _hide_cuda_toolkit(scratch):
    """Shell lines that hide every nvcc and CUDA toolkit directory."""
    return f"""
empty={scratch}/empty; nofile={scratch}/nofile
mkdir -p "$empty"; : >"$nofile"; chmod 644 "$nofile"
IFS=: read -ra dirs <<<"$PATH"
for d in "${{dirs[@]}}" /usr/bin /usr/local/bin /usr/local/cuda*/bin /opt/cuda*/bin; do
  [ -e "$d/nvcc" ] && mount --bind "$nofile" "$d/nvcc"
done
for d in /usr/local/cuda* /opt/cuda*; do
  [ -d "$d" ] && mount --bind "$empty" "$d"
done
export PATH=$(printf %s "$PATH" | tr : '\\n' | grep -v cuda | paste -sd:)
unset CUDA_HOME CUDA_PATH CUDACXX CUDAToolkit_ROOT
for d in "${{dirs[@]}}"; do
  if [ -x "$d/nvcc" ]; then echo "nvcc still visible: $d/nvcc"; exit 99; fi
done
"""


def _hide_wheel_crt(python, scratch):
    """Shell lines that hide the CUDA crt/ headers beside the wheel (what
    nvidia-cuda-crt installed), as on a machine whose torch came without it."""
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True).stdout.strip()
    dirs = glob.glob(os.path.join(site, "nvidia", "*", "include", "crt"))
    return "".join(f'mkdir -p {scratch}/empty; mount --bind {scratch}/empty {shlex.quote(d)}\n'
                   for d in dirs)


def _hide_dev_packages(scratch):
    """Shell lines that hide the Debian -dev packages' headers, CMake
    packages and libraries (the runtime zlib stays: the system needs it)."""
    lines = [f'empty={scratch}/empty; nofile={scratch}/nofile',
             'mkdir -p "$empty"; : >"$nofile"']
    dirs = ["/usr/include/absl", "/usr/include/benchmark", "/usr/include/gtest",
            "/usr/include/gmock", "/usr/include/gloo", "/usr/include/nlohmann",
            "/usr/share/benchmark"]
    dirs += glob.glob("/usr/lib/*/cmake/absl") + glob.glob("/usr/lib/*/cmake/benchmark")
    dirs += glob.glob("/usr/lib/*/cmake/GTest") + glob.glob("/usr/share/cmake/nlohmann_json")
    dirs += glob.glob("/usr/lib/*/cmake/nlohmann_json")
    files = ["/usr/include/zlib.h"]
    for pattern in ("libabsl_*", "libbenchmark*", "libgtest*", "libgmock*", "libz.so", "libz.a"):
        files += glob.glob("/usr/lib/*/" + pattern)
    lines += [f'mount --bind "$empty" {shlex.quote(d)}' for d in dirs if os.path.isdir(d)]
    lines += [f'mount --bind "$nofile" {shlex.quote(f)}' for f in files
              if os.path.isfile(f) and not os.path.islink(f)]
    return "\n".join(lines) + "\n"


def _in_namespace(flags, script, timeout=3600):
    return subprocess.run(["unshare", *flags, "bash", "-euo", "pipefail", "-c", script],
                          capture_output=True, text=True, timeout=timeout)


def _torch_facts(python):
    """(whether python's torch has CUDA, its CMake prefix path), from one
    import of torch (seconds)."""
    out = subprocess.run([python, "-c", "import torch, torch.utils; "
                          "print(torch.version.cuda or ''); print(torch.utils.cmake_prefix_path)"],
                         capture_output=True, text=True)
    cuda, prefix = (out.stdout.splitlines() + ["", ""])[:2]
    return bool(cuda.strip()), prefix.strip()


def _kit(tmp):
    """A kit made by tools/offline-kit: LTB_OFFLINE_KIT, the checkout's .kit,
    or a fresh one in tmp; None when none exists and none can be made."""
    for kit in (os.environ.get("LTB_OFFLINE_KIT"), os.path.join(REPO, ".kit")):
        if kit and os.path.isfile(os.path.join(kit, ".ltb-kit")):
            return kit
    kit = os.path.join(tmp, "kit")
    made = subprocess.run([OFFLINE_KIT, kit], capture_output=True, text=True, timeout=600)
    return kit if made.returncode == 0 else None


@unittest.skipIf(WHY_NOT, WHY_NOT)
class SetupElsewhereTest(unittest.TestCase):
    """Both machines: first tools/setup online with the toolkit hidden,
    which installs the CUDA headers the wheel lacks and configures (building
    one small target); then, with the toolkit still hidden, the network cut
    and the -dev packages hidden, `tools/setup --offline KIT` configures from
    the kit and builds the CUDA boundary from the wheel's headers, linked
    with the kit's libraries, and it runs."""

    def test_builds_the_cuda_boundary_without_nvcc_and_offline_from_kit(self):
        venv = _venv()
        python = os.path.join(venv, "bin", "python")
        jobs = os.environ.get("LTB_JOBS", "2")
        with tempfile.TemporaryDirectory(prefix="ltb-elsewhere-") as tmp:
            kit = _kit(tmp)
            if kit is None:
                self.skipTest("no kit (LTB_OFFLINE_KIT or .kit/) and tools/offline-kit "
                              "could not make one (no network or no apt-get)")
            cuda, prefix = _torch_facts(python)

            # 1. Online, no CUDA toolkit: the wheel's CUDA runtime and headers.
            online = os.path.join(tmp, "online")
            env = (f"LTB_VENV={shlex.quote(venv)} LTB_BUILD_DIR={shlex.quote(online)} "
                   f"LTB_TARGETS=ltb_build_info LTB_JOBS={jobs}")
            run = _in_namespace(["-m"], _hide_cuda_toolkit(tmp)
                                + f"env {env} {_lock()}{shlex.quote(SETUP)}\n")
            self.assertEqual(run.returncode, 0, (run.stdout + run.stderr)[-6000:])
            with open(os.path.join(online, "configure.log")) as f:
                configure = f.read()
            if cuda:
                self.assertIn("CUDA runtime and headers from the torch wheel", configure)

            # 2. Offline as well: bench from the kit, nothing fetched.
            build = os.path.join(tmp, "build")
            boundary = os.path.join(build, "test", "cuda_boundary")
            # A venv that tools/setup would use if it went online: absent.
            env = (f"LTB_VENV={shlex.quote(os.path.join(tmp, 'no-venv'))} "
                   f"LTB_PYTHON={shlex.quote(python)} LTB_BUILD_DIR={shlex.quote(build)} "
                   f"LTB_TARGETS=cuda_boundary LTB_JOBS={jobs}")
            script = (_hide_cuda_toolkit(tmp) + _hide_dev_packages(tmp) + _hide_wheel_crt(python, tmp)
                      + "! python3 -c 'import socket; socket.create_connection((\"pypi.org\", 443), 3)' "
                        "2>/dev/null || { echo 'the network is reachable'; exit 98; }\n"
                      + f"env {env} {_lock()}{shlex.quote(SETUP)} --offline {shlex.quote(kit)}\n"
                      + f"{shlex.quote(boundary)} --benchmark_min_time=0.01\n")
            run = _in_namespace(["-m", "-n"], script)
            log = run.stdout + run.stderr
            self.assertEqual(run.returncode, 0, log[-6000:])
            self.assertIn("empty", run.stdout)
            self.assertFalse(os.path.exists(os.path.join(tmp, "no-venv")))
            with open(os.path.join(build, "configure.log")) as f:
                configure = f.read()
            self.assertNotIn("fetching", configure)
            if cuda:
                self.assertIn("CUDA runtime and headers from the torch wheel", configure)
                # The wheel's own crt/ was hidden: the kit's nvidia-cuda-crt served.
                self.assertIn("crt/ headers from " + os.path.realpath(kit), configure)
                # The CUDA code path was compiled, not the stub.
                objects = glob.glob(os.path.join(build, "test", "**", "cuda_runtime.cc.o"),
                                    recursive=True)
                self.assertTrue(objects, "cuda_runtime.cc was not compiled")
            # Only what the toolkit and the kit change was built.
            self.assertFalse(os.path.exists(os.path.join(build, "bench", "bench")))
            with open(os.path.join(build, "CMakeCache.txt")) as f:
                cache = f.read()
            for package in ("absl_DIR", "benchmark_DIR", "GTest_DIR", "nlohmann_json_DIR",
                            "loadgen_DIR"):
                line = next(l for l in cache.splitlines() if l.startswith(package + ":"))
                self.assertIn(os.path.realpath(kit), os.path.realpath(line.split("=", 1)[1]))
            # It runs outside the namespace too, as built (the kit's libraries
            # through its RPATH), and says what it linked.
            ran = subprocess.run([boundary, "--benchmark_min_time=0.01"],
                                 capture_output=True, text=True, timeout=300)
            self.assertEqual(ran.returncode, 0, ran.stdout + ran.stderr)
            found = json.loads(ran.stdout.splitlines()[0])
            self.assertEqual(found["cuda_compiled"], cuda)
            if cuda:
                self.assertRegex(found["cuda_runtime"], r"^\d+\.\d+$")
                self.assertRegex(found["cuda_build"],
                                 r"^the torch wheel's CUDA \d+\.\d+ runtime and headers "
                                 r"\(no CUDA toolkit \(nvcc\)\)$")
            self.assertEqual(found["abseil"], "StrCat 1+1")
            self.assertIn("empty", ran.stdout)

            # 3. Neither a toolkit nor crt/ headers: a torch with CUDA stops the
            # configuration, saying what to install, rather than building a
            # bench that would say its LibTorch has no CUDA; -DLTB_CUDA=OFF
            # asks for a CPU-only bench.
            if not cuda:
                return
            for n, flag in enumerate(("", "-DLTB_CUDA=OFF")):
                configure = (f"cmake -S {shlex.quote(REPO)} -B {shlex.quote(tmp)}/configure{n} "
                             f"-DCMAKE_PREFIX_PATH={shlex.quote(prefix)} "
                             f"-DLTB_PYTHON={shlex.quote(python)} {flag}\n")
                run = _in_namespace(["-m"], _hide_cuda_toolkit(tmp) + _hide_wheel_crt(python, tmp)
                                    + configure)
                log = run.stdout + run.stderr
                words = " ".join(log.split())  # CMake wraps its messages
                if flag:
                    self.assertEqual(run.returncode, 0, log[-6000:])
                    self.assertIn("LTB_CUDA=OFF: building without the CUDA code", words)
                else:
                    self.assertNotEqual(run.returncode, 0, log[-6000:])
                    self.assertIn("install nvidia-cuda-crt==", words)
                    self.assertIn("-DLTB_CUDA=OFF", words)


if __name__ == "__main__":
    unittest.main()
