"""The GitHub workflows parse as YAML, have the jobs and steps they should,
and call tools and scripts that exist and that the README or docs/ document."""
import glob
import os
import re
import subprocess
import unittest

from tests.helpers import REPO

try:
    import yaml
except ImportError:  # PyYAML is pinned in tools/requirements.txt
    yaml = None

WORKFLOWS = os.path.join(REPO, ".github", "workflows")


def load(name):
    with open(os.path.join(WORKFLOWS, name)) as f:
        return yaml.safe_load(f)


def triggers(workflow):
    # YAML 1.1 reads the key `on` as the boolean true.
    return workflow.get("on", workflow.get(True))


def run_text(job):
    return "\n".join(step.get("run", "") for step in job["steps"])


def uses(job):
    return [step["uses"].split("@")[0] for step in job["steps"] if "uses" in step]


@unittest.skipIf(yaml is None, "PyYAML is not installed (tools/requirements.txt)")
class WorkflowTest(unittest.TestCase):
    def test_both_are_valid_workflows(self):
        for name in ("ci.yml", "bench.yml"):
            workflow = load(name)
            self.assertIsInstance(workflow.get("name"), str, name)
            self.assertTrue(triggers(workflow), name)
            self.assertTrue(workflow["jobs"], name)
            for job_id, job in workflow["jobs"].items():
                self.assertRegex(job_id, r"^[A-Za-z_][A-Za-z0-9_-]*$")
                self.assertIn("runs-on", job, f"{name}: {job_id}")
                self.assertTrue(job["steps"], f"{name}: {job_id}")
                for step in job["steps"]:
                    self.assertEqual(("uses" in step) + ("run" in step), 1,
                                     f"{name}: {job_id}: {step}")
                    if "uses" in step:
                        self.assertRegex(step["uses"], r"^[\w.-]+/[\w./-]+@[\w.-]+$")

    def test_ci_tests_on_the_wheel_and_debians_libtorch_and_builds_with_cuda(self):
        workflow = load("ci.yml")
        self.assertIn("pull_request", triggers(workflow))
        jobs = list(workflow["jobs"].values())
        self.assertEqual(len(jobs), 3)
        test, debian, cuda = jobs
        self.assertIn("actions/checkout", uses(test))
        self.assertRegex(run_text(test), r"(?m)^tools/test$")
        self.assertIn("debian", test["container"])
        # Debian's own LibTorch, found through CMAKE_PREFIX_PATH, built and tested.
        self.assertIn("debian:12", debian["container"])
        self.assertIn("libtorch-dev", run_text(debian))
        self.assertRegex(run_text(debian), r"CMAKE_PREFIX_PATH=/usr .*tools/test")
        script = run_text(cuda)
        self.assertIn("download.pytorch.org/libtorch/cu", cuda["env"]["LIBTORCH_URL"])
        self.assertIn("$LIBTORCH_URL", script)
        self.assertIn("install-cuda-toolkit", script)
        self.assertIn("-DCMAKE_PREFIX_PATH=", script)
        self.assertIn("cmake --build", script)
        self.assertNotIn("ctest", script)

    def test_bench_gates_a_pull_request(self):
        workflow = load("bench.yml")
        self.assertEqual(list(triggers(workflow)), ["pull_request"])
        job, = workflow["jobs"].values()
        checkouts = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout")]
        self.assertEqual([s["with"]["path"] for s in checkouts], ["head", "base"])
        self.assertIn("github.event.pull_request.base.sha", checkouts[1]["with"]["ref"])
        script = run_text(job)
        self.assertIn('LTB_BUILD_DIR="$PWD/build-base" base/tools/setup', script)
        self.assertIn('LTB_BUILD_DIR="$PWD/build-head" head/tools/setup', script)
        # One interleaved A/B run of both builds, not two sweeps one after the other.
        self.assertNotIn("tools/sweep", script)
        self.assertIn("head/tools/abtest --base build-base/bench/bench "
                      "--head build-head/bench/bench", script)
        abtest = script[script.index("head/tools/abtest"):].split(">gate.md")[0]
        self.assertIn('--rounds "$ROUNDS"', abtest)
        self.assertEqual(workflow["env"]["ROUNDS"], "9")
        self.assertIn("--out-base results/base.json --out-head results/head.json", abtest)
        self.assertIn('--threshold "$GATE_THRESHOLD"', abtest)
        self.assertIn('"--benchmark_filter=$BENCH_FILTER" $BENCH_ARGS', abtest)
        self.assertNotIn("--benchmark_repetitions", workflow["env"]["BENCH_ARGS"])
        self.assertIn("--devices=cpu", workflow["env"]["BENCH_ARGS"])
        self.assertIn('>>"$GITHUB_STEP_SUMMARY"', script)
        self.assertIn('exit "$status"', script)
        upload, = [s for s in job["steps"]
                   if s.get("uses", "").startswith("actions/upload-artifact")]
        self.assertEqual(upload["if"], "always()")
        self.assertIn("results/", upload["with"]["path"])
        self.assertIn("gate.md", upload["with"]["path"])
        # The HTML comparison of the two runs the gate read, kept beside its table.
        self.assertIn('head/tools/report --format html --threshold "$GATE_THRESHOLD" '
                      "results/base.json results/head.json >report.html",
                      re.sub(r"\\\n\s*", "", script))
        html_step = next(s for s in job["steps"] if "report --format html" in s.get("run", ""))
        self.assertEqual(html_step["if"], "always()")
        self.assertLess(job["steps"].index(html_step), job["steps"].index(upload))
        self.assertIn("report.html", upload["with"]["path"])
        # Both runs go to the results store, kept in the Actions cache between
        # runs; its change points to the summary, its series to history.html.
        steps = job["steps"]
        restore = next(i for i, s in enumerate(steps)
                       if s.get("uses", "").startswith("actions/cache/restore"))
        save = next(i for i, s in enumerate(steps)
                    if s.get("uses", "").startswith("actions/cache/save"))
        add = next(i for i, s in enumerate(steps) if "tools/history" in s.get("run", ""))
        gate_step = next(i for i, s in enumerate(steps) if "tools/abtest" in s.get("run", ""))
        self.assertLess(restore, gate_step)
        self.assertLess(gate_step, add)
        self.assertLess(add, save)
        self.assertEqual(steps[restore]["with"]["path"], steps[save]["with"]["path"])
        self.assertEqual(steps[save]["if"], "always()")
        self.assertEqual(steps[add]["if"], "always()")
        add_script = steps[add]["run"]
        self.assertIn('head/tools/history --db="$HISTORY_DB" add --repo "$side" '
                      '"results/$side.json"', add_script)
        self.assertIn('head/tools/history --db="$HISTORY_DB" changes', add_script)
        self.assertIn('"$GITHUB_STEP_SUMMARY"', add_script)
        self.assertIn('head/tools/report --format html --db="$HISTORY_DB" >history.html',
                      add_script)
        self.assertTrue(workflow["env"]["HISTORY_DB"].startswith(steps[save]["with"]["path"]))
        self.assertIn("history.html", upload["with"]["path"])

    def test_the_fixed_set_selects_the_same_benchmarks_as_before(self):
        env = load("bench.yml")["env"]
        pattern = re.compile(env["BENCH_FILTER"])
        for name in ("Transformer/nano/cpu/forward/batch:2/seq:128/fp32",
                     "GPT2/nano/cpu/generate/batch:2/prompt:32/new:100/fp32",
                     "Ops/matmul/2048x2048/cpu/fp32", "Ops/noop/empty/cpu/fp32"):
            self.assertTrue(pattern.search(name), name)
        for name in ("Transformer/small/cpu/forward/batch:4/seq:512/fp32",
                     "Transformer/nano/cuda/forward/batch:2/seq:128/fp32"):
            self.assertFalse(pattern.search(name), name)

    def test_called_tools_and_scripts_exist_and_are_documented(self):
        # The README and the pages under docs/ it links document the tools.
        docs = [os.path.join(REPO, "README.md")]
        docs += sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
        readme = ""
        for path in docs:
            with open(path) as f:
                readme += f.read()
        for name in ("ci.yml", "bench.yml"):
            for job in load(name)["jobs"].values():
                script = run_text(job)
                for tool in set(re.findall(r"(?:^|[\s/])tools/([\w-]+)", script)):
                    path = os.path.join(REPO, "tools", tool)
                    self.assertTrue(os.access(path, os.X_OK), f"{name} calls tools/{tool}")
                    self.assertIn(f"tools/{tool}", readme,
                                  f"{name} calls tools/{tool}, which no README.md or docs/*.md shows")
                for script_path in set(re.findall(r"\.github/scripts/[\w-]+", script)):
                    path = os.path.join(REPO, script_path)
                    self.assertTrue(os.access(path, os.X_OK), f"{name} calls {script_path}")
                    check = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
                    self.assertEqual(check.returncode, 0, check.stderr)


if __name__ == "__main__":
    unittest.main()
