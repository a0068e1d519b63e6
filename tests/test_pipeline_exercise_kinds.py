"""Chapters 04 and 05: at least two design exercises and one predict-then-run each; the predict
cells' measurements on virtual time (A100) or the ledger, equal to their closed forms."""

import pytest

from parlab.local_learning import exercises as ll_exercises
from parlab.pipeline import exercises as pp_exercises


@pytest.mark.parametrize("module", [pp_exercises, ll_exercises])
def test_kinds(module):
    kinds = [e.kind for e in module.EXERCISES]
    assert 5 <= len(kinds) <= 6 and kinds.count("design") >= 2 and kinds.count("predict") >= 1
    for name, answer in module.answers().items():
        assert module.exercise(name).check(answer)


def test_schedule_fits_picks_the_least_bubble_that_fits():
    assert pp_exercises.fitting_schedule() == "zb"
    assert pp_exercises.lost_mfu() == pytest.approx(0.55 * 24 * 0.12 / (31 * 0.12 + 0.15))


def test_pipedream_fit_is_the_largest_m_that_fits():
    m = ll_exercises.most_in_flight()
    assert ll_exercises.stage0_gb("pipedream", m) <= 80 < ll_exercises.stage0_gb("pipedream", m + 1)
    assert ll_exercises.least_idle_fitting(8) == "2bw"


def test_interlock_prediction_is_measured_exactly(capsys):
    from parlab.local_learning.explore import predict

    out = predict.measure_down_bytes(98304, p=3, depth=2)
    assert out["measured"] == out["closed"] == ll_exercises.answers()["interlock-run"]
    assert "equal" in capsys.readouterr().out


def test_bubble_prediction_agrees_on_the_paced_clock(capsys):
    from parlab.pipeline.explore import predict

    out = predict.measure_bubble(None, p=2, m=6)
    assert out["theory"] == pp_exercises.answers()["bubble-measured"]
    assert abs(out["measured"] - out["theory"]) <= 0.05
    assert "agrees" in capsys.readouterr().out
