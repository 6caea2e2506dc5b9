"""The families' kinds and the registry that gives each family its kind:
what a kind counts a step to do (lib/models' Plan* functions), what it
builds for a benchmark (lib/models' Build* functions: the model placed,
the inputs drawn) and which step each phase takes. The Workload
(ltb/pysuite/workloads.py) asks the family's kind and never names a family;
a new family of a kind it has is one register() line."""
import torch

from ltb.pysuite import families, generation
from ltb.pysuite.device import DTYPES
from ltb.pysuite.family import FAMILIES, Refused
from ltb.pysuite.loader import MemoryLoader, epoch_samples
from ltb.pysuite.models.decoder_family import ROWS

KINDS = {}  # family name -> its kind


def register(kind, *names):
    for name in names:
        KINDS[name] = kind


def of(family):
    """The family's kind; KeyError naming the families that have one."""
    try:
        return KINDS[family]
    except KeyError:
        raise KeyError(f"no kind for family {family!r}; the families: "
                       + ", ".join(KINDS)) from None


class Kind:
    """A kind of family. The defaults are the token models': the model
    placed by Workload.place, trained by the Trainer's step (AdamW)."""

    def plan(self, spec, args):
        """{flops, tokens, samples, audio_s} a step as the family's Plan*
        counts them; Refused for a shape the model cannot take."""
        return {}

    def setup(self, w, model, args):
        """Places the built model (w.place) and makes what w's step reads."""
        raise NotImplementedError

    def steps(self, w):
        """Phase -> w's step for it: the workload's own, which a kind may
        add to or replace."""
        return {"forward": w.infer_step, "encode": w.infer_step,
                "forward_backward": w.forward_backward, "train_step": w.train_step,
                "train_epoch": w.train_epoch, "generate": w.generate}

    def optimizer(self, w):
        """lib/workloads/trainer.cc: AdamW(lr=1e-4), and GradScaler's
        dynamic loss scaling in fp16 (its defaults are LossScaler's)."""
        s = w.spec
        return (torch.optim.AdamW(w.model.parameters(), lr=1e-4),
                torch.amp.GradScaler(s.device.split(":")[0]) if s.dtype == "fp16" else None)

    def loss_of(self, w, batch):
        """The Trainer's loss of a batch of samples."""
        raise NotImplementedError(f"{w.spec.family} does not train")

    def counters(self, w):
        """The kind's own counters of the phase, beside the workload's."""
        return {}


def token_batch(w, args, sample_tokens):
    """A training or inference phase's tokens: the dataset's loader for
    train_epoch (None returned), else one random batch of samples."""
    s = w.spec
    if s.phase == "train_epoch":
        w.loader = MemoryLoader(args, s.batch, sample_tokens, w.vocab, s.device)
        return None
    w.batch = torch.randint(0, w.vocab, (s.batch, sample_tokens), device=s.device)
    return w.batch


class Vision(Kind):
    """lib/models/vision.cc BuildClassifier: random images (drawn in fp32,
    then in the inference dtype), random labels, SGD with momentum 0.9.
    FLOPs: PyTorch's counter over one image's forward, which counts
    convolutions as done directly, as bench's analytic count does."""

    def setup(self, w, model, args):
        from torch.utils.flop_counter import FlopCounterMode
        s = w.spec
        image = int(FAMILIES[s.family]["image"])
        w.samples_per_step = s.batch
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model.eval()(torch.zeros(1, 3, image, image))
        fwd = counter.get_total_flops() * s.batch
        w.flops_per_step = 3 * fwd if s.training else fwd
        w.place(model)
        images = torch.randn(s.batch, 3, image, image, device=s.device)
        inputs = images if s.training else images.to(DTYPES[s.dtype])
        targets = torch.randint(0, w.options.classes, (s.batch,), device=s.device)
        w.infer = lambda: w.forward(inputs)
        w.serve_inputs = inputs
        w.loss = lambda: torch.nn.functional.cross_entropy(w.forward(inputs).float(), targets)
        w.batch = None  # the step's batch is the one above, which w.loss reads

    def optimizer(self, w):
        return (torch.optim.SGD(w.model.parameters(), lr=FAMILIES[w.spec.family]["lr"],
                                momentum=0.9), None)

    def loss_of(self, w, batch):
        return w.loss()


