"""`hetero-hap`: a program of HAP's search space run on unequal devices (Zhang et al., "HAP: SPMD
DNN Training on Heterogeneous GPU Clusters with Automated Program Synthesis", EuroSys 2024).

`program=` is one sharding choice per operator of the GPT block (`parlab.heterogeneous.programs`:
"dp col col row col col row" is Megatron's tensor + sequence parallelism, "dp dp dp dp dp dp dp"
data parallelism), or "search": HAP's A* alternating with the ratio LP for this configuration's
speeds, link and clock (`parlab.heterogeneous.program_search.synthesise`). `shard=` sets the
sharding ratios: even, ∝ speed, or the LP for the program; `ratios=` gives them outright.
Every program is exact: each rank holds ranges of the reference's weights and every resharding
is an exact collective (`parlab.heterogeneous.hap_layers`), so it equals `single` for any
program and any ratios.
"""

from parlab.core.checks import Choice
from parlab.data_parallel.flat_all_reduce import all_reduce_flat
from parlab.engine.loop import Strategy, build_model, make_optimizer, train
from parlab.engine.prediction import Prediction
from parlab.engine.runner import register
from parlab.heterogeneous import cost, program_search
from parlab.heterogeneous import programs as pg
from parlab.heterogeneous.hap_layers import HapGPT, assemble_hap_state
from parlab.heterogeneous.shares import SHARDINGS

SEARCH = "search"


def hap_program(cfg) -> pg.Program:
    """The configuration's program: its `program` option, or HAP's search for it."""
    code = cfg.options["program"]
    if code == SEARCH:
        return program_search.synthesise(cfg).program
    return pg.parse(code)


def hap_plan(cfg) -> tuple[pg.Program, list[float], dict]:
    """(program, ratios w, split: heads / columns / rows per rank) of a configuration: `ratios`
    when given (what a search in the notebook found: the ranks need not search again), else by
    `shard`."""
    code, given = cfg.options["program"], cfg.options["ratios"]
    if given is not None:
        return hap_program(cfg), list(given), pg.split(cfg.model_config, cfg.batch_size, given)
    if code == SEARCH and cfg.options["shard"] == "lp":
        found = program_search.synthesise(cfg)
        return found.program, found.weights, found.split
    program = hap_program(cfg)
    weights = program_search.ratios_of(cfg, program)
    return program, weights, pg.split(cfg.model_config, cfg.batch_size, weights)


def _validate(cfg):
    if cfg.checkpoint:
        raise ValueError("checkpoint=True is not supported by hetero-hap: backward would recompute "
                         "the blocks' reshardings, which cost.hap_bytes does not count")
    code, given = cfg.options["program"], cfg.options["ratios"]
    if code != SEARCH:
        pg.parse(code)  # names a bad program
    if given is not None and (isinstance(given, (str, bytes)) or not hasattr(given, "__len__")
                              or len(given) != cfg.world_size
                              or any(isinstance(w, bool) or not isinstance(w, (int, float))
                                     or not 0 < w <= 1 for w in given)
                              or abs(sum(given) - 1) > 1e-6):
        raise ValueError(f"ratios={given!r} must be None or {cfg.world_size} numbers in (0, 1] "
                         "summing to 1, one per rank")
    program, weights, split = hap_plan(cfg)
    empty = [f"{dim} {split[dim]}" for dim in sorted(pg.dimensions_used(program))
             if 0 in split[dim]]
    if empty:
        raise ValueError(f"program={program.code!r} at ratios {[round(w, 3) for w in weights]} "
                         f"leaves a rank with no {', no '.join(empty)} (world_size="
                         f"{cfg.world_size}, batch_size={cfg.batch_size}): every rank needs a unit "
                         "of each dimension the program splits (fewer ranks, or another program)")


class HapProgram(Strategy):
    """One replica cut by a HAP program: forward and backward reshard inside the blocks; after
    backward the partial gradients (a data-parallel stream's embeddings and LayerNorms, the
    data-parallel linears) are summed over the ranks in one flat bucket. The whole global batch
    reaches every rank; the model takes the rows its stream holds."""

    def __init__(self, ctx):
        cfg = ctx.cfg
        self.program, self.weights, self.split = hap_plan(cfg)
        model = HapGPT(build_model(cfg), self.program, self.split, ctx.comm)
        reports = self.program["stream"] == pg.DATA or ctx.rank == 0  # else every rank has all of it
        super().__init__(ctx, model, make_optimizer(model.parameters(), cfg), reports_loss=reports,
                         holds_state=True)
        self.partial = model.partial_parameters()

    def sync(self, step: int) -> None:
        if self.ctx.world_size == 1 or not self.partial:
            return
        with self.ctx.ledger.label(phase="hap-grad-sync"):
            all_reduce_flat(self.ctx.comm, self.partial)  # (Σ numel,) summed over the ranks

    def extras(self) -> dict:
        return {"rank": self.ctx.rank, "program": self.program.code, "weights": self.weights,
                "split": self.split}


def _assemble(outputs, cfg):
    ranks = sorted(outputs, key=lambda o: o.extras["rank"])
    return assemble_hap_state([o.state for o in ranks], pg.parse(ranks[0].extras["program"]))


def hetero_hap_prediction(cfg) -> Prediction:
    program, _, split = hap_plan(cfg)
    return Prediction([sum(b.values()) for b in cost.hap_bytes(cfg, program, split)],
                      "steps × (n_layer × every resharding's exact ring all-gather / reduce-scatter "
                      "or all-reduce, forward and backward, + the partial gradients' ring all-reduce)")


@register("hetero-hap", shapes=True, summary="HAP: one sharding choice per GPT operator (replicate | rows | "
          "columns | data-parallel), searched by A* alternating with the ratio LP, or given",
          exact=True, options={"program": SEARCH, "shard": Choice("lp", SHARDINGS), "ratios": None},
          validate=_validate, assemble=_assemble, models=("gpt",), cost=hetero_hap_prediction)
def hetero_hap(ctx):
    return train(ctx, HapProgram(ctx))
