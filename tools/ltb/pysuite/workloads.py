"""What one step of a benchmark does (lib/workloads): the model built as
bench builds it (seeded, --weights loaded), placed on its device in its
dtype, quantised and compiled; the family's kind (ltb/pysuite/kinds.py)
draws the phase's inputs and names the step each phase takes. The steps
that every kind shares are here: inference, forward and backward, the
Trainer's step and the epoch."""
import time

import torch

from ltb.pysuite import families, generation, kinds, quant, weights
from ltb.pysuite.device import DTYPES, Clock, autocast, grad_context, synchronize
from ltb.pysuite.family import TRAINER_PHASES, Refused


def plan(spec, args):
    """What a step does, as the families' Plan* count it (lib/models/*.cc):
    {flops, tokens, samples, audio_s} a step; vision's FLOPs are counted
    when the model is built."""
    s, f = spec, spec.family
    if s.weights and f not in weights.LOADERS:  # lib/family/registry.cc
        raise Refused(f"{f} does not load --weights; the families that do: "
                      f"{', '.join(weights.LOADERS)}")
    why = quant.refusal(s.quant, s.device, DTYPES[s.dtype], s.training)  # runner.cc PlanRun
    if why:
        raise Refused(why)
    return kinds.of(f).plan(spec, args)


class Workload:
    """What one step does, as lib/workloads builds it for the phase."""

    def __init__(self, spec, args):
        self.spec = spec
        # The device's clocks (bench's StepTimer and Timeline): the runner's
        # over a sample of steps, generation's over its prefill and decode
        # steps, an epoch's over the epoch.
        self.clock = Clock(spec.device)
        self.timeline = Clock(spec.device)
        self.epoch_clock = Clock(spec.device)
        self.kind = kinds.of(spec.family)
        self.slowdown = args.slowdown
        self.grad_mode = args.grad_mode
        counts = plan(spec, args)
        torch.manual_seed(args.seed)
        s = spec
        overrides = families.benchmark_overrides(s.family, s.seq or None)
        model = families.build(s.family, s.size, draw=not s.weights, **overrides)
        self.options = o = families.size_entry(s.family, s.size).options
        if s.weights:  # lib/models/weights.cc LoadSpecWeights
            try:
                weights.load_family_weights(
                    model, s.family, s.size, s.weights,
                    torch.float32 if s.training else DTYPES[s.dtype],
                    tied=getattr(o, "tied", False))
            except weights.BadWeights as e:  # thrown by bench's build: runner.cc's
                raise Refused(f"error: {e}")
        self.params = families.param_count(model)
        self.flops_per_step = counts.get("flops", 0)
        self.tokens_per_step = counts.get("tokens", 0)
        self.samples_per_step = counts.get("samples", 0)
        self.audio_per_step = counts.get("audio_s", 0)
        self.epochs = []
        self.train_steps = self.optimizer_steps = 0  # the Trainer's, and those not skipped
        self.weight_change = 0
        self.kind.setup(self, model, args)
        self._step = self.kind.steps(self)[s.phase]

    def place(self, model):
        """The model on its device: in the inference dtype for inference,
        in fp32 for training (autocast to the dtype); quantised once, outside
        the timed steps (lib/workloads/phases.cc PrepareModel), which changes
        what a decode step reads of the weights by the bytes; compiled for
        the compile runtime; and the trainer's optimizer."""
        s = self.spec
        if not s.training:
            model.to(s.device, DTYPES[s.dtype]).eval()
        else:
            model.to(s.device, torch.float32).train()
        if not s.quant.none:
            try:
                removed, added = quant.quantize_model(model, s.quant)
            except quant.QuantError as e:  # bench's TORCH_CHECK: "LibTorch error: ..."
                raise Refused(f"PyTorch error: {e}")
            self.weight_change = added - removed
        self.model = model
        self.forward = torch.compile(model) if s.runtime == "compile" else model
        if s.phase in TRAINER_PHASES:
            self.optimizer, self.scaler = self.kind.optimizer(self)
            if self.scaler:
                # GradScaler calls the optimizer's step only where the
                # gradients are finite: the steps it skipped are the others.
                inner = self.optimizer.step

                def counted(*args, **kwargs):
                    self.optimizer_steps += 1
                    return inner(*args, **kwargs)
                self.optimizer.step = counted

    # --- the steps a kind's phases take ----------------------------------------

    def infer_step(self):
        with grad_context(self.grad_mode):
            self.infer()

    def forward_backward(self):
        s = self.spec
        self.model.zero_grad(set_to_none=True)
        with torch.enable_grad():
            with autocast(s.device, s.dtype):
                loss = self.loss()
            loss.backward()

    def train_step(self):
        self._train(self.batch)

    def train_epoch(self):
        """lib/workloads/epoch.cc: one pass over the dataset's batches, each
        a Trainer step, timed whole by the device's clock for epoch_N_s."""
        self.epoch_clock.clear()
        self.epoch_clock.mark()
        self.loader.start_epoch()
        while (batch := self.loader.next()) is not None:
            self._train(batch)
        self.epoch_clock.mark()
        self.epochs.append(self.epoch_clock.intervals()[0])

    def generate(self):
        generation.step(self)

    def _train(self, batch):
        """lib/workloads/trainer.cc Trainer::Step: gradients set to none,
        forward and loss under autocast, backward (scaled in fp16), the
        optimizer's step (skipped by the scaler on inf or nan)."""
        s = self.spec
        self.train_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        with torch.enable_grad():
            with autocast(s.device, s.dtype):
                loss = self.kind.loss_of(self, batch)
            (self.scaler.scale(loss) if self.scaler else loss).backward()
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def step(self):
        started = time.perf_counter() if self.slowdown != 1 else 0
        self._step()
        if self.slowdown != 1:  # the tests' deliberately slowed step
            synchronize(self.spec.device)
            end = time.perf_counter() + (self.slowdown - 1) * (time.perf_counter() - started)
            while time.perf_counter() < end:
                pass

    def evaluate(self):
        """GenerateWorkload::Evaluate: one generation's new tokens (B, N)."""
        return generation.evaluate(self)

    def reset_stats(self):
        self.prefill_s = self.decode_s = self.early_s = self.late_s = 0.0
        self.decode_steps = []
        self.steps = 0
        self.epochs = []
        self.train_steps = self.optimizer_steps = 0

    def skipped(self):
        """The Trainer's steps since reset_stats that fp16's loss scaler
        skipped (their gradients not finite); 0 without a scaler."""
        return self.train_steps - self.optimizer_steps if getattr(self, "scaler", None) else 0

    def counters(self):
        """The workload's own counters: the epochs' (EpochWorkload),
        generation's (GenerateWorkload) and the kind's."""
        s = self.spec
        if s.phase == "train_epoch":
            c = {f"epoch_{i + 1}_s": t for i, t in enumerate(self.epochs)}
            if self.epochs:
                c["epoch_s"] = sum(self.epochs) / len(self.epochs)
            return c
        if s.phase == "generate":
            return generation.counters(self)
        return self.kind.counters(self)
