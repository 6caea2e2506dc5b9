"""The families' facts as bench prints them (`bench --list_families`): their
sizes with their parameter counts, cases, phases, default shapes and the
default suite. families.json beside this file holds them, written by

    build/bench/bench --list_families > tools/ltb/pysuite/families.json

and tests/test_ltb_models.py checks it against the built bench, so that a
changed C++ default, or a C++ family without a Python twin, fails a test
instead of the Python suite silently measuring something else."""
import functools
import json
import os

FACTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "families.json")


@functools.lru_cache(maxsize=None)
def load(path=FACTS):
    with open(path) as f:
        return json.load(f)


def family(name):
    """One family's facts; KeyError naming the families bench has."""
    for f in load()["families"]:
        if f["name"] == name:
            return f
    raise KeyError(f"bench has no family {name!r}; it has "
                   + ", ".join(f["name"] for f in load()["families"]))


def names():
    return [f["name"] for f in load()["families"]]


def settings(name):
    """What pybench needs of a family (as lib/models/*.cc set its Family):
    phases, what each phase's names carry (batch, sequence or generate),
    the default suite's pattern, default shapes, the default suite's CPU
    shapes, whether its phases sweep --quant, the phases --scenario serves
    (the first unless --serve_phase names another) and a prompt its
    generation fixes."""
    f = family(name)
    out = {"phases": tuple(f["phases"]), "shapes": {c["phase"]: c["shape"] for c in f["cases"]},
           "suite": "|".join(f["suite"]),
           "batch": f["default_batch"], "seqs": tuple(f["default_seqs"]),
           "cpu_batch": f["suite_cpu_batch"], "cpu_seqs": tuple(f["suite_cpu_seqs"]),
           "cpu_new_tokens": f["suite_cpu_new_tokens"],
           "cpu_prompt": f["suite_cpu_prompt"], "quantizes": f["quantizes"],
           "serve_phases": tuple(f["serve_phases"])}
    fixed = [c["fixed_prompt"] for c in f["cases"] if c["fixed_prompt"]]
    if fixed:
        out["fixed_prompt"] = fixed[0]
    return out


def counters(family_name, size, phase):
    """(counters, utilisation) that bench reports for a family's phase at a
    size on the CPU: the counters every run has, and mfu and mbu where a
    peak is known."""
    for c in family(family_name)["cases"]:
        if c["size"] == size and c["phase"] == phase:
            return tuple(c["counters"]), tuple(c["utilisation"])
    raise KeyError(f"{family_name} has no case {size}/{phase}")
