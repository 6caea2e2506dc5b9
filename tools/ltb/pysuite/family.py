"""The families as the sweep and the workloads see them (lib/family): each
family's settings from bench's facts, the phases by what they do, and the
error a plan raises for a shape the model cannot take. What a family builds
and how its phases step is its kind's (ltb/pysuite/kinds.py)."""
from ltb.pysuite import facts, families

# The families' Family() settings (lib/models/*.cc): phases, what each
# phase's names carry (lib/family/family.h Shape: a batch only, a batch and
# a sequence, or a prompt and new tokens), the default suite's pattern,
# default shapes, the default suite's CPU shapes and their constants (the
# vision models' image side and SGD learning rate, a decoder's context and
# depth chunk, Whisper's window), as bench --list_families prints them
# (ltb/pysuite/facts.py).
FAMILIES = {name: dict(facts.settings(name), **facts.family(name)["constants"])
            for name in families.FAMILIES}
DEPTH_FAMILIES = tuple(f["name"] for f in facts.load()["families"] if f["generates_at_depth"])
TRAINING_PHASES = ("forward_backward", "train_step", "train_epoch")
TRAINER_PHASES = ("train_step", "train_epoch")  # lib/workloads/trainer.cc's


class Refused(Exception):
    """What bench's plan refuses (a shape the model cannot take): the
    benchmark's error, in bench's words."""
