"""The planner on virtual time (`parlab.run(..., clock="A100")`, `parlab.core.clock`): a compute
profile that is *counted*, not timed, and the real links the paced run prices.

A paced span lasts exactly Σ_kernel (launch_s + max(FLOPs / F_acc, bytes / HBM)) / speed
accelerator seconds (`Clock.price`, a roofline per kernel after Williams et al., CACM 2009), a
function of the operators run and their shapes alone. So this profile times nothing: it runs one
GPT block, the embedding + head and AdamW once under the paced clock's `WorkMeter`, counts their
kernels at two batch sizes and prices them — the `profile.Profile` lines the cost model reads, in
the accelerator's seconds, deterministic on any machine; a paced link is the real link
(`parlab.core.clock.pace_link`). What the calibration still fits: docs/planner.md,
`parlab.planner.counted_profile`.
"""

from __future__ import annotations

import torch

from parlab.core import clock as clocks
from parlab.core import pacer as pacers
from parlab.planner.profile import Line, Profile, block_flops, outside_flops, outside_loss

_CACHE: dict = {}


def clock_for(clock, world_size: int) -> clocks.Clock:
    """The `Clock` a run of `world_size` ranks keeps with `clock=` ("A100", ...); it must be paced
    (virtual time: the same clock at any world size)."""
    got = clocks.resolve(clock, world_size)
    if not got.paced:
        raise ValueError(f"clock={clock!r}: the paced planner needs a paced clock ('A100', 'H100', "
                         "'V100' or an Accelerator), not the wall clock")
    return got


def _line(clock, x: tuple[float, float], work: tuple[clocks.Work, clocks.Work]) -> Line:
    """The line (accelerator seconds) through two counted `Work`s at profile FLOPs x[0], x[1]."""
    t = [clock.price(w) for w in work]
    slope = max((t[1] - t[0]) / (x[1] - x[0]), 1e-18)
    return Line(max(t[0] - slope * x[0], 0.0), 1.0 / slope)


def profile(model_config, clock: clocks.Clock, rows: int = 12) -> Profile:
    """The paced `Profile` of `model_config` on `clock` (cached): every line in accelerator seconds."""
    from parlab.context_parallel.ring_attention import blockwise_attention
    from parlab.models.gpt import GPT, Block

    key = (model_config, clock, rows)
    if key in _CACHE:
        return _CACHE[key]
    cfg = model_config
    T, C = cfg.block_size, cfg.n_embd
    torch.manual_seed(0)
    block = Block.for_config(cfg)
    model = GPT(cfg, seed=0)
    small = max(1, rows // 4)

    def block_work(b):
        x = torch.randn(b, T, C, requires_grad=True)  # (B, T, C)
        grad = torch.randn(b, T, C)  # (B, T, C)
        holder = {}
        block.zero_grad(set_to_none=True)  # a step's backward assigns its gradients: nothing to add to
        fwd = pacers.count_work(lambda: holder.setdefault("y", block(x)))
        bwd = pacers.count_work(lambda: holder["y"].backward(grad))
        return fwd, bwd

    def outside_work(b):
        ids = torch.randint(0, model.wte.weight.shape[0], (b, T))  # (B, T)
        x = torch.randn(b, T, C, requires_grad=True)  # (B, T, C): the last block's output
        holder = {}

        def forward():
            holder["loss"] = outside_loss(model, ids, x)
        model.zero_grad(set_to_none=True)  # gradients assigned, as in a step, not accumulated
        fwd = pacers.count_work(forward)
        bwd = pacers.count_work(lambda: holder["loss"].backward())
        return fwd, bwd

    (bf_s, bb_s), (bf_b, bb_b) = block_work(small), block_work(rows)
    x = (block_flops(small, T, C), block_flops(rows, T, C))
    (of_s, ob_s), (of_b, ob_b) = outside_work(small), outside_work(rows)
    xo = (outside_flops(small, T, C, cfg.vocab_size), outside_flops(rows, T, C, cfg.vocab_size))
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    from parlab.engine.loop import optimizer_spec
    opt_class, settings = optimizer_spec(type("Cfg", (), {"optimizer": "adamw", "lr": 1e-3})())

    def steady_step(tensors) -> float:  # the second step: the first creates the moments
        optimizer = opt_class(tensors, **settings)
        optimizer.step()
        return clock.price(pacers.count_work(optimizer.step))
    every, first = steady_step(params), steady_step([params[0]])
    per_tensor_s = (every - first) / max(len(params) - 1, 1)  # an average tensor's update
    fixed_s = max(first - per_tensor_s, 0.0)
    # ring attention merges 2cp+1 score blocks per rank: one more block's forward + backward
    shape = (rows, cfg.n_head, T, C // cfg.n_head)  # (B, nh, T, hs)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    blocks = 8 if T % 8 == 0 else 1
    chunk = 0.0
    if blocks > 1:
        def fresh(t: int):  # q, k, v's gradients assigned, not accumulated, in each count
            q.grad = k.grad = v.grad = None
            return pacers.count_work(lambda: blockwise_attention(q, k, v, t).sum().backward())
        many, one = fresh(T // blocks), fresh(T)
        chunk = max(clock.price(many) - clock.price(one), 0.0) / (blocks - 1)
    prof = Profile(_line(clock, x, (bf_s, bf_b)), _line(clock, x, (bb_s, bb_b)),
                   _line(clock, xo, (of_s, of_b)), _line(clock, xo, (ob_s, ob_b)),
                   per_tensor_s, 0.0, 1 << 30, cfg, chunk, fixed_s)  # cores: paced spans never share one
    _CACHE[key] = prof
    return prof
