"""A rank's subnetwork: forward masking (only what it owns exists) or backward masking (the whole
model runs forward, gradients exist only for what it owns).

Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data Parallelism" (2025).
Forward masking replaces an unowned block by `nn.Identity` and keeps only owned hidden neurons;
backward masking holds everything but freezes what is not owned, refreshed after every update
(`sync.py`). Neuron slices live in `SlicedLinear` (one tensor per slice, so gradients and Adam
state exist per owned slice only). The model is built whole from the seed, then what the rank
does not keep is dropped. In full: docs/subnet.md, `parlab.subnet.masking`.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.subnet.ownership import Ownership, Piece, find_blocks, find_ffns

MASKS = ("forward", "backward")


class SlicedLinear(nn.Module):
    """`nn.Linear` whose weight is stored as slices along `dim` (0: output rows, 1: input columns),
    each a separate parameter; the bias is sliced with the rows (dim 0) or kept whole (dim 1).
    Slices along dim 0 make the output's hidden neurons; slices along dim 1 consume them.

    parts: [(lo, hi, trainable)] in order: the slices this rank holds.
    """

    def __init__(self, linear: nn.Linear, dim: int, parts: list[tuple[int, int, bool]]):
        super().__init__()
        self.dim = dim
        weight = linear.weight.detach()  # (out, in)
        self.weight_parts = nn.ParameterList(
            nn.Parameter(weight.narrow(dim, lo, hi - lo).clone(), requires_grad=train)
            for lo, hi, train in parts)  # each (hi - lo, in) | (out, hi - lo)
        self.bias_parts = nn.ParameterList()
        self.bias = None
        if linear.bias is not None and dim == 0:
            self.bias_parts = nn.ParameterList(
                nn.Parameter(linear.bias.detach()[lo:hi].clone(), requires_grad=train)
                for lo, hi, train in parts)
        elif linear.bias is not None:
            self.bias = linear.bias  # the output is whole: the bias is not a neuron's

    def forward(self, x):
        # One product per slice, never the concatenated weight: the gradient of a concatenation
        # would be one full-size tensor whose slices every part's .grad would keep alive.
        weights = list(self.weight_parts)
        if self.dim == 0:
            biases = list(self.bias_parts) or [None] * len(weights)
            outs = [F.linear(x, w, b) for w, b in zip(weights, biases)]  # each (..., hi - lo)
            return outs[0] if len(outs) == 1 else torch.cat(outs, -1)  # (..., out_r)
        inputs = x.split([w.shape[1] for w in weights], -1)  # each (..., hi - lo)
        out = sum(F.linear(xs, w) for xs, w in zip(inputs, weights))  # (..., out)
        return out if self.bias is None else out + self.bias


class Subnet:
    """`model` cut down (in place) to rank `rank`'s subnetwork under `ownership` and `mask`.

    held: {Piece: tensor} of every piece the rank holds; owned units' pieces are trainable, the
    rest (backward masking only) are frozen.
    """

    def __init__(self, model: nn.Module, ownership: Ownership, rank: int, mask: str):
        if mask not in MASKS:
            raise ValueError(f"mask={mask!r} must be one of {MASKS}")
        self.model, self.ownership, self.rank, self.mask = model, ownership, rank, mask
        self.owned = ownership.owned(rank)
        owned = {p for u in self.owned for p in u.pieces}
        params = dict(model.named_parameters())
        modules = dict(model.named_modules())
        self.held: dict[Piece, torch.Tensor] = {}
        if ownership.granularity == "block":
            list_name, indices = find_blocks(model)
            blocks = modules[list_name]
            for unit, i in zip(ownership.units, indices):
                if rank in unit.owners:
                    continue
                if mask == "forward":
                    blocks[i] = nn.Identity()  # the residual stream passes the block by
                else:
                    for p in blocks[i].parameters():
                        p.requires_grad_(False)
        else:
            slices = [u for u in ownership.units if u.label != "shared"]
            for module_name, up, down in find_ffns(model):
                mine = [u for u in slices if u.pieces[0].name == _join(module_name, up, "weight")]
                kept = [u for u in mine if mask == "backward" or rank in u.owners]
                parts = [(u.pieces[0].lo, u.pieces[0].hi, rank in u.owners) for u in kept]
                module = modules[module_name]
                new_up = SlicedLinear(getattr(module, up), 0, parts)
                new_down = SlicedLinear(getattr(module, down), 1, parts)
                setattr(module, up, new_up)
                setattr(module, down, new_down)
                for j, u in enumerate(kept):
                    tensors = [new_up.weight_parts[j]] + (
                        [new_up.bias_parts[j]] if len(new_up.bias_parts) else []) + [
                        new_down.weight_parts[j]]
                    self.held.update(zip(u.pieces, tensors))
        for unit in ownership.units:
            for piece in unit.pieces:
                if piece.dim is None and (mask == "backward" or piece in owned):
                    self.held[piece] = params[piece.name]
        self.held = {p: t for p, t in self.held.items() if mask == "backward" or p in owned}

    def tensors(self, unit) -> list[torch.Tensor]:
        """The rank's tensors of `unit`'s pieces, in the unit's order."""
        return [self.held[p] for p in unit.pieces]

    def trainable(self) -> list[torch.Tensor]:
        """The owned tensors (what the optimizer steps), in unit order."""
        return [t for u in self.owned for t in self.tensors(u)]

    def frozen(self) -> list[torch.Tensor]:
        owned = {id(t) for t in self.trainable()}
        return [t for t in self.held.values() if id(t) not in owned]

    def state(self) -> list[tuple]:
        """(name, dim, lo, hi, values) of every owned piece: what the parent assembles."""
        return [(p.name, p.dim, p.lo, p.hi, self.held[p].detach().clone())
                for u in self.owned for p in u.pieces]


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def assemble(pieces_per_rank: list[list[tuple]], shapes: dict) -> dict:
    """Full parameters (named as the model names them, in its order) from the ranks' owned pieces;
    every unit has an owner, so every element is written."""
    full = {name: torch.empty(shape) for name, shape in shapes.items()}
    for pieces in pieces_per_rank:
        for name, dim, lo, hi, values in pieces:
            index = (slice(None),) if dim is None else (slice(None),) * dim + (slice(lo, hi),)
            full[name][index] = values  # the piece's rows / columns of the full tensor
    return full
