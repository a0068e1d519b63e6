"""A configuration resolved into a dp × pp mesh, micro-batches, and stages cut from the reference.

The stages are chapter 04's (`parlab.pipeline.stages`): every rank builds the whole reference
model from the seed and keeps only its stage's layers, so stage k's weights *are* the reference's
layers and the exact cases of this chapter (one stage; global backprop) compute what `single`
computes. Layers per stage are even (chapter 04's `partition` balances them by measured time,
PipeDream's min-max split; `partition_merge` cuts and merges them for `layerwise-merge`).

Everything is checked here, before any process starts, with a ValueError naming each value.
"""

from __future__ import annotations

from dataclasses import dataclass

from parlab.core.mesh import validate_degrees
from parlab.pipeline import stages as stages_mod


@dataclass(frozen=True)
class Layout:
    dp: int  # pipeline replicas
    pp: int  # stages, one per rank of a replica
    microbatches: int  # per step and replica
    counts: tuple  # layers per stage
    rows: int  # rows of the global batch per replica

    @property
    def mb_rows(self) -> int:
        return self.rows // self.microbatches


def n_layers(cfg) -> int:
    mc = cfg.model_config
    return mc.n_layer if cfg.model == "gpt" else mc.n_layer + 1  # the MLP has n_layer+1 linears


def resolve(cfg, allow_dp: bool = True) -> Layout:
    """Degrees, micro-batches and layers per stage of `cfg`; ValueError names each bad value.

    pp=None: the deepest pipeline the world size and the layers allow. microbatches=None: the
    fewest that fill it (the smallest divisor of the replica's rows that is >= pp).
    """
    o, layers, world = cfg.options, n_layers(cfg), cfg.world_size
    pp = o.get("pp")
    if pp is None:
        pp = max(d for d in range(1, world + 1) if world % d == 0 and d <= layers or d == 1)
    dp = validate_degrees(world, dp=None, pp=pp)["dp"]
    if pp > layers:
        raise ValueError(f"pp={pp} stages > {layers} layers (model={cfg.model!r}, "
                         f"n_layer={cfg.model_config.n_layer}): more stages than layers")
    if not allow_dp and dp > 1:
        raise ValueError(f"world_size={world} with pp={pp} gives dp={dp}; {cfg.scheme!r} updates "
                         "after every micro-batch and runs one pipeline only: use pp=world_size")
    if cfg.batch_size % dp:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by dp={dp} "
                         f"(world_size={world} / pp={pp})")
    rows = cfg.batch_size // dp
    m = o.get("microbatches")
    if m is None:
        m = next((k for k in range(1, rows + 1) if rows % k == 0 and k >= pp), rows)
    if rows % m:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by dp={dp} × "
                         f"microbatches={m} (equal micro-batches keep the loss the global mean)")
    return Layout(dp, pp, m, tuple(stages_mod.even_partition(layers, pp)), rows)


def stage_parameters(model, counts, stage: int) -> list:
    """The parameters stage `stage` holds (cuts `model`: keep a fresh copy for each call)."""
    return list(stages_mod.build_stages(model, [stage], list(counts))[stage].parameters())
