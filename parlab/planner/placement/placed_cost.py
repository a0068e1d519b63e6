"""Closed form of a placed operator graph's ledger (She et al., 2025, arXiv 2503.09357, §3: an
edge whose ends sit on different devices carries its tensor once per micro-batch).

Bytes each rank sends per step = Σ over (op u, other rank d holding a consumer of u) of
m · bytes(u) from u's rank (its activation, once to each such rank) and m · bytes(u) from d (the
gradient of u's output, summed over d's consumers, back to u's rank). `placed_prediction` is the
"placed" scheme's `cost=`: that, over every step of a run.
"""

from __future__ import annotations

from parlab.engine.prediction import Prediction
from parlab.models.op_graph import OpGraphSplit


def message_bytes(graph, plan) -> list[int]:
    """Bytes each rank sends per step (`graph`: an `parlab.models.op_graph.OpStructure`, `plan`: a
    `parlab.planner.placement.tasks.PlacementPlan`)."""
    place, sent = plan.placement, [0] * plan.ranks
    for u in graph.names:
        for d in {place[v] for v in graph.consumers(u)} - {place[u]}:
            sent[place[u]] += graph.microbatches * graph.nbytes(u)  # activations, u's rank → d
            sent[d] += graph.microbatches * graph.nbytes(u)  # gradients, d → u's rank
    return sent


def placed_prediction(cfg) -> Prediction:
    """What the closed form predicts for a "placed" run: `message_bytes` × steps, per rank."""
    split = OpGraphSplit(cfg.model_config, cfg.batch_size, cfg.options["microbatches"])
    per_step = message_bytes(split, cfg.options["plan"])
    return Prediction([cfg.steps * b for b in per_step],
                      "placed_cost.message_bytes: 2·m·bytes(u) per cross-rank edge u→rank")
