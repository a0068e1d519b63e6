"""The "placed" scheme: a `parlab.planner.placement.tasks.PlacementPlan` (op → rank, and per rank the
ordered F/B tasks; She et al., 2025, arXiv 2503.09357) run as training steps of the one loop by
`parlab.planner.placement.placed.PlacedStrategy`, on the operator graph model ("op-graph",
`parlab.models.op_graph`). Exact: it equals `parlab.run("single", model="op-graph")`.

    parlab.run("placed", world_size=plan.ranks, plan=plan, microbatches=2, **graph.run_options())
"""

from __future__ import annotations

from parlab.core.checks import Int
from parlab.engine.loop import train
from parlab.engine.runner import register
from parlab.models.op_graph import OpGraphSplit
from parlab.planner.placement.op_costs import op_graph
from parlab.planner.placement.placed import PlacedStrategy
from parlab.planner.placement.placed_cost import placed_prediction
from parlab.planner.placement.tasks import PlacementPlan, evaluate


def validate(cfg) -> None:
    """ValueError naming the value, before any process starts: the plan, its ranks, its ops,
    every task once on its op's rank, an order that does not deadlock, the micro-batch split."""
    plan, m = cfg.options["plan"], cfg.options["microbatches"]
    if not isinstance(plan, PlacementPlan):
        raise ValueError(f"plan={plan!r} must be a parlab.planner.placement.tasks.PlacementPlan "
                         "(solve(graph, ranks), pipeline_plan(graph, ranks))")
    if plan.ranks != cfg.world_size:
        raise ValueError(f"plan {plan.name!r} has ranks={plan.ranks}, but world_size="
                         f"{cfg.world_size}")
    split = OpGraphSplit(cfg.model_config, cfg.batch_size, m)  # batch_size % microbatches
    if set(plan.placement) != set(split.names):
        raise ValueError(f"plan {plan.name!r} places {sorted(plan.placement)}, not the graph's "
                         f"ops {sorted(split.names)}")
    bad = {op: r for op, r in plan.placement.items() if not 0 <= r < plan.ranks}
    if bad:
        raise ValueError(f"plan {plan.name!r} places {bad} outside ranks 0..{plan.ranks - 1}")
    unit = {n: 1.0 for n in split.names}
    evaluate(op_graph(split.edges(), unit, unit, m), plan)  # every task once; no deadlock


def assemble(outputs: list, cfg) -> dict:
    """The full state: the union of the ranks' ops' parameters (each op on one rank)."""
    return {name: p for out in outputs for name, p in (out.state or {}).items()}


@register("placed", summary="operator placement (She et al. 2025): a PlacementPlan's per-rank "
          "task lists, activations and gradients as send/recv", exact=True,
          options={"plan": None, "microbatches": Int(1, min=1)}, validate=validate,
          assemble=assemble, models=("op-graph",), cost=placed_prediction)
def placed(ctx):
    return train(ctx, PlacedStrategy(ctx, ctx.cfg.options["plan"], ctx.cfg.options["microbatches"]))
