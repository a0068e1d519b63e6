"""Chapter 11's step-time model in virtual time (`parlab.run(..., clock="A100")`).

On a paced clock a compute span lasts Σ_kernel(launch_s + max(FLOPs/F_acc, bytes/HBM))/s
accelerator seconds (`parlab.core.clock`: launch_s the accelerator's cost per kernel, F_acc the
FLOP/s it sustains, HBM its memory bandwidth), so one step of b rows costs, at speed 1, a per-row
part t (the extra FLOPs and bytes of one more row) and a fixed part (launch_s·kernels + the
optimizer's work) that does not shrink with the
batch. `paced_rates` counts both on this machine, in process, with the clock's own operator meter
(forward + backward of two rows and of the batch, the optimizer's steady step: the first also creates
AdamW's moments), so the LP of
`parlab.heterogeneous.shares` can be given the clock's f (in rows' worth) and the model predicts
the accelerator's seconds. On a model as small as the default GPT, f is many rows (over a thousand on
an A100): every operator's launch dominates (the clock's stated simplification), which is why giving
a slow device fewer rows saves less than its speed suggests.
"""

from __future__ import annotations

from parlab.core.clock import Work
from parlab.core.pacer import count_work
from parlab.engine.loop import build_model, make_optimizer, step_batch


def _count(cfg, rows: int) -> tuple[Work, Work]:
    """The `Work` of forward + backward on `rows` rows, and of the optimizer step."""
    model = build_model(cfg)
    optimizer = make_optimizer(model.parameters(), cfg)
    x, y = step_batch(cfg, 0)
    model.loss(x[:rows], y[:rows]).backward()  # the first step also creates the gradients and
    optimizer.step()  # AdamW's moments: the step after it is the steady one the run repeats
    optimizer.zero_grad()
    work = count_work(lambda: model.loss(x[:rows], y[:rows]).backward())
    return work, count_work(optimizer.step)


_CACHE: dict = {}


def _rates(cfg) -> tuple[float, float, float]:
    key = (cfg.model, repr(cfg.model_config), cfg.batch_size, cfg.optimizer, cfg.clock)
    if key not in _CACHE:
        _CACHE[key] = _measure(cfg)
    return _CACHE[key]


def _measure(cfg) -> tuple[float, float, float]:
    # two and B rows (one and two when B ≤ 2): a single row runs fewer kernels than any larger
    # share (measured: 0.730 A100 ms against 0.796 for two rows, then +1.7 µs a row), so a line
    # through one row would price every added row at the kernels the second one adds
    lo, hi = (2, cfg.batch_size) if cfg.batch_size > 2 else (1, 2)
    low, optimizer = _count(cfg, lo)
    high, _ = _count(cfg, hi)
    clock = cfg.clock
    row_s = (clock.price(high) - clock.price(low)) / (hi - lo)
    optimizer_s = clock.price(optimizer)
    fixed_s = clock.price(low) - lo * row_s + optimizer_s
    return row_s, fixed_s / row_s, optimizer_s / row_s


def paced_rates(cfg) -> tuple[float, float, float]:
    """(t, f, f_opt): one row's accelerator seconds at speed 1, the fixed work per step in rows'
    worth, and the optimizer's part of it (all a rank with no rows computes), for the
    configuration's model and clock (which must be paced)."""
    if not cfg.clock.paced:
        raise ValueError(f"clock={cfg.clock.name!r}: paced_rates needs a paced clock (e.g. 'A100')")
    return _rates(cfg)
