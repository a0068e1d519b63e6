"""Schemes `tp` and `tp-sp`: Megatron tensor parallelism (Shoeybi et al. 2019), with sequence
parallelism (Korthikanti et al., MLSys 2023), and data parallelism over what is left (2D dp × tp).

The world is a mesh dp × tp (`parlab.core.mesh.Mesh`, tp innermost): each tp group holds one
replica, the one GPT cut by `apply_tp` (`parlab.tensor_parallel.apply`); dp groups average every
gradient, like `ddp-naive`. Options: `tp=None` (the largest degree that fits), `vocab_parallel`
(`parlab.tensor_parallel.vocab`), `async_tp` (`parlab.tensor_parallel.async_ops`, same bytes),
`algo="ring"` (chapter 00's pipelined ring instead of gloo's). Per block and step: tp — 2
all-reduces of B·T·C forward (g), 2 backward (f); tp-sp — 2 all-gathers + 2 reduce-scatters each
way (+ 2 all-gathers with `regather=True`). `parlab.tensor_parallel.cost.closed_form_bytes` gives
the exact per-rank numbers the tests check. In full: docs/tensor_parallel.md,
`parlab.tensor_parallel.schemes`.
"""

from __future__ import annotations

from parlab.core.checks import Bool, Choice, Int
from parlab.core.mesh import Mesh, validate_degrees
from parlab.core.precision import PRECISIONS
from parlab.data_parallel.flat_all_reduce import all_reduce_flat
from parlab.engine.loop import Strategy, build_model, make_optimizer, train
from parlab.engine.runner import register
from parlab.models.gpt import gpt_on_mesh
from parlab.models.llama_parts import tp_factors
from parlab.tensor_parallel import gqa
from parlab.tensor_parallel.apply import apply_tp
from parlab.tensor_parallel.async_ops import apply_async_tp
from parlab.tensor_parallel.layers import assemble_state, replicated_parameters

TP = Int(None, min=1, none=True)  # None: the largest degree that fits


