"""The library's layout: rooms by concern whose dependencies point down, no
two files that include each other, the device type branched on only
inside lib/device/ (everything else asks a device's backend), and C++17
(LibTorch 2.11 and older build in it)."""

import ast
import os
import re
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LIB = os.path.join(ROOT, "lib")

# Lowest first: a room may include its own headers and those of the rooms
# before it, never one after it.
ROOMS = ["base", "device", "family", "distributed", "workloads", "layers", "peaks", "serve",
         "measure", "report", "suite", "models"]
# models/ is last: the harness includes no model header.
MAX_SOURCES = 20
# What models/ may include: the model-author API (family/), what its
# families' steps are made of (workloads/) and the layers (layers/), nothing
# above them: never the harness (peaks, measure, report, suite); a family
# gets the run's settings through its factory (family/registry.h's
# FamilyOptions).
MODELS_BUILD_ON = ROOMS[:ROOMS.index("layers") + 1]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([a-z_0-9]+)\.h"', re.M)
# Branching on the device type: is_cuda(), is_cpu(), is_mps(), kCUDA,
# kMPS, DeviceType::..., a comparison with a type, a switch over one.
BRANCH = re.compile(
    r"\bis_(cuda|cpu|mps)\s*\(|\bk(CUDA|MPS)\b|DeviceType::|"
    r"[=!]=\s*(c10::|at::|torch::)?kCPU\b|\bkCPU\s*[=!]=|"
    r"\.type\(\)\s*[=!]=|switch\s*\([^)]*\.type\(\)\)")


# C++20 that a C++17 build refuses: the library builds in C++17 (lib/'s
# cxx_std_17), as LibTorch 2.11 and older ask, though a newer LibTorch's
# C++20 would accept these.
CXX20 = re.compile(
    r"\bstd::(erase_if|erase|ssize|span|format|ranges|views|bit_cast|source_location|"
    r"jthread|stop_token|latch|barrier|counting_semaphore|numbers)\b|"
    r"#\s*include\s*<(span|format|ranges|bit|source_location|numbers|concepts|"
    r"compare|semaphore|latch|barrier|stop_token)>|"
    r"<=>|\b(consteval|constinit|concept|char8_t)\b|\brequires\s*[({]|"
    r"\busing\s+enum\b|\[\]\s*<|\.(starts_with|ends_with)\s*\(")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)  # string literals
    return re.sub(r"//[^\n]*", "", text)


def sources(folder):
    for dirpath, _, files in os.walk(folder):
        for f in sorted(files):
            if f.endswith((".h", ".cc")):
                yield os.path.join(dirpath, f)