class LanguageModel(Kind):
    """A decoder family, a row of the one decoder (lib/models/decoder_family.cc's
    PlanDecoder and BuildDecoder): a batch of token sequences, each a sample
    with its next token; generation by ltb/pysuite/generation.py."""

    def __init__(self, row):
        self.row = row

    def plan(self, spec, args):
        s, f = spec, spec.family
        context = families.size_entry(f, s.size).options.max_positions
        if s.phase == "generate":
            positions = s.depth + s.prompt + s.new_tokens
            if positions > context:  # decoder_family.cc CheckGenerateShape
                raise Refused(f"depth {s.depth} + prompt {s.prompt} + new tokens "
                              f"{s.new_tokens} = {positions} positions, but {f} has "
                              f"{context}: lower --depth, --prompt or --new_tokens")
            return {"flops": families.generate_flops(f, s.size, s.batch, s.prompt,
                                                       s.new_tokens, s.depth),
                    "tokens": s.batch * s.new_tokens}
        if not self.row.seq_sets_positions and s.seq > context:
            raise Refused(f"seq {s.seq} exceeds {f}'s {context} positions")
        fwd = families.forward_flops(f, s.size, s.batch, s.seq)
        counts = {"flops": 3 * fwd if s.training else fwd, "tokens": s.batch * s.seq}
        if s.phase == "train_epoch":  # every whole batch of the dataset
            samples = epoch_samples(args, s.batch)
            counts = {"flops": counts["flops"] * samples / s.batch,
                      "tokens": samples * s.seq, "samples": samples}
        return counts

    def setup(self, w, model, args):
        s = w.spec
        w.place(model)
        w.vocab = families._vocab(w.options)
        if s.phase == "generate":
            generation.setup_decoder(w, model)
            return
        batch = token_batch(w, args, s.seq + 1)
        if batch is None:
            return
        inputs = batch[:, :s.seq].contiguous()
        targets = batch[:, 1:].contiguous()
        w.infer = lambda: w.forward(inputs)
        w.serve_inputs = inputs
        w.loss = lambda: torch.nn.functional.cross_entropy(
            w.forward(inputs).reshape(-1, w.vocab).float(), targets.reshape(-1))

    def loss_of(self, w, batch):
        """lib/models/decoder_family.cc: cross-entropy of each position's
        logits against the next token."""
        t = batch.shape[1] - 1
        logits = w.forward(batch[:, :t])  # (B, T, V)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, w.vocab).float(),
                                                 batch[:, 1:].reshape(-1))

    def counters(self, w):
        if w.spec.phase != "forward":
            return {}
        # What a forward reads of the weights (C++: ModelFns::weight_bytes).
        return {"weight_bytes": float(generation.weight_bytes(w))}


class Encoder(Kind):
    """lib/models/encoder.cc: LibTorch's encoder takes (T, B, d); its input
    drawn in fp32, then in the inference dtype (RandomInput)."""

    def plan(self, spec, args):
        s = spec
        fwd = families.encoder_forward_flops(s.size, s.batch, s.seq)
        return {"flops": 3 * fwd if s.training else fwd, "tokens": s.batch * s.seq}

    def setup(self, w, model, args):
        s = w.spec
        w.place(model)
        x = torch.randn(s.seq, s.batch, w.options.d_model, device=s.device)
        w.inputs = x if s.training else x.to(DTYPES[s.dtype])
        w.infer = lambda: w.forward(w.inputs)
        # lib/models/encoder.cc (served): samples batch first, read transposed.
        w.serve_inputs = w.inputs.transpose(0, 1).contiguous()  # (B, T, d)
        w.serve_forward = lambda batch: w.forward(batch.transpose(0, 1)).transpose(0, 1)
        w.loss = lambda: w.forward(w.inputs).float().pow(2).mean()


