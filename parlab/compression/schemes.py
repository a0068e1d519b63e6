"""Chapter 08's schemes: compressed gradient sync and local updates on the data-parallel loop.

- `topk`, `randomk`, `qsgd`, `signsgd`: each rank compresses its gradient (with error feedback
  where the option says), one all-gather of the messages, every rank decodes and averages
  (`parlab.compression.sync`).
- `powersgd`: rank-r factors P, Q all-reduced (Vogels et al. 2019; `parlab.compression.powersgd`).
- `local-sgd`, `diloco`: parameters averaged every `sync_every` steps (Stich 2019; Douillard et
  al. 2023; `parlab.compression.local_sgd`).

All lossy, so `exact=False`; each states its bound, and the lossless settings are tested equal
to `single` (1e-4): `topk` with ratio=1, `powersgd` with rank ≥ every matrix's min(n, m),
`local-sgd` with sync_every=1 and optimizer="sgd". `topk` and `powersgd` run shapes-only
(`shapes=True`): tests/test_compression_scale.py holds each shapes-only run equal to its real
paced run (ledger, step times, memory), so chapter 08 runs them at gpt2-xl's shapes.
"""

from parlab.compression import cost
from parlab.compression.compressed_reducers import option_problems
from parlab.compression.local_sgd import DiLoCo, LocalSGD
from parlab.compression.powersgd import PowerSGDSync
from parlab.compression.sync import CompressedSync
from parlab.core.checks import Float
from parlab.engine.loop import build_model, train
from parlab.engine.run_config import MAX_LR
from parlab.engine.runner import register

# DiLoCo's outer SGD applies outer_lr to float32 tensors (torch refuses a step size past float32's
# 3.4e38: "value cannot be converted to type float without overflow"); the inner lr's bound
OUTER_LR = Float(0.7, min=0, strict=True, max=MAX_LR, unit="the outer SGD's step in float32")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _validate(cfg):
    """Checks every scheme here shares, then each option present; each names the bad value."""
    if cfg.batch_size % cfg.world_size:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by world_size={cfg.world_size}")
    o = cfg.options
    problems = option_problems(o)  # ratio, bits, rank, the flags: the compressors' own checks
    if problems:
        raise ValueError(problems[0])
    if "sync_every" in o and not (_is_int(o["sync_every"]) and o["sync_every"] >= 1):
        raise ValueError(f"sync_every={o['sync_every']!r} must be an int >= 1")
    if "outer_momentum" in o and not (_is_number(o["outer_momentum"]) and 0 <= o["outer_momentum"] < 1):
        raise ValueError(f"outer_momentum={o['outer_momentum']!r} must be a number in [0, 1)")


def _gathered(ctx, form):
    """Train with the compressor of `form` (the scheme's registered `cost.Gathered`)."""
    o = ctx.cfg.options
    model = build_model(ctx.cfg)
    encoder = form.compressor(**o)
    return train(ctx, CompressedSync(ctx, model, encoder, o.get("error_feedback", False)))


@register("topk", shapes=True,
          summary="top-k sparsification, error feedback (DGC adds more), all-gather (index, value)",
          exact=False, options={"ratio": 0.01, "error_feedback": True}, validate=_validate,
          cost=cost.TOPK)
def topk(ctx):
    return _gathered(ctx, cost.TOPK)


@register("randomk", summary="random-k sparsification, shared seed: values only, error feedback",
          exact=False, options={"ratio": 0.01, "error_feedback": True}, validate=_validate,
          cost=cost.RANDOMK)
def randomk(ctx):
    return _gathered(ctx, cost.RANDOMK)


@register("qsgd", summary="QSGD: stochastic quantization to packed bits + a norm per tensor",
          exact=False, options={"bits": 4, "error_feedback": False}, validate=_validate,
          cost=cost.QSGD_BITS)
def qsgd(ctx):
    return _gathered(ctx, cost.QSGD_BITS)


@register("signsgd", summary="EF-signSGD: packed sign bits + mean |g| scale, error feedback",
          exact=False, options={"error_feedback": True}, validate=_validate,
          cost=cost.SIGN)
def signsgd(ctx):
    return _gathered(ctx, cost.SIGN)


@register("powersgd", shapes=True,
          summary="PowerSGD: rank-r P, Q factors all-reduced, error feedback, warm start",
          exact=False, options={"rank": 4, "error_feedback": True, "warm_start": True},
          validate=_validate,
          cost=cost.POWERSGD)
def powersgd(ctx):
    o = ctx.cfg.options
    model = build_model(ctx.cfg)
    return train(ctx, PowerSGDSync(ctx, model, o["rank"], o["error_feedback"], o["warm_start"]))


@register("local-sgd", summary="Local SGD: local steps, parameters averaged every sync_every steps",
          exact=False, options={"sync_every": 4}, validate=_validate,
          cost=cost.PERIODIC)
def local_sgd(ctx):
    model = build_model(ctx.cfg)
    return train(ctx, LocalSGD(ctx, model, ctx.cfg.options["sync_every"]))


@register("diloco", summary="DiLoCo: inner AdamW for H steps, outer Nesterov SGD on the mean delta",
          exact=False, options={"sync_every": 4, "outer_lr": OUTER_LR,
                   "outer_momentum": 0.9},
          validate=_validate,
          cost=cost.PERIODIC)
def diloco(ctx):
    o = ctx.cfg.options
    model = build_model(ctx.cfg)
    return train(ctx, DiLoCo(ctx, model, o["sync_every"], o["outer_lr"], o["outer_momentum"]))
