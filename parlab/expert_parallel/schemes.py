"""Schemes `ep` and `ep-allgather`: a mixture-of-experts GPT with its experts sharded over ep ranks
(GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2022), data parallel over what is left.

The world is a mesh dp × ep (ep innermost): each ep group holds the E experts once, E/ep per
rank; dense weights are averaged over the world, each expert's gradient over its dp replicas.
Routing and dropping follow the single process's global rule
(`parlab.models.gpt_moe.RoutingPlan`), so both schemes equal `single` on `model="gpt-moe"`.
`ep=None` picks the largest divisor of world_size that divides n_experts. Shapes-only runs need
even routing (`model_config={"routing": "even"}`, `parlab.models.moe_routing.EvenPlan`). In full:
docs/expert_parallel.md, `parlab.expert_parallel.schemes`.
"""

from __future__ import annotations

from parlab.core.checks import Int
from parlab.core.mesh import Mesh
from parlab.data_parallel.flat_all_reduce import all_reduce_flat
from parlab.engine.loop import Strategy, build_model, make_optimizer, train
from parlab.engine.prediction import Prediction
from parlab.engine.runner import register
from parlab.expert_parallel import cost
from parlab.expert_parallel.apply import apply_ep
from parlab.expert_parallel.layer import assemble_state, expert_parameter_names
from parlab.models.gpt import gpt_on_mesh
from parlab.models.gpt_moe import MoE

EP = Int(None, min=1, none=True)  # None: the largest degree that fits


def resolve_ep(cfg) -> int:
    """The `ep` option, or (None) the largest divisor of world_size dividing n_experts."""
    if cfg.options["ep"] is not None:
        return cfg.options["ep"]
    E = cfg.model_config.n_experts
    return max(d for d in range(1, cfg.world_size + 1) if cfg.world_size % d == 0 and E % d == 0)


def validate(cfg) -> None:
    ep, E = resolve_ep(cfg), cfg.model_config.n_experts
    problems = []
    if E % ep:
        problems.append(f"n_experts={E} is not divisible by ep={ep}")
    if cfg.world_size % ep:
        problems.append(f"world_size={cfg.world_size} is not divisible by ep={ep}")
    if cfg.batch_size % cfg.world_size:
        problems.append(f"batch_size={cfg.batch_size} is not divisible by world_size="
                        f"{cfg.world_size} (every rank takes its own rows)")
    if problems:
        raise ValueError("; ".join(problems))


class ExpertParallel(Strategy):
    """dp × ep: dispatch by all-to-all (`method="all_to_all"`) or by all-gather."""

    def __init__(self, ctx, method: str):
        cfg, W = ctx.cfg, ctx.world_size
        ep = resolve_ep(cfg)
        self.mesh = Mesh(ctx.comm, [("dp", W // ep), ("ep", ep)])
        # the experts over ep ⊂ dp by the function the planner's composed plans call too: every
        # rank a data-parallel rank, dp coordinate d ep rank d mod ep (ep innermost, as above)
        model = apply_ep(gpt_on_mesh(build_model(cfg)), Mesh(ctx.comm, [("dp", W)]), ep, method)
        super().__init__(ctx, model, make_optimizer(model.parameters(), cfg), shard=ctx.rank,
                         shards=W, holds_state=self.mesh.coords["dp"] == 0)
        names = set(expert_parameter_names(model))
        named = list(model.named_parameters())
        self.experts = [p for n, p in named if n in names]
        self.dense = [p for n, p in named if n not in names]

    def sync(self, step: int) -> None:
        W, mesh = self.ctx.world_size, self.mesh
        if W > 1:
            with self.ctx.ledger.label(phase="grad-sync"):
                all_reduce_flat(self.ctx.comm, self.dense, "avg")  # every rank's rows
            with self.ctx.ledger.label(phase="expert-grad-sync"):
                if mesh.size("dp") > 1:
                    all_reduce_flat(mesh["dp"], self.experts, "sum")  # the ep groups' sums
                for p in self.experts:
                    p.grad.div_(W)  # Σ over every rank's loss -> the mean loss's gradient

    def extras(self) -> dict:
        return {"ep_rank": self.mesh.coords["ep"], "ep": self.mesh.size("ep"),
                "dp": self.mesh.size("dp"), "group": self.mesh["ep"].ranks,
                "routing": [b.mlp.log for b in self.model.blocks if isinstance(b.mlp, MoE)]}


def _assemble(outputs, cfg):
    holders = sorted((o for o in outputs if o.state is not None), key=lambda o: o.extras["ep_rank"])
    model = build_model(cfg)
    return assemble_state([o.state for o in holders], expert_parameter_names(model))


def _sync_prediction(cfg, ep: int, rank: int) -> dict:
    counts = cost.parameter_counts(cfg.model_config)
    dp = cfg.world_size // ep
    return cost.sync_bytes(counts["dense"], counts["experts"] // ep, cfg.world_size, rank, dp,
                           rank // ep)


def predict_all_gather(cfg) -> Prediction:
    """ep-allgather's bytes do not depend on the routing: the closed forms of `cost`."""
    ep, m, W = resolve_ep(cfg), cfg.model_config, cfg.world_size
    n_moe = m.n_layer // m.moe_every
    tokens = cfg.batch_size // W * m.block_size
    sent = []
    for rank in range(W):
        layer = cost.all_gather_layer_bytes(tokens, ep, rank % ep, W, rank, m.n_embd, m.top_k,
                                            m.n_experts)
        sync = _sync_prediction(cfg, ep, rank)
        sent.append(cfg.steps * (n_moe * sum(layer.values()) + sum(sync.values())))
    return Prediction(sent, "parlab.expert_parallel.cost.all_gather_layer_bytes + sync_bytes")


OPTIONS = {"ep": EP}


@register("ep", summary="expert parallelism: dispatch / combine by all-to-all (GShard); dp × ep",
          shapes=True, exact=True, options=OPTIONS, validate=validate, assemble=_assemble,
          models=("gpt-moe",))
def ep_scheme(ctx):
    return train(ctx, ExpertParallel(ctx, "all_to_all"))


@register("ep-allgather", summary="expert parallelism the naive way: all-gather tokens, "
          "reduce-scatter outputs", shapes=True, exact=True, options=OPTIONS, validate=validate,
          assemble=_assemble, models=("gpt-moe",), cost=predict_all_gather)
def ep_allgather_scheme(ctx):
    return train(ctx, ExpertParallel(ctx, "all_gather"))
