"""`apply_zero(model, mesh, stage)`: ZeRO along the data dimension, the one way to attach it.

Rajbhandari et al., "ZeRO" (SC 2020): stage 1, 2 or 3 over the dp × cp group, on the slice of
the model this rank holds after tensor and pipeline parallelism — this chapter's engine
(`parlab.zero.zero_engine.ZeroEngine`). The chapter's own `zero-*` schemes call it on the plain
GPT with a one-dimensional mesh (`Mesh(comm, [("dp", comm.size)])`, `reuse_world=True`), the
planner on the composed GPT (`parlab.planner.compose.parallelize`).
"""

from __future__ import annotations

from typing import TypeVar

import torch.nn as nn

from parlab.core.mesh import Mesh
from parlab.engine.dimension import Dimension, add_dimension
from parlab.zero.shard import FlatLayout, assemble_state
from parlab.zero.zero_engine import ZeroEngine

M = TypeVar("M", bound=nn.Module)


class ZeroDimension(Dimension):
    """ZeRO as the step sees it: its engine's step counter, reduce-scatter after backward,
    all-gather after the step, and its flat shards as what the optimizer steps."""

    name = "zero"
    holds_full_slice = False
    axes = ("dp", "cp")

    @staticmethod
    def assemble(pieces: list) -> dict:
        """The slice's parameters from every dp × cp rank's flat shards."""
        pieces = sorted(pieces, key=lambda p: p.extras["data_rank"])
        layouts = [FlatLayout.from_meta(m) for m in pieces[0].extras["layouts"]]
        return assemble_state(layouts, [p.extras["shards"] for p in pieces])

    def __init__(self, engine: ZeroEngine):
        self.engine = engine

    def start_step(self) -> None:
        self.engine.start_step()

    def after_backward(self) -> None:
        self.engine.end_backward()

    def after_step(self) -> None:
        self.engine.after_step()

    def clear_grads(self, optimizer) -> bool:
        self.engine.zero_grad()
        return True

    def trainable(self) -> list:
        return self.engine.shards

    def memory(self, memory: dict, optimizer) -> dict:
        return self.engine.memory(optimizer)  # its own accounting: shards, gathered, padding

    def extras(self) -> dict:
        return {"data_rank": self.engine.comm.rank,
                "shards": {u.name: u.shard.detach().clone() for u in self.engine.units},
                "layouts": [u.layout.to_meta() for u in self.engine.units]}


def _data_group(mesh: Mesh, reuse_world: bool = False):
    """The dp × cp Comm (None when the mesh has neither dimension). With `reuse_world`, when
    dp × cp is the whole world, the mesh's own world Comm instead of a new split of it: the same
    ranks under the world's name, so its ledger records say `group="world"` (the chapter's)."""
    if reuse_world and mesh.degree("dp") * mesh.degree("cp") == mesh.world.size:
        return mesh.world
    return mesh.group_over(("dp", "cp"), "dp×cp")


def apply_zero(model: M, mesh: Mesh, stage: int, meter=None, *, prefetch: bool = False,
               algo: str = "gloo", reuse_world: bool = False) -> M:
    """Shard `model` (any nn.Module: a composed GPT's slice or a chapter's plain model) over dp × cp
    at ZeRO `stage`, recorded as `model.data_comm` and registered as the model's "zero"
    dimension (`ZeroDimension`, its `engine` the `ZeroEngine`).

    `meter` (an ActivationMeter) is told which tensors are gathered parameters, not activations;
    `prefetch` (stage 3: FSDP's prefetch and asynchronous reduce-scatter) and `algo` ("gloo" or
    "ring") are the engine's; `reuse_world` as in `_data_group` (the planner leaves it off: its
    records say "dp×cp"). Nothing to shard when the mesh has no dp or cp dimension."""
    model.data_comm = _data_group(mesh, reuse_world)
    if model.data_comm is None:
        return model
    hooks = {}
    if meter is not None:
        from parlab.core.memory import storage_key
        hooks = {"on_gather": lambda t: meter.excluded.add(storage_key(t)),
                 "on_release": lambda t: meter.excluded.discard(storage_key(t))}
    engine = ZeroEngine(model, model.data_comm, stage, prefetch=prefetch, algo=algo, **hooks)
    return add_dimension(model, ZeroDimension(engine))
