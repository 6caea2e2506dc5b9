"""The library's layout: rooms by concern whose dependencies point down, no
two files that include each other, and the device type branched on only
inside lib/device/ (everything else asks a device's backend)."""

import os
import re
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LIB = os.path.join(ROOT, "lib")

# Lowest first: a room may include its own headers and those of the rooms
# before it, never one after it.
ROOMS = ["base", "device", "family", "distributed", "workloads", "peaks",
         "measure", "report", "suite", "models"]
# models/ is last: the harness includes no model header.
MAX_SOURCES = 20

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([a-z_0-9]+)\.h"', re.M)
# Branching on the device type: is_cuda(), is_cpu(), is_mps(), kCUDA,
# kMPS, DeviceType::..., a comparison with a type, a switch over one.
BRANCH = re.compile(
    r"\bis_(cuda|cpu|mps)\s*\(|\bk(CUDA|MPS)\b|DeviceType::|"
    r"[=!]=\s*(c10::|at::|torch::)?kCPU\b|\bkCPU\s*[=!]=|"
    r"\.type\(\)\s*[=!]=|switch\s*\([^)]*\.type\(\)\)")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)  # string literals
    return re.sub(r"//[^\n]*", "", text)


def sources(folder):
    for dirpath, _, files in os.walk(folder):
        for f in sorted(files):
            if f.endswith((".h", ".cc")):
                yield os.path.join(dirpath, f)


def room_of(path):
    return os.path.relpath(path, LIB).split(os.sep)[0]


class LayoutTest(unittest.TestCase):
    def test_every_folder_is_a_room_with_a_readme_and_few_files(self):
        folders = sorted(d for d in os.listdir(LIB)
                         if os.path.isdir(os.path.join(LIB, d)))
        self.assertEqual(folders, sorted(ROOMS))
        for room in ROOMS:
            readme = os.path.join(LIB, room, "README.md")
            self.assertTrue(os.path.isfile(readme), f"lib/{room} has no README.md")
            with open(readme) as f:
                self.assertGreater(len(f.read().split()), 20, readme)
            n = len(list(sources(os.path.join(LIB, room))))
            if room != "models":  # one file a family, as many as there are
                self.assertLessEqual(n, MAX_SOURCES, f"lib/{room} has {n} sources")

    def test_dependencies_point_down(self):
        wrong = []
        for path in sources(LIB):
            room = room_of(path)
            with open(path) as f:
                text = f.read()
            for target, _ in INCLUDE.findall(text):
                if target not in ROOMS:
                    wrong.append(f"{path}: includes unknown room {target}")
                elif ROOMS.index(target) > ROOMS.index(room):
                    wrong.append(f"{path} ({room}) includes {target}/, a room above it")
        self.assertEqual(wrong, [])

    def test_no_two_files_include_each_other(self):
        # A file's module is its path without .h/.cc: a.cc including b.h and
        # b.cc including a.h is a cycle as much as two headers are.
        edges = {}
        for path in sources(LIB):
            module = os.path.relpath(os.path.splitext(path)[0], LIB)
            with open(path) as f:
                for target, name in INCLUDE.findall(f.read()):
                    if f"{target}/{name}" != module:
                        edges.setdefault(module, set()).add(f"{target}/{name}")
        cycles = sorted(f"{a} <-> {b}" for a, targets in edges.items()
                        for b in targets if a < b and a in edges.get(b, ()))
        self.assertEqual(cycles, [])

    def test_only_lib_device_branches_on_the_device_type(self):
        found = []
        for folder in (LIB, os.path.join(ROOT, "bench")):
            for path in sources(folder):
                if room_of(path) == "device" and folder == LIB:
                    continue
                with open(path) as f:
                    code = strip_comments(f.read())
                for n, line in enumerate(code.splitlines(), 1):
                    if BRANCH.search(line):
                        found.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
        self.assertEqual(found, [], "ask the device's backend (lib/device/backend.h)")

    def test_the_branch_pattern_catches_what_it_must(self):
        # So that the test above cannot pass by matching nothing.
        for line in ["if (d.is_cuda()) {", "x.is_cpu() ? a : b", "c10::kCUDA",
                     "c10::DeviceType::CUDA", "d.type() == c10::kCPU",
                     "if (t == c10::kCPU)", "switch (device.type()) {", "kMPS"]:
            self.assertTrue(BRANCH.search(line), line)
        for line in ["x.to(c10::kCPU)", "c10::Device(c10::kCPU)", "BackendOf(d).Caps().host",
                     "const c10::DeviceType device_;"]:
            self.assertFalse(BRANCH.search(line), line)


if __name__ == "__main__":
    unittest.main()
