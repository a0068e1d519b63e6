"""`python -m parlab bench pp`'s sweep runs ZB-V (`pp-zbv`, Qi et al., ICLR 2024, §6) beside the
other schedules, with its closed-form bubble (p−1)/(6m+p−1) where it holds (m >= 2p−1), its
schedule rebuilt with two chunks per rank (runs faked: the plumbing is every schedule's)."""

import pytest

from parlab.pipeline import bench, cost
from parlab.pipeline.schedules import make_schedule


def test_sweep_lists_zbv_where_its_closed_form_holds(monkeypatch, capsys):
    calls = []

    def fake(scheme, pp, m, steps, batch, model_config, ours="", **options):
        calls.append((scheme, m))
        return {"scheme": scheme, "ours": ours, "pp": pp, "m": m, "samples_per_s": 10.0,
                "bubble": float("nan"), **options}

    monkeypatch.setattr(bench, "_measure", fake)
    rows = bench.sweep([2], [2, 4], 2, 8, bench.MODEL)
    assert ("pp-zbv", 4) in calls and ("pp-zbv", 2) not in calls  # m=2 < 2p−1 = 3
    zbv = next(r for r in rows if r["scheme"] == "pp-zbv")
    assert zbv["theory"] == cost.theory_bubble("zbv", 2, 4) == pytest.approx(1 / 25)


def test_bench_rebuilds_zbv_with_two_chunks_per_rank():
    """`_measure` rebuilds the schedule it ran to price its ideal bubble: ZB-V's is two chunks per
    rank (one would raise), its simulated bubble the closed form at F = B = W."""
    schedule = make_schedule("zbv", 2, 4, bench.CHUNKS.get("zbv", 1))
    assert schedule.name == "zbv"
    assert cost.ideal_bubble(schedule) == pytest.approx(cost.theory_bubble("zbv", 2, 4))
