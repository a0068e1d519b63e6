"""Chapter 11 in virtual time: the step-time model's t and f come from the clock's own operator
meter (deterministic), and the chapter's lessons hold in A100 time, compared exactly (a paced run
is bit-reproducible, parlab.core.clock: no tolerance for noise is needed)."""

import pytest

from parlab.engine.runner import make_config
from parlab.heterogeneous import explore
from parlab.heterogeneous.paced_model import paced_rates


def test_paced_rates_are_deterministic_and_the_fixed_work_is_many_rows():
    cfg = make_config("hetero-dp", world_size=2, clock="A100", speeds=[1, 0.25])
    from parlab.heterogeneous import paced_model

    paced_model._CACHE.clear()
    first = paced_rates(cfg)
    paced_model._CACHE.clear()
    assert paced_rates(cfg) == first  # a count of operators and FLOPs, not a clock reading
    row_s, fixed_rows, optimizer_rows = first
    assert row_s > 0 and fixed_rows > 1 and 0 < optimizer_rows < fixed_rows
    with pytest.raises(ValueError, match="paced"):
        paced_rates(make_config("hetero-dp", world_size=2))


def test_lp_beats_proportional_beats_even_in_paced_time():
    # the notebook's 12 rows on an A100: the tiny GPT is launch-bound (f ≈ 36 rows of fixed work
    # per step, every kernel's 4 µs launch), so moving rows off the slow rank barely helps:
    # proportional [10, 2] measured 9.849 A100 ms against even's 9.876, LP [12, 0] 6.634 (1.49×;
    # the model 1.61×)
    rows = explore.measure_shardings(2, explore.speeds_for(2), steps=2, batch_size=12)
    by = {r["shard"]: r["step_ms"] for r in rows}
    assert by["lp"] * 1.4 <= by["even"]  # the slow rank gets no rows
    lp = next(r for r in rows if r["shard"] == "lp")
    assert lp["speedup"] == pytest.approx(lp["model_speedup"], rel=0.1)  # the model saw it coming
    assert by["lp"] <= by["proportional"] <= by["even"]  # exact: virtual time has no noise
    assert explore.verdict(rows)


def test_backup_worker_drops_the_paced_straggler():
    b0, b1 = explore.backup_sweep(2, steps=3, backups=(0, 1))
    assert b1["dropped"] == [1]
    # measured 0.659 (6.202 vs 9.411 A100 ms): the fast rank stops waiting for the straggler's
    # 4× longer forward and backward (0.387 before views stopped costing a launch: b=0's step
    # shrank from 16.55 ms, b=1's from 6.408)
    assert b1["step_ms"] <= 0.75 * b0["step_ms"]
