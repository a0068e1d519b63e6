"""Chapter 11's step-time model in virtual time (`parlab.run(..., clock="A100")`).

On a paced clock a compute span lasts Σ_op(launch_s + FLOPs/F_acc)/s accelerator seconds
(`parlab.core.clock`: launch_s the accelerator's cost per operator, F_acc the FLOP/s it sustains),
so one step of b rows costs, at speed 1, a per-row part t (the extra operators and FLOPs of one
more row) and a fixed part (launch_s·ops + the optimizer's work) that does not shrink with the
batch. `paced_rates` counts both on this machine, in process, with the clock's own operator meter
(forward + backward of one and of two rows, the optimizer step), so the LP of
`parlab.heterogeneous.shares` can be given the clock's f (in rows' worth) and the model predicts
the accelerator's seconds. On a model as small as the default GPT, f is many rows (~62 on an
A100): every operator's launch dominates (the clock's stated simplification), which is why giving
a slow device fewer rows saves less than its speed suggests.
"""

from __future__ import annotations

from parlab.core.pacer import count_work
from parlab.engine.loop import build_model, make_optimizer, step_batch


def _count(cfg, rows: int) -> tuple[int, float, int, float]:
    """(ops, FLOPs) of forward + backward on `rows` rows, and (ops, FLOPs) of the optimizer step."""
    model = build_model(cfg)
    optimizer = make_optimizer(model.parameters(), cfg)
    x, y = step_batch(cfg, 0)
    ops, flops = count_work(lambda: model.loss(x[:rows], y[:rows]).backward())
    step_ops, step_flops = count_work(optimizer.step)
    return ops, flops, step_ops, step_flops


_CACHE: dict = {}


def _rates(cfg) -> tuple[float, float, float]:
    key = (cfg.model, repr(cfg.model_config), cfg.batch_size, cfg.optimizer, cfg.clock)
    if key not in _CACHE:
        _CACHE[key] = _measure(cfg)
    return _CACHE[key]


def _measure(cfg) -> tuple[float, float, float]:
    ops1, flops1, opt_ops, opt_flops = _count(cfg, 1)
    ops2, flops2, _, _ = _count(cfg, 2)
    clock = cfg.clock
    row_s = clock.seconds(ops2 - ops1, flops2 - flops1)
    optimizer_s = clock.seconds(opt_ops, opt_flops)
    fixed_s = clock.seconds(ops1, flops1) - row_s + optimizer_s
    return row_s, fixed_s / row_s, optimizer_s / row_s


def paced_rates(cfg) -> tuple[float, float, float]:
    """(t, f, f_opt): one row's accelerator seconds at speed 1, the fixed work per step in rows'
    worth, and the optimizer's part of it (all a rank with no rows computes), for the
    configuration's model and clock (which must be paced)."""
    if not cfg.clock.paced:
        raise ValueError(f"clock={cfg.clock.name!r}: paced_rates needs a paced clock (e.g. 'A100')")
    return _rates(cfg)