def divisibility_problems(cfg, tp: int, sequence_parallel: bool) -> list[str]:
    """Every factor that a tp degree `tp` does not divide, as readable phrases."""
    m = cfg.model_config
    checks = [("n_head", m.n_head), ("n_embd", m.n_embd), ("MLP width 4·n_embd", 4 * m.n_embd)]
    checks += [(n, v) for n, v in tp_factors(m) if n != "n_kv_head"]  # SwiGLU's d_ff
    n_kv = getattr(m, "n_kv_head", None)
    kv_problem = ([f"n_kv_head={n_kv} and tp={tp} do not divide one another (a rank holds whole "
                   "key/value groups, or a copy of one: parlab.tensor_parallel.gqa)"]
                  if n_kv is not None and n_kv % tp and tp % n_kv else [])
    if sequence_parallel:
        checks.append(("sequence length block_size", m.block_size))
    if cfg.options.get("async_tp") and not cfg.options.get("regather", True):
        return [f"async_tp=True overlaps the regathered all-gather: it needs regather=True, got "
                f"regather={cfg.options['regather']}"]
    if cfg.options.get("vocab_parallel"):
        checks.append(("vocab_size", m.vocab_size))
    problems = kv_problem + [f"{name}={value} is not divisible by tp={tp}" for name, value in checks
                             if value % tp]
    if cfg.world_size % tp:
        problems.append(f"world_size={cfg.world_size} is not divisible by tp={tp}")
    elif cfg.batch_size % (cfg.world_size // tp):
        problems.append(f"batch_size={cfg.batch_size} is not divisible by "
                        f"dp=world_size/tp={cfg.world_size // tp}")
    return problems


def resolve_tp(cfg, sequence_parallel: bool) -> int:
    """The `tp` option, or (None) the largest divisor of world_size that fits the model."""
    tp = cfg.options["tp"]
    if tp is not None:
        return tp
    for candidate in range(cfg.world_size, 0, -1):
        if not divisibility_problems(cfg, candidate, sequence_parallel):
            return candidate
    return cfg.world_size  # nothing fits: validate reports the factors of tp = world_size


def _validator(sequence_parallel: bool):
    def validate(cfg):
        check_fits(cfg, sequence_parallel)
    return validate


def check_fits(cfg, sequence_parallel: bool) -> None:
    """ValueError naming every factor that fails: for the given tp, or for every divisor of
    world_size when tp=None and none fits."""
    tp = resolve_tp(cfg, sequence_parallel)
    problems = divisibility_problems(cfg, tp, sequence_parallel)
    if problems and cfg.options["tp"] is None:
        tries = [f"tp={t}: " + ", ".join(divisibility_problems(cfg, t, sequence_parallel))
                 for t in range(cfg.world_size, 0, -1) if cfg.world_size % t == 0]
        raise ValueError(f"no tp degree fits world_size={cfg.world_size} — " + "; ".join(tries))
    if problems:
        raise ValueError("; ".join(problems))


def _assemble(outputs, cfg):
    shards = sorted((o for o in outputs if o.state is not None), key=lambda o: o.extras["tp_rank"])
    return assemble_state([o.state for o in shards], cfg.options.get("vocab_parallel", False),
                          gqa.copies_of(cfg.model_config, len(shards)))


class TensorParallel(Strategy):
    """One replica sliced over a tp group, replicas data parallel over dp: after backward the
    sequence-parallel replicated gradients are summed over tp, then every gradient averaged over
    dp."""

    def __init__(self, ctx, sequence_parallel: bool):
        cfg = ctx.cfg
        degrees = validate_degrees(cfg.world_size, dp=None, tp=resolve_tp(cfg, sequence_parallel))
        self.mesh = Mesh(ctx.comm, [("dp", degrees["dp"]), ("tp", degrees["tp"])])
        self.sequence_parallel = sequence_parallel
        vocab_parallel = cfg.options.get("vocab_parallel", False)
        model = apply_tp(gpt_on_mesh(build_model(cfg)), self.mesh, sequence_parallel,
                         cfg.options.get("regather", True), vocab_parallel,
                         cfg.options.get("algo", "gloo"))
        if cfg.options.get("async_tp"):
            apply_async_tp(model)
        self.mine = model.positions  # (T/tp,) with SP: this rank's tokens; else all T
        self.share = len(self.mine) / cfg.model_config.block_size
        tp_rank = self.mesh.coords["tp"]
        # without SP every tp rank computes the same loss: rank 0 of the tp group reports it
        super().__init__(ctx, model, make_optimizer(model.parameters(), cfg),
                         shard=self.mesh.coords["dp"], shards=degrees["dp"],
                         reports_loss=sequence_parallel or tp_rank == 0,
                         holds_state=self.mesh.coords["dp"] == 0)
        self.replicated = replicated_parameters(model, vocab_parallel)
        self.kv_copies = gqa.copies_of(cfg.model_config, degrees["tp"])  # > 1: tp > n_kv_head

    def batch(self, step: int):
        """This rank's tokens (all of them without SP), copied: what the embedding and the loss
        save for backward holds only them, not the global batch's storage."""
        x, y = super().batch(step)  # (B/dp, T)
        return x[:, self.mine], y[:, self.mine]  # (B/dp, T/tp) with SP, else (B/dp, T)

    def loss(self, batch):
        """With SP, the mean over this rank's T/tp tokens × T/tp / T: its tokens' summed loss over
        all B·T tokens, so the tp ranks' losses add up to the mean."""
        return super().loss(batch) * self.share

    def sync(self, step: int) -> None:
        ctx, mesh = self.ctx, self.mesh
        if self.kv_copies > 1:  # each key/value head's copies saw only their query heads
            with ctx.ledger.label(phase="kv-grad-sync"):
                gqa.sync_replicated_kv([b.attn for b in self.model.blocks], mesh["tp"],
                                       mesh.size("tp"), mesh.coords["tp"],
                                       self.model.config.n_kv_head)
        if self.sequence_parallel and mesh.size("tp") > 1:
            with ctx.ledger.label(phase="sp-grad-sync"):  # each rank saw T/tp of the tokens
                all_reduce_flat(mesh["tp"], self.replicated)  # (Σ numel,) summed over tp
        if mesh.size("dp") > 1:
            with ctx.ledger.label(phase="dp-grad-sync"):
                for p in self.model.parameters():
                    mesh["dp"].all_reduce(p.grad, op="avg")  # (local param shape,) over dp

    def extras(self) -> dict:
        return {"tp_rank": self.mesh.coords["tp"], "tp": self.mesh.size("tp"),
                "dp": self.mesh.size("dp")}


@register("tp", shapes=True, summary="Megatron tensor parallelism (f/g all-reduces); dp × tp via tp=",
          exact=True, options={"tp": TP, "vocab_parallel": Bool(False)}, validate=_validator(False),
          assemble=_assemble,
          models=("gpt",), precisions=tuple(PRECISIONS))
def tp_scheme(ctx):
    return train(ctx, TensorParallel(ctx, sequence_parallel=False))


@register("tp-sp", shapes=True, summary="tensor + sequence parallelism (all-gather / reduce-scatter)",
          exact=True, options={"tp": TP, "regather": Bool(True), "async_tp": Bool(False),
                               "algo": Choice("gloo", ("gloo", "ring"))},
          validate=_validator(True), sequence_parallel=True,
          assemble=_assemble, models=("gpt",), precisions=tuple(PRECISIONS))
def tp_sp_scheme(ctx):
    return train(ctx, TensorParallel(ctx, sequence_parallel=True))
