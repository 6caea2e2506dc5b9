"""cmake/WheelCuda.cmake's choice of CUDA, on stand-ins: a torch wheel laid
out as pip installs it (torch/version.py naming its CUDA, Caffe2Targets.cmake
naming torch::cudart, site-packages/nvidia/cu13/{include,lib}) and an nvcc
that reports a chosen release. A tiny CMake project includes the module and
prints what it decided; nothing is compiled, so every case runs in a second.

The rule under test: a toolkit of LibTorch's CUDA major is used as found; one
of another major is passed over for the wheel's own runtime and headers
(two CUDA runtimes would load in one process), unless LTB_CUDA_FROM_WHEEL=OFF
says otherwise, which warns; and the choice is always said."""
import glob
import os
import shutil
import subprocess
import tempfile
import textwrap
import unittest

from tests.helpers import REPO

PROBE = """\
cmake_minimum_required(VERSION 3.18)
project(probe NONE)
list(APPEND CMAKE_MODULE_PATH "{repo}/cmake")
include(WheelCuda)
set(libs "")
if(TARGET torch::cudart)
  get_target_property(libs torch::cudart INTERFACE_LINK_LIBRARIES)
endif()
message(STATUS "probe used=${{LTB_CUDA_FROM_WHEEL_USED}} libs=${{libs}}")
message(STATUS "probe note=${{LTB_CUDA_BUILD_NOTE}}")
message(STATUS "probe toolkit=${{LTB_CUDA_TOOLKIT_NOTE}}")
message(STATUS "probe compiler=${{CMAKE_CUDA_COMPILER}}")
"""