def lines_matching(pattern, folders, skip=lambda path: False):
    """`file:line: code` of every line outside comments that `pattern`
    matches, in the C++ sources under the repository's `folders`."""
    found = []
    for folder in folders:
        for path in sources(os.path.join(ROOT, folder)):
            if skip(path):
                continue
            with open(path) as f:
                code = strip_comments(f.read())
            for n, line in enumerate(code.splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    return found


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

    def test_models_include_nothing_of_the_harness(self):
        wrong, seen = [], set()
        for path in sources(os.path.join(LIB, "models")):
            with open(path) as f:
                for target, name in INCLUDE.findall(f.read()):
                    seen.add(target)
                    if target != "models" and target not in MODELS_BUILD_ON:
                        wrong.append(f"{os.path.relpath(path, ROOT)} includes {target}/{name}.h")
        self.assertIn("family", seen)  # the pattern reads models/' includes
        self.assertEqual(wrong, [], f"models/ includes only {', '.join(MODELS_BUILD_ON)}")

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
        found = lines_matching(BRANCH, ("lib", "bench"),
                               skip=lambda path: path.startswith(LIB + os.sep)
                               and room_of(path) == "device")
        self.assertEqual(found, [], "ask the device's backend (lib/device/backend.h)")

    def test_the_library_and_its_tests_build_in_cpp17(self):
        found = lines_matching(CXX20, ("lib", "bench", "test"))
        self.assertEqual(found, [], "C++20 that LibTorch 2.11's C++17 build refuses")

    def test_the_cpp20_pattern_catches_what_it_must(self):
        for line in ["std::erase_if(v, pred);", "std::span<const int> s;", "#include <span>",
                     "auto c = a <=> b;", "consteval int f();", "s.starts_with(\"x\")",
                     "std::ranges::sort(v);", "using enum Kind;", "[]<typename T>(T t) {}",
                     "template <class T> requires (sizeof(T) > 1)"]:
            self.assertTrue(CXX20.search(line), line)
        for line in ["v.erase(std::remove_if(v.begin(), v.end(), p), v.end());",
                     "absl::StartsWith(s, \"x\")", "doc.contains(\"peaks\")",
                     "#include <algorithm>", "a <= b", "std::vector<int> v;",
                     "x.erase(it);", "[](int a) { return a; }"]:
            self.assertFalse(CXX20.search(line), line)

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


# --- tools/: thin commands over one package ------------------------------------

TOOLS = os.path.join(ROOT, "tools")
PACKAGE = os.path.join(TOOLS, "ltb")
# Lowest first: a room may import its own modules and those of the rooms
# before it, never one after it. gpu (gpu-check, gpu-run) imports base
# alone: the GPU machine's Python may lack the tools' packages.
PY_ROOMS = ["base", "results", "bench_process", "gate", "history", "report", "pysuite", "gpu",
            "commands"]
LOAD_BY_PATH = re.compile(r"SourceFileLoader|spec_from_file_location|spec_from_loader|"
                          r"run_path|exec\(open|imp\.load_source")


def python_files(folder):
    for dirpath, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in sorted(files):
            path = os.path.join(dirpath, f)
            if f.endswith(".py") or is_python_command(path):
                yield path


def is_python_command(path):
    """An executable file without .py whose first line runs Python."""
    if path.endswith(".py") or not os.path.isfile(path) or not os.access(path, os.X_OK):
        return False
    with open(path, "rb") as f:
        first = f.readline()
    return first.startswith(b"#!") and b"python" in first


def py_room_of(path):
    rel = os.path.relpath(path, PACKAGE).split(os.sep)
    return rel[0][:-3] if rel[0].endswith(".py") else rel[0]


def ltb_imports(tree):
    """Every package module a file imports, wherever the import stands."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ltb":
                yield from (f"ltb.{a.name}" for a in node.names)
            elif node.module.startswith("ltb."):
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("ltb"))


class ToolsLayoutTest(unittest.TestCase):
    def parse(self, path):
        with open(path) as f:
            return ast.parse(f.read(), path)

    def test_every_python_command_is_a_launcher_of_its_modules_main(self):
        commands = [f for f in sorted(os.listdir(TOOLS))
                    if is_python_command(os.path.join(TOOLS, f))]
        self.assertGreater(len(commands), 10)
        for name in commands:
            tree = self.parse(os.path.join(TOOLS, name))
            body = [n for n in tree.body
                    if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
            imports = [n for n in body if isinstance(n, ast.ImportFrom)]
            self.assertEqual(len(body), 2, f"tools/{name}: a docstring, one import, one call")
            self.assertEqual(len(imports), 1, f"tools/{name}")
            self.assertTrue(imports[0].module.startswith("ltb."), f"tools/{name}")
            self.assertEqual([a.name for a in imports[0].names], ["main"], f"tools/{name}")
            self.assertIsInstance(body[1], ast.If, f"tools/{name}")
            self.assertEqual(ast.unparse(body[1]), "if __name__ == '__main__':\n    main()",
                             f"tools/{name}")

    def test_every_room_is_known_and_imports_point_down(self):
        rooms = sorted(py_room_of(p) for p in python_files(PACKAGE)
                       if os.path.basename(p) != "__init__.py" or os.path.dirname(p) != PACKAGE)
        self.assertEqual(sorted(set(rooms)), sorted(PY_ROOMS))
        wrong = []
        for path in python_files(PACKAGE):
            room = py_room_of(path)
            if room == "__init__":
                continue
            for module in ltb_imports(self.parse(path)):
                target = module.split(".")[1]
                if target not in PY_ROOMS or PY_ROOMS.index(target) > PY_ROOMS.index(room):
                    wrong.append(f"{os.path.relpath(path, TOOLS)} ({room}) imports {module}")
                if room == "gpu" and target != "base" and target != "gpu":
                    wrong.append(f"{os.path.relpath(path, TOOLS)} (gpu) imports {module}")
        self.assertEqual(wrong, [])

    def test_no_path_edits_and_no_loading_by_path(self):
        found = []
        for path in python_files(TOOLS):
            with open(path) as f:
                text = f.read()
            for n, line in enumerate(text.splitlines(), 1):
                if re.search(r"\bsys\.path\b", line) or LOAD_BY_PATH.search(line):
                    found.append(f"{os.path.relpath(path, TOOLS)}:{n}: {line.strip()}")
        self.assertEqual(found, [])

    def test_the_readme_maps_every_command_to_its_module(self):
        with open(os.path.join(TOOLS, "README.md")) as f:
            readme = f.read()
        for name in sorted(os.listdir(TOOLS)):
            path = os.path.join(TOOLS, name)
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                continue
            self.assertIn(f"`{name}`", readme, f"tools/README.md does not name tools/{name}")
            if is_python_command(path):
                module = next(n.module for n in self.parse(path).body
                              if isinstance(n, ast.ImportFrom))
                shown = "ltb/" + module[len("ltb."):].replace(".", "/") + ".py"
                self.assertIn(shown, readme, f"tools/README.md does not name {shown}")