class EncDec(Kind):
    """lib/models/encdec.cc: a sample is a source sequence then a target of
    the same length; the target less its last token is the decoder's input."""

    def plan(self, spec, args):
        s = spec
        if s.seq <= 1:
            raise Refused("batch must be positive and seq at least 2")
        fwd = families.encdec_forward_flops(s.size, s.batch, s.seq, s.seq - 1)
        tokens = s.batch * (2 * s.seq - 1)  # the source and the target less its last
        if s.phase == "train_epoch":
            samples = epoch_samples(args, s.batch)
            return {"flops": 3 * fwd * samples / s.batch, "tokens": tokens * samples // s.batch,
                    "samples": samples}
        return {"flops": 3 * fwd if s.training else fwd, "tokens": tokens, "samples": s.batch}

    def setup(self, w, model, args):
        s = w.spec
        w.place(model)
        w.vocab = families._vocab(w.options)
        batch = token_batch(w, args, 2 * s.seq)
        if batch is None:
            return
        src, tgt = batch[:, :s.seq], batch[:, s.seq:2 * s.seq - 1]
        w.infer = lambda: w.forward(src, tgt)
        # lib/models/encdec.cc: a served sample is its source then its target.
        w.serve_inputs = batch
        w.serve_forward = lambda b: w.forward(b[:, :s.seq], b[:, s.seq:2 * s.seq - 1])

    def loss_of(self, w, batch):
        """encdec.cc EncDecLoss: cross-entropy of the decoder's logits
        against the target's next tokens."""
        s = w.spec
        src, tgt = batch[:, :s.seq], batch[:, s.seq:]
        t = tgt.shape[1] - 1
        logits = w.forward(src, tgt[:, :t])  # predicts tgt[1:]
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), tgt[:, 1:].reshape(-1))


class Whisper(Kind):
    """lib/models/whisper.cc BuildWhisper: a window of random log-mel
    frames; generate starts from its encoder output (computed here, outside
    the timed steps) with the self-attention cache allocated once, and
    computes the cross-attention keys and values each time; transcribe
    encodes, then generates with a fresh cache. Its encode is served."""

    def plan(self, spec, args):
        s = spec
        o = families.size_entry(s.family, s.size).options
        encode = families.whisper_encode_flops(s.size, s.batch)
        audio = FAMILIES[s.family]["window_seconds"] * s.batch  # a mel window's audio
        if s.phase == "encode":
            return {"flops": encode, "samples": s.batch, "audio_s": audio}
        if s.prompt + s.new_tokens > o.text_ctx or s.new_tokens <= 0:
            raise Refused(f"prompt {s.prompt} + new tokens {s.new_tokens} = "
                          f"{s.prompt + s.new_tokens} positions, but the Whisper decoder has "
                          f"{o.text_ctx}: --new_tokens must be 1 to {o.text_ctx - s.prompt}")
        generate = families.whisper_generate_flops(s.size, s.batch, s.prompt, s.new_tokens)
        if s.phase == "generate":
            return {"flops": generate, "tokens": s.batch * s.new_tokens}
        return {"flops": encode + generate, "tokens": s.batch * s.new_tokens,
                "samples": s.batch, "audio_s": audio}

    def setup(self, w, model, args):
        s, o = w.spec, w.options
        w.place(model)
        compiled = s.runtime == "compile"
        mel = torch.randn(s.batch, o.mels, o.frames, device=s.device).to(DTYPES[s.dtype])
        w.mel = mel
        w.encode = torch.compile(model.encode) if compiled else model.encode
        w.infer = lambda: w.encode(mel)
        if s.phase == "encode":
            w.serve_inputs, w.serve_forward = mel, w.encode  # (B, mels, frames)
            return
        w.prompt = torch.randint(0, o.vocab, (s.batch, s.prompt), device=s.device)
        if s.phase == "transcribe":
            w.infer = lambda: model.generate(w.encode(mel), w.prompt, s.new_tokens)
            return
        with torch.inference_mode():
            xa = model.encode(mel)
            state = model.start(xa, s.prompt + s.new_tokens)
        decode = torch.compile(model.decode_cached) if compiled else model.decode_cached

        def prefill():
            model.compute_cross(xa, state)
            return decode(w.prompt, 0, state)
        w.prefill, w.decode = prefill, lambda t, at: decode(t, at, state)
        w.cache = [t for part in ("self", "cross") for kv in state[part] for t in kv]
        # A decode step reads the self-attention keys and values up to its
        # position and the cross-attention's whole (whisper.cc BuildWhisper).
        w.cache_per_position = sum(t.nbytes / t.shape[2] for kv in state["self"] for t in kv)
        w.cache_fixed = float(sum(t.nbytes for kv in state["cross"] for t in kv))
        generation.ready(w)

    def steps(self, w):
        return dict(super().steps(w), transcribe=w.infer_step)


register(Vision(), "ResNet", "CNN")
for row in ROWS.values():
    register(LanguageModel(row), row.family)
register(Encoder(), "Encoder")
register(EncDec(), "EncDec")
register(Whisper(), "Whisper")
