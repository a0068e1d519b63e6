"""Chapter 11's LP charges nothing to a rank it gives no rows (Zhang et al., "HAP", EuroSys 2024:
the LP over the ranks that take rows), the threshold below which the slowest device takes none is
derived from it, the paced model counts the optimizer's steady step, and the chapter's exercises
(two design problems, one predict-then-run) check without telling."""

import itertools

import pytest

from parlab.heterogeneous import exercises, shares
from parlab.heterogeneous.explore import summary


def _step(rows, speeds, f, idle=0.0):
    return max(shares.busy_time(b, s, f, idle) for b, s in zip(rows, speeds))


def test_a_rank_without_rows_costs_nothing_in_the_lp():
    # every rank taking rows: the slow rank's f/s = 6 sets T; without it the others need 1.5 + 4
    _, t_all = shares._solve_all(12, [1, 1, 1, 0.25], 1.5)
    rows, t_star = shares.solve_lp(12, [1, 1, 1, 0.25], 1.5)
    assert t_all == pytest.approx(6) and t_star == pytest.approx(5.5)
    assert rows == pytest.approx([4, 4, 4, 0])
    # an idle rank still pays its optimizer step (idle rows / s): at 2 / 0.25 = 8 > 6, it takes rows
    assert shares.solve_lp(12, [1, 1, 1, 0.25], 1.5, idle_rows=2.0)[1] == pytest.approx(6)
    assert shares.solve_lp(12, [1, 1, 1, 0.25], 1.5, idle_rows=1.0)[1] == pytest.approx(5.5)
    # when every rank takes rows the LP is unchanged
    assert shares.solve_lp(1024, [1, 1, 1, 0.25], 96)[1] == pytest.approx(1408 / 3.25)


def test_the_lp_bounds_every_whole_row_sharding_when_idle_ranks_pay_nothing():
    for speeds, f, batch in (([1, 0.7, 0.25], 1.0, 9), ([1, 1, 0.25], 6.0, 8), ([1, 0.5], 12.0, 6)):
        best = min(_step(rows, speeds, f) for rows in itertools.product(range(batch + 1), repeat=len(speeds))
                   if sum(rows) == batch)
        _, t_star = shares.solve_lp(batch, speeds, f)
        assert t_star <= best + 1e-9
        assert _step(shares.lp(batch, speeds, f), speeds, f) == pytest.approx(best)


def test_the_no_rows_threshold_is_derived_from_the_lp():
    floor = summary.no_rows_below([1.0, 0.25], 12, 28.0)  # f / T*_others = 28 / 40
    assert floor == pytest.approx(0.7)
    for s, takes in ((0.69, False), (0.71, True)):
        rows, _ = shares.solve_lp(12, [1.0, s], 28.0)
        assert (rows[1] > 1e-9) is takes


def test_rule_3_kinds_and_answers(capsys):
    kinds = [e.kind for e in exercises.EXERCISES]
    assert 5 <= len(kinds) <= 6 and kinds.count("design") >= 2 and kinds.count("predict") == 1
    right = {"even-step": 12, "lp-time": 434, "hap-collectives": 48 * 4 + 1, "v100-rows": 20,
             "keep-or-drop": 567.08, "slow-rank-bytes": 322_944}
    assert set(right) == {e.name for e in exercises.EXERCISES}
    for name, answer in right.items():
        ex = exercises.exercise(name)
        assert ex.check(answer) and not ex.check(answer * 1.5 + 1) and not ex.check(None)
    out = capsys.readouterr().out
    for answer in (434, 193, 567, "322,944", 322944):
        assert str(answer) not in out


def test_keep_or_drop_prices_both_plans():
    plans = exercises._keep_or_drop_ms()
    assert plans["a100-only"] == pytest.approx(9 * 61 + 2 * 7 / 8 * 3.1e9 / 300e9 * 1e3)
    assert plans["all-16"] == pytest.approx(8 * 61 + 2 * 15 / 16 * 3.1e9 / 25e9 * 1e3)


def test_paced_model_counts_the_steady_optimizer_step():
    """The run's slow rank with no rows spends exactly the model's idle_rows·t/s (virtual time)."""
    import parlab
    from parlab.engine.runner import make_config
    from parlab.heterogeneous.paced_model import paced_rates

    cfg = make_config("hetero-dp", world_size=2, steps=3, speeds=[1, 0.25], batch_size=12, clock="A100")
    row_s, f, idle = paced_rates(cfg)
    r = parlab.run("hetero-dp", world_size=2, steps=3, speeds=[1, 0.25], shard="lp", batch_size=12,
                   fixed_rows=f, clock="A100")
    assert r.outputs[0].extras["rows"] == [12, 0]
    spans = [e["t1"] - e["t0"] for e in r.timeline
             if e["rank"] == 1 and e["name"] == "optimizer" and e["args"].get("step") == 2]
    assert spans and spans[0] == pytest.approx(idle * row_s / 0.25, rel=1e-9)


def test_predict_cell_measures_the_closed_form(capsys):
    from parlab.heterogeneous.explore import predict

    out = predict.slow_rank_bytes(None, world_size=2)
    assert out["bytes"] == out["closed_form"]
    assert "none yet" in capsys.readouterr().out
