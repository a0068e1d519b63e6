"""Flat, padded shards: how ZeRO cuts a model's parameters, gradients and Adam moments into N pieces.

ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
SC 2020) partitions the model states across the N data-parallel ranks; PyTorch FSDP (Zhao et al.,
"PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel", VLDB 2023, §3.2) does it the
way copied here: the parameters of one *unit* (a transformer block, or the embeddings) are laid
end to end in one flat vector of Ψ_u elements, padded with zeros to a multiple of N, and rank r
owns the r-th of N equal chunks. Equal chunks make every reduce-scatter and all-gather uniform,
and the padding (< N elements per unit) is real memory and real bytes: it shows in the measured
numbers, so it is reported rather than hidden.

`FlatLayout` is the pure description (picklable, used by checkpoints and by the parent to
reassemble the full state); `FlatUnit` binds it to live modules inside a rank. The closed forms
of ZeRO's memory and bytes per step: `parlab.zero.cost`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from parlab.core.cost import round_up

EMPTY = torch.empty(0)  # what a released ZeRO-3 parameter points at


@dataclass(frozen=True)
class FlatLayout:
    """Where each parameter of one unit lives in its flat vector: [(name, shape)], in order."""

    name: str
    params: tuple  # ((param name, shape tuple), ...)

    @property
    def numel(self) -> int:
        return sum(math.prod(shape) for _, shape in self.params)

    def padded(self, world: int) -> int:
        """Ψ_u rounded up to a multiple of `world` (FSDP's padding)."""
        return round_up(self.numel, world)

    def shard_numel(self, world: int) -> int:
        return self.padded(world) // world

    def shard_range(self, world: int, rank: int) -> tuple[int, int]:
        k = self.shard_numel(world)
        return rank * k, (rank + 1) * k

    def offsets(self):
        start = 0
        for name, shape in self.params:
            n = math.prod(shape)
            yield name, shape, start, n
            start += n

    def unflatten(self, flat: torch.Tensor) -> dict:
        """{param name: tensor} from a flat vector (padding ignored); clones, on CPU."""
        return {name: flat[lo:lo + n].reshape(shape).clone() for name, shape, lo, n in self.offsets()}

    def to_meta(self) -> dict:
        """Plain types only (loadable with torch.load(weights_only=True))."""
        return {"name": self.name, "params": [[n, list(s)] for n, s in self.params]}

    @classmethod
    def from_meta(cls, meta: dict) -> FlatLayout:
        return cls(meta["name"], tuple((n, tuple(s)) for n, s in meta["params"]))


def unpad_concat(shards: list[torch.Tensor], numel: int) -> torch.Tensor:
    """Rank-ordered shards → the unpadded flat vector."""
    return torch.cat([s.reshape(-1) for s in shards])[:numel]  # (Ψ_u,)


def reshard(shards: list[torch.Tensor], numel: int, world: int) -> list[torch.Tensor]:
    """Shards of one unit at one world size → shards at `world` (pad, cut into equal chunks)."""
    flat = unpad_concat(shards, numel)  # (Ψ_u,)
    padded = round_up(numel, world)
    flat = torch.cat([flat, flat.new_zeros(padded - numel)])  # (padded,)
    return list(flat.chunk(world))  # world × (padded/world,)


def assemble_state(layouts: list[FlatLayout], shards_by_rank: list[dict]) -> dict:
    """The full {param name: tensor} from every rank's {unit name: param shard}."""
    state = {}
    for layout in layouts:
        flat = unpad_concat([shards[layout.name] for shards in shards_by_rank], layout.numel)
        state.update(layout.unflatten(flat))
    return state


# ----------------------------------------------------------------------------- units of a model
def unit_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module, list]]:
    """[(unit name, module, [(param name, param)])]: each block (GPT.blocks, MLP.layers) is a unit,
    and the parameters outside the blocks (embeddings, final norm, tied head) form the root unit,
    listed last. A parameter shared between modules (tied weights) belongs to the root."""
    blocks_attr = "blocks" if hasattr(model, "blocks") else "layers" if hasattr(model, "layers") \
        else None
    units, owned = [], set()
    if blocks_attr is not None:
        for i, block in enumerate(getattr(model, blocks_attr)):
            params = [(f"{blocks_attr}.{i}.{n}", p) for n, p in block.named_parameters()]
            units.append((f"{blocks_attr}.{i}", block, params))
            owned.update(id(p) for _, p in params)
    root = [(n, p) for n, p in model.named_parameters() if id(p) not in owned]
    if root:
        units.append(("root", model, root))
    return units


class FlatUnit:
    """One unit inside a rank: its layout, its modules' parameters, and this rank's shard range."""

    def __init__(self, name: str, module: torch.nn.Module, params: list, world: int, rank: int):
        self.module, self.params = module, [p for _, p in params]
        self.layout = FlatLayout(name, tuple((n, tuple(p.shape)) for n, p in params))
        self.world, self.rank = world, rank
        self.numel, self.padded = self.layout.numel, self.layout.padded(world)
        self.lo, self.hi = self.layout.shard_range(world, rank)

    @property
    def name(self) -> str:
        return self.layout.name

    def flatten(self, tensors) -> torch.Tensor:
        """Concatenate (params or grads; None → zeros) and pad: (padded,)."""
        dtype = self.params[0].dtype  # the compute copy's: fp32, or bf16/fp16 in mixed precision
        parts = [t.detach().reshape(-1) if t is not None else torch.zeros(p.numel(), dtype=dtype)
                 for t, p in zip(tensors, self.params)]
        parts.append(torch.zeros(self.padded - self.numel, dtype=dtype))
        return torch.cat(parts)  # (padded,)

    def bind(self, flat: torch.Tensor) -> None:
        """Point every parameter's data at its slice of `flat` (views: no copy)."""
        for p, (_, shape, lo, n) in zip(self.params, self.layout.offsets()):
            p.data = flat[lo:lo + n].view(shape)

    def bind_grads(self, flat_grad: torch.Tensor) -> None:
        for p, (_, shape, lo, n) in zip(self.params, self.layout.offsets()):
            p.grad = flat_grad[lo:lo + n].view(shape)

    def release(self) -> None:
        """ZeRO-3: drop the gathered parameters (the shard stays)."""
        for p in self.params:
            p.data = EMPTY
