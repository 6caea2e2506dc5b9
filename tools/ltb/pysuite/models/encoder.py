"""Encoder (lib/models/encoder.{h,cc}): LibTorch's TransformerEncoder."""
import copy
import dataclasses

from torch import nn


@dataclasses.dataclass(frozen=True)
class EncoderOptions:
    d_model: int
    heads: int
    d_ff: int
    layers: int


def clone_draws(layer, kind, o, attentions, count):
    """What `count` clones of a LibTorch Transformer layer draw and throw
    away: each clone() builds the layer again (`layer(kind)`), then clones
    each child module, building it again (the attentions, their out_proj,
    the two feed-forward linears). Drawn here so that the default generator
    ends where LibTorch's does."""
    for _ in range(count):
        layer(kind)
        for _ in range(attentions):
            nn.MultiheadAttention(o.d_model, o.heads)
            nn.Linear(o.d_model, o.d_model)  # its out_proj
        nn.Linear(o.d_model, o.d_ff)
        nn.Linear(o.d_ff, o.d_model)


class Encoder(nn.Module):
    def __init__(self, o):
        super().__init__()
        # Copies of one layer, as LibTorch's TransformerEncoder (and Python's)
        # clones its layer: one seed draws the same weights on both sides;
        # then what LibTorch's clones draw, so that the inputs drawn next are
        # the same too.
        def layer(kind):
            return kind(o.d_model, o.heads, dim_feedforward=o.d_ff)

        first = layer(nn.TransformerEncoderLayer)
        self.layers = nn.ModuleList(copy.deepcopy(first) for _ in range(o.layers))
        clone_draws(layer, nn.TransformerEncoderLayer, o, 1, o.layers)

    def forward(self, x):
        # x: (T, B, d) -> (T, B, d), LibTorch's (seq, batch, d) layout.
        for layer in self.layers:
            x = layer(x)
        return x
