"""Every test of the build directory, through ctest."""
import os
import re
import shlex
import shutil



CTEST_TIMEOUT = 1800


def run(r):
    c = r.check("ctest")
    if not r.runs_ctest():
        c.skip("--quick (--ctest runs it)" if r.quick else "--no-ctest")
        return
    build = os.path.abspath(r.args.build)
    if not os.path.exists(os.path.join(build, "CTestTestfile.cmake")):
        c.skip(f"no build directory with tests at {build}")
        return
    if shutil.which("ctest") is None:
        c.fail("ctest is not installed")
        return
    r.section("ctest")
    # The tools' tests include this command's rehearsal: not again inside it.
    jobs = f"-j{min(os.cpu_count() or 1, 8)}"
    rc, out = r.command(["ctest", "--output-on-failure", jobs,
                         *shlex.split(r.args.ctest_args)],
                        cwd=build, timeout=CTEST_TIMEOUT,
                        env={"LTB_IN_GPU_CHECK": "1"})
    summary = [line for line in out.splitlines() if "tests passed" in line]
    c.notes += summary
    if rc != 0:
        failed = [line.strip() for line in out.splitlines()
                  if re.search(r"\(Failed\)|\(Timeout\)|\*\*\*", line)]
        c.fail("ctest exited with status " + str(rc)
               + (": " + "; ".join(failed[:10]) if failed else ""))
