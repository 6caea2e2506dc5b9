"""EncDec (lib/models/encdec.{h,cc}): LibTorch's nn::Transformer with
embeddings and an output head."""
import dataclasses
import math
import warnings

import torch
from torch import nn

from ltb.pysuite.models.encoder import clone_draws


@dataclasses.dataclass(frozen=True)
class EncDecOptions:
    d_model: int
    heads: int
    encoder_layers: int
    decoder_layers: int
    d_ff: int
    vocab: int = 8192


class EncDec(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.embedding = nn.Embedding(o.vocab, o.d_model)
        with warnings.catch_warnings():  # nested tensors need batch_first; not used
            warnings.simplefilter("ignore")
            # LibTorch's Transformer draws as Python's (a layer, copied to
            # every layer of the stack, then Xavier over every matrix) plus
            # what its clones draw and throw away (clone_draws). Drawn the
            # same here, so that one seed gives both sides the same weights.
            def layer(kind):
                return kind(o.d_model, o.heads, dim_feedforward=o.d_ff)

            encoder_layer = layer(nn.TransformerEncoderLayer)
            clone_draws(layer, nn.TransformerEncoderLayer, o, 1, o.encoder_layers)
            decoder_layer = layer(nn.TransformerDecoderLayer)
            clone_draws(layer, nn.TransformerDecoderLayer, o, 2, o.decoder_layers)
            self.transformer = nn.Transformer(
                o.d_model, o.heads, o.encoder_layers, o.decoder_layers, o.d_ff,
                custom_encoder=nn.TransformerEncoder(encoder_layer, o.encoder_layers,
                                                     nn.LayerNorm(o.d_model)),
                custom_decoder=nn.TransformerDecoder(decoder_layer, o.decoder_layers,
                                                     nn.LayerNorm(o.d_model)))
        self.output = nn.Linear(o.d_model, o.vocab)
        self.options = o

    def positions(self, length, device):
        # sin on even channels, cos on odd ones, in fp32.
        d = self.options.d_model
        pos = torch.arange(length, dtype=torch.float32, device=device).unsqueeze(1)  # (L, 1)
        div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32, device=device)
                        * (-math.log(10000.0) / d))  # (d/2,)
        angles = pos * div  # (L, d/2)
        return torch.stack((angles.sin(), angles.cos()), -1).flatten(-2)  # (L, d)

    def embed(self, tokens):
        # (B, L) -> (L, B, d), LibTorch's Transformer layout.
        x = (self.embedding(tokens) * math.sqrt(self.options.d_model)
             + self.positions(tokens.shape[1], tokens.device).to(self.embedding.weight.dtype))
        return x.transpose(0, 1)

    def forward(self, src, tgt):
        # src (B, S), tgt (B, T) token ids -> logits (B, T, V); causal over tgt.
        mask = nn.Transformer.generate_square_subsequent_mask(
            tgt.shape[1], device=tgt.device, dtype=self.embedding.weight.dtype)  # (T, T)
        # tgt_is_causal: the mask is causal; saying so spares nn.Transformer
        # comparing it with one (data-dependent control flow under export).
        y = self.transformer(self.embed(src), self.embed(tgt), tgt_mask=mask,
                             tgt_is_causal=True)  # (T, B, d)
        return self.output(y.transpose(0, 1))  # (B, T, V)
