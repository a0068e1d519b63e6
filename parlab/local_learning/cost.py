"""The closed forms of chapter 05: bytes across each boundary, stashed weight versions, idle time.

Bytes per step and boundary (boundary j between stage j and j+1, a replica of r rows per step,
an activation of T·C numbers per row for the GPT, d_hidden for the MLP, 4 bytes each):

    activations up (sent by stage j):        r·T·C·4                      every scheme
    gradients down (sent by stage j+1):      |crossing(j)|·r·T·C·4        one tensor per loss

`crossing(j)` (`routes.Route.crossing`) holds the losses m ∈ [j+1, min(j+d, p−1)] with nonzero
weight: none for `local` (Belilovsky et al., ICML 2020: activations only), one per boundary for
interlocking at depth 1 (Gomez et al., JMLR 2022), p−1−j for global backprop at depth p−1
(aux_weight 0: just the true loss, one per boundary, as in every pipeline of chapter 04).

Weight versions a PipeDream stage holds (Narayanan et al., SOSP 2019, §3.3): a micro-batch's
backward must use the weights its forward used, so stage s stashes one version per micro-batch in
flight, min(p−s, m) — the input stage the most. PipeDream-2BW (ICML 2021, §3.1) updates once per
m micro-batches and keeps two versions, the one in use and the one before it, whatever p is, as
long as m >= p.

Layer-wise partitioning and merging (Akintoye et al., FGCS 2023; `partition_merge`): k stages ×
dp replicas of one synchronous 1F1B pipeline. Per step and rank (stage s, replica d): r·T·C·4 up
if s < k−1 and r·T·C·4 down if s > 0 (r = rows of the replica), the tied embedding's ring of two
between the first and last stage (GPT, k > 1), and one flat ring all-reduce of the stage's Ψ_s
parameters over dp: 2(dp−1)/dp·Ψ_s·4 (`merge_bytes_per_rank`). Memory per stage: Ψ_s·4 weights,
Ψ_s·4 gradients, Ψ_s·8 AdamW moments, and **no** stashed weight version (`merge_stage_memory`);
PipeDream's stage s stashes min(p−s, m) copies on top, 2BW two. The step the merge minimises:
`merge_step_time`.
"""

from __future__ import annotations

from parlab.core import cost as core_cost
from parlab.core.cost import FP32_BYTES
from parlab.engine.loop import build_model
from parlab.engine.prediction import Prediction
from parlab.local_learning.heads import head_numel
from parlab.local_learning.layout import Layout, resolve, stage_parameters
from parlab.local_learning.routes import Route
from parlab.pipeline import cost as pp_cost


def boundary_numel(model_config, rows: int) -> int:
    """Numbers in the activation of `rows` samples between two stages."""
    if hasattr(model_config, "n_embd"):
        return rows * model_config.block_size * model_config.n_embd  # (rows, T, C)
    return rows * model_config.d_hidden  # (rows, d_hidden)


def activation_bytes(model_config, rows: int) -> int:
    """Bytes one step's activations take across one boundary (rows of the replica)."""
    return boundary_numel(model_config, rows) * FP32_BYTES


def gradient_bytes(route: Route, boundary: int, model_config, rows: int) -> int:
    """Bytes one step's gradients take down across `boundary`: one tensor per crossing loss."""
    return len(route.crossing(boundary)) * activation_bytes(model_config, rows)


def boundary_table(route: Route, model_config, rows: int) -> list[dict]:
    """Per boundary: bytes per step up (activations) and down (gradients), and the losses."""
    return [{"boundary": j, "activations": activation_bytes(model_config, rows),
             "gradients": gradient_bytes(route, j, model_config, rows),
             "losses_down": route.crossing(j)} for j in range(route.pp - 1)]


def pipedream_versions(pp: int, microbatches: int, stage: int) -> int:
    """Weight versions PipeDream stage `stage` holds at its peak: one per micro-batch in flight."""
    return min(pp - stage, microbatches)


def pipedream_warmup(pp: int, microbatches: int, stage: int) -> int:
    """Forwards before the first backward; also the staleness of every steady-state update."""
    return min(pp - 1 - stage, microbatches - 1)


def twobw_versions(pp: int, microbatches: int, stage: int) -> int:
    """Weight versions a PipeDream-2BW stage holds: 2, or 1 where nothing waits for a backward
    (the last stage, or one micro-batch in flight)."""
    return 2 if pipedream_warmup(pp, microbatches, stage) > 0 else 1


def stash_bytes(versions: int, stage_numel: int) -> int:
    return versions * stage_numel * FP32_BYTES


def one_f_one_b_idle(pp: int, microbatches: int) -> float:
    """Idle fraction of a flushed pipeline (GPipe / 1F1B): (p−1)/(m+p−1)."""
    return (pp - 1) / (microbatches + pp - 1)


def decoupled_idle(pp: int, microbatches: int, steps: int) -> float:
    """Idle fraction of a pipeline that never flushes (local learning, PipeDream): the fill is
    paid once per run, (p−1)/(steps·m + p−1)."""
    return (pp - 1) / (steps * microbatches + pp - 1)


def flushed_catches_up(pp: int, steps: int, compute_ratio: float, most: int = 4096) -> int | None:
    """The fewest micro-batches m at which a flushed 1F1B pipeline's modelled throughput reaches a
    never-flushed scheme's that computes `compute_ratio`× its work per step (local learning's
    auxiliary heads, interlocking's second backward): throughput ∝ (1 − idle)/compute, so the
    flushed pipeline catches up once (1 − decoupled_idle)/(1 − one_f_one_b_idle) ≤ compute_ratio.
    None when it never does up to `most` (a scheme that computes no more than 1F1B)."""
    for m in range(1, most + 1):
        if (1 - decoupled_idle(pp, m, steps)) / (1 - one_f_one_b_idle(pp, m)) <= compute_ratio:
            return m
    return None