def _write(path, text="", mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


@unittest.skipUnless(shutil.which("cmake"), "no cmake")
class WheelCudaChoiceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ltb-wheelcuda-")
        self.addCleanup(shutil.rmtree, self.tmp)
        self.site = os.path.join(self.tmp, "site-packages")
        torch = os.path.join(self.site, "torch")
        _write(os.path.join(torch, "version.py"),
               "__version__ = '2.15.0+cu132'\ncuda: Optional[str] = '13.2'\n")
        _write(os.path.join(torch, "share/cmake/Torch/TorchConfig.cmake"))
        _write(os.path.join(torch, "share/cmake/Caffe2/Caffe2Targets.cmake"),
               'set_target_properties(c10_cuda PROPERTIES INTERFACE_LINK_LIBRARIES "torch::cudart")\n')
        nvidia = os.path.join(self.site, "nvidia", "cu13")
        self.cudart = os.path.join(nvidia, "lib", "libcudart.so.13")
        _write(self.cudart)
        self.crt = os.path.join(nvidia, "include", "crt", "host_config.h")
        _write(self.crt)
        _write(os.path.join(nvidia, "include", "cuda_runtime.h"))
        _write(os.path.join(self.site, "nvidia_cuda_runtime-13.2.51.dist-info", "METADATA"))
        self.project = os.path.join(self.tmp, "probe")
        _write(os.path.join(self.project, "CMakeLists.txt"), PROBE.format(repo=REPO))
        self.toolkit = os.path.join(self.tmp, "cuda")

    def _nvcc(self, release):
        _write(os.path.join(self.toolkit, "bin", "nvcc"), textwrap.dedent(f"""\
            #!/bin/sh
            echo "nvcc: NVIDIA (R) Cuda compiler driver"
            echo "Cuda compilation tools, release {release}, V{release}.88"
            """), mode=0o755)

    def _configure(self, *args):
        build = tempfile.mkdtemp(dir=self.tmp)
        env = {k: v for k, v in os.environ.items()
               if k not in ("CUDACXX", "CUDA_PATH", "CUDA_BIN_PATH", "CUDAToolkit_ROOT")}
        env["CUDA_HOME"] = self.toolkit  # the stand-in nvcc comes before any other
        # This machine's own toolkits are out of sight.
        real = set(glob.glob("/usr/local/cuda*/bin") + glob.glob("/opt/cuda*/bin"))
        for d in os.environ.get("PATH", "").split(os.pathsep):
            if d and os.access(os.path.join(d, "nvcc"), os.X_OK):
                real.add(d)
        run = subprocess.run(
            ["cmake", "-S", self.project, "-B", build,
             f"-DCMAKE_PREFIX_PATH={os.path.join(self.site, 'torch')}",
             f"-DCMAKE_IGNORE_PATH={';'.join(sorted(real))}", *args],
            capture_output=True, text=True, env=env, timeout=120)
        out = run.stdout + run.stderr
        found = {}
        for line in run.stdout.splitlines():
            if line.startswith("-- probe "):
                key, _, value = line[len("-- probe "):].partition("=")
                if key == "used":
                    value, _, libs = value.partition(" libs=")
                    found["libs"] = libs
                found[key] = value
        return run.returncode, found, out

    def test_a_toolkit_of_another_major_is_passed_over_for_the_wheels_cuda(self):
        self._nvcc("12.4")
        rc, found, out = self._configure()
        self.assertEqual(rc, 0, out)
        self.assertEqual(found["used"], "ON", out)
        self.assertEqual(found["libs"], self.cudart)
        self.assertIn("the torch wheel's CUDA 13.2 runtime and headers", found["note"])
        self.assertIn("the CUDA toolkit 12.4", found["note"])
        self.assertIn("LibTorch's is CUDA 13.2", found["note"])
        self.assertIn("one CUDA runtime per process", found["note"])
        self.assertIn("CUDA runtime and headers from the torch wheel", out)

    def test_a_toolkit_of_the_wheels_major_is_used(self):
        self._nvcc("13.0")
        rc, found, out = self._configure()
        self.assertEqual(rc, 0, out)
        self.assertEqual(found["used"], "OFF", out)
        self.assertEqual(found["note"], "")  # dependencies.cmake names the toolkit
        self.assertEqual(found["toolkit"], "")
        # The build uses the very nvcc inspected.
        self.assertEqual(found["compiler"], os.path.join(self.toolkit, "bin", "nvcc"))

    def test_no_toolkit_takes_the_wheels_cuda_and_says_so(self):
        rc, found, out = self._configure()
        self.assertEqual(rc, 0, out)
        self.assertEqual(found["used"], "ON", out)
        self.assertIn("(no CUDA toolkit (nvcc))", found["note"])

    def test_off_keeps_a_toolkit_of_another_major_and_warns(self):
        self._nvcc("12.4")
        rc, found, out = self._configure("-DLTB_CUDA_FROM_WHEEL=OFF")
        self.assertEqual(rc, 0, out)
        self.assertEqual(found["used"], "OFF", out)
        self.assertIn("CUDA 12, LibTorch's is CUDA 13.2", found["toolkit"])
        self.assertIn("two CUDA", out)
        self.assertIn("CMake Warning", out)

    def test_another_major_without_the_wheels_crt_stops_naming_the_ways_out(self):
        self._nvcc("12.4")
        os.remove(self.crt)
        rc, found, out = self._configure()
        self.assertNotEqual(rc, 0)
        flat = " ".join(out.split())
        for way in ("nvidia-cuda-crt==13.2.51", "a CUDA 13 toolkit",
                    "-DLTB_CUDA_FROM_WHEEL=OFF", "-DLTB_CUDA=OFF",
                    "two CUDA runtimes in one process"):
            self.assertIn(way, flat)

    def test_the_cuda_code_left_out_is_said(self):
        self._nvcc("12.4")
        rc, found, out = self._configure("-DLTB_CUDA=OFF")
        self.assertEqual(rc, 0, out)
        self.assertEqual(found["used"], "OFF")
        self.assertIn("LTB_CUDA=OFF", out)


if __name__ == "__main__":
    unittest.main()