# ----------------------------------------------------------------------------- predictions
def _stage_numels(cfg, layout: Layout) -> list[list[int]]:
    return [[q.numel() for q in stage_parameters(build_model(cfg), layout.counts, s)]
            for s in range(layout.pp)]


def bytes_per_rank(cfg, layout: Layout, route: Route, tie_every_step: bool = True) -> list[int]:
    """Bytes each world rank sends over the run (the ledger's total) for a route on a layout."""
    p, dp, steps = layout.pp, layout.dp, cfg.steps
    numels = _stage_numels(cfg, layout) if dp > 1 or cfg.model == "gpt" else None
    out = []
    for rank in range(cfg.world_size):
        d, s = divmod(rank, p)
        per_step = 0
        if s < p - 1:
            per_step += activation_bytes(cfg.model_config, layout.rows)
        if s > 0:
            per_step += gradient_bytes(route, s - 1, cfg.model_config, layout.rows)
        if route.tied and p > 1 and cfg.model == "gpt" and s in (0, p - 1) and tie_every_step:
            vocab_c = cfg.model_config.vocab_size * cfg.model_config.n_embd
            per_step += core_cost.ring_all_reduce(vocab_c, 2, 0 if s == 0 else 1)[0] * FP32_BYTES
        if dp > 1:
            stage = numels[s] + ([head_numel(cfg.model_config)] if route.has_head(s) else [])
            per_step += sum(core_cost.ring_all_reduce(n, dp, d)[0] for n in stage) * FP32_BYTES
        out.append(per_step * steps)
    return out


def predict(cfg, depth: int, aux_weight: float) -> Prediction:
    layout = resolve(cfg)
    route = Route.of(layout.pp, depth, aux_weight)
    return Prediction(bytes_per_rank(cfg, layout, route),
                      "activations r·T·C·4 up and |crossing(j)|·r·T·C·4 down per boundary and step"
                      " (local_learning.cost); tie and dp all-reduces as rings")



def predict_pipe(cfg) -> Prediction:
    """PipeDream / 2BW: one activation up and one gradient down per micro-batch and boundary
    (global backprop's route), the tie summed at every update only with one micro-batch."""
    layout = resolve(cfg, allow_dp=False)
    route = Route.of(layout.pp, layout.pp - 1, 0.0)
    return Prediction(bytes_per_rank(cfg, layout, route, tie_every_step=layout.microbatches == 1),
                      "r·T·C·4 up and r·T·C·4 down per boundary and step (local_learning.cost)")


# ----------------------------------------------------------------------------- partition and merge
def merge_messages_received(pp: int, stage: int) -> int:
    """Messages a stage of a k-stage 1F1B pipeline receives per micro-batch: its input from below
    (s > 0) and its output's gradient from above (s < k−1)."""
    return (stage > 0) + (stage < pp - 1)


def merge_step_time(pipeline_s: float, sync_s: list[float], optimizer_s: list[float]) -> float:
    """The merge's step: its pipeline (the simulated 1F1B of `partition_merge`; equal stages of t
    per micro-batch and free messages: (m+k−1)·t, chapter 04's), then the slowest stage's
    gradient sync and update: pipeline + max_s(sync_s + optimizer_s)."""
    return pipeline_s + max(a + b for a, b in zip(sync_s, optimizer_s))


def merge_in_flight(pp: int, microbatches: int, stage: int) -> int:
    """Micro-batches whose activations a merged stage holds at once: 1F1B's min(k−s, m)."""
    return pp_cost.in_flight_peak("1f1b", pp, microbatches, stage)


def merge_bytes_per_rank(cfg, layout: Layout) -> list[int]:
    """Bytes each world rank sends over the run (module docstring): boundaries, tie, flat dp ring."""
    p, dp, mc = layout.pp, layout.dp, cfg.model_config
    numels = [sum(n) for n in _stage_numels(cfg, layout)]
    out = []
    for rank in range(cfg.world_size):
        d, s = divmod(rank, p)
        per_step = activation_bytes(mc, layout.rows) * ((s < p - 1) + (s > 0))  # up + down
        if cfg.model == "gpt" and p > 1 and s in (0, p - 1):
            per_step += core_cost.ring_all_reduce(mc.vocab_size * mc.n_embd, 2,
                                                  0 if s == 0 else 1)[0] * FP32_BYTES
        if dp > 1:
            per_step += core_cost.ring_all_reduce(numels[s], dp, d)[0] * FP32_BYTES
        out.append(per_step * cfg.steps)
    return out


def predict_merge(cfg, layout: Layout) -> Prediction:
    return Prediction(merge_bytes_per_rank(cfg, layout),
                      "r·T·C·4 up and down per boundary and step, the tie's ring of two, one flat "
                      "dp ring per stage (local_learning.cost.merge_bytes_per_rank)")


def merge_stage_memory(stage_numel: int, optimizer: str = "adamw") -> dict:
    """Bytes a merged stage holds besides activations (fp32): weights, gradients, optimizer state
    (AdamW's two moments; none for SGD) and stashed weight versions — none: one version only."""
    return {"params": stage_numel * FP32_BYTES, "grads": stage_numel * FP32_BYTES,
            "optimizer": 2 * stage_numel * FP32_BYTES if optimizer == "adamw" else 0,
            "stashed_weights": 0}
