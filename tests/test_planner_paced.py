"""Chapter 13 in paced time (`clock="A100"` on the real NVLink, dilated alike: parlab.core.clock):
the cost model's paced step prediction, each plan calibrated on the *other* plans (leave one
out), against the measured paced steps at world sizes 4 and 8 — median error ≤ 15%, Spearman ≥ 0.9
and the planner's regret under a memory cap ≤ 10% (`search.GOALS`, the issue's goals, asserted
as they are: paced steps repeat within ~2% under load, tests/test_clock.py, and the model
measured 2–3% median error at both sizes, so the goals are the stated tolerance). The same runs
prove each plan's peak memory and ledger bytes equal the closed forms and each plan equals
`single`; the paced profile is counted, so its line is exact on sliced blocks."""


import pytest

import parlab
from parlab.planner import bench, costmodel, explore, paced, search
from parlab.planner.cost import nd_closed_form_bytes
from parlab.planner.plan import Plan
from tests.helpers import ledger_by_phase

KINDS = ("params", "grads", "optimizer", "activations")
STEPS = 2  # the step time is step 1's: paced steps repeat, one after the warm-up is enough

# cheap plans (0.2–1.3 paced s a step) with distinct step times, every dimension, ZeRO, GPipe,
# recomputation; the composition tests (test_planner_compose.py) leave these shapes to this sweep
PLANS_4 = [Plan(pp=4), Plan(pp=4, microbatches=2), Plan(dp=2, pp=2, zero=1, microbatches=2),
           Plan(dp=4), Plan(pp=2, cp=2), Plan(dp=2, tp=2, checkpoint=True),
           Plan(dp=2, pp=2, microbatches=2, schedule="gpipe")]
CAP_4 = 1.4e6  # bytes per rank: binds (pp4 m1, the fastest plan, needs 1.49 MB)
# cheap plans at 8 ranks (0.5–2.5 paced s a step, each ≥ 20% from the next), two of them 3-D
# (the composition tests' world size 8 runs here)
PLANS_8 = [Plan(dp=2, pp=4), Plan(dp=2, pp=4, microbatches=2), Plan(dp=4, pp=2),
           Plan(pp=4, cp=2, microbatches=2), Plan(dp=2, tp=2, pp=2)]
CAP_8 = 1.0e6
# a run whose real work overran more than this share of its paced compute (ranks descheduled: 8
# ranks, 2 cores, CI's second test stream beside them) is measured again, the least overrun kept —
# the clock reports contention, so a contended run is re-measured rather than judged
MAX_OVERRUN = 0.05


@pytest.fixture(scope="module")
def sweep4():
    return explore.sweep(4, "NVLink", STEPS, plans=PLANS_4, memory_cap=CAP_4, clock="A100",
                         max_overrun=MAX_OVERRUN)


@pytest.fixture(scope="module")
def sweep8():
    return explore.sweep(8, "NVLink", STEPS, plans=PLANS_8, memory_cap=CAP_8, clock="A100",
                         max_overrun=MAX_OVERRUN)


def _goals_hold(s):
    j = s.judgement
    report = (f"{s.frame()[['plan', 'predicted_ms', 'measured_ms', 'error']]}\n{j}\n"
              f"worst overrun {s.overrun:.1%} (contention showing through the paced clock) after "
              f"{s.remeasured} re-measured runs")
    assert j.median_error <= search.GOALS["median_error"], report
    assert j.spearman >= search.GOALS["spearman"], report
    assert j.regret <= search.GOALS["regret"], report
    assert j.choice is not None and j.best is not None, report


def test_paced_goals_at_world_size_4(sweep4, capsys):
    _goals_hold(sweep4)
    assert sweep4.clock.label == "A100 time ×30,000" and sweep4.method == "leave one out"
    assert not any(r["calibration"] for r in sweep4.rows)  # every prediction is held out
    explore.goals_report(sweep4)
    out = capsys.readouterr().out
    assert "paced ms, A100 time ×30,000" in out and "MISSED" not in out
    assert "agrees with this run on all three goals" in out


def test_paced_goals_at_world_size_8(sweep8):
    _goals_hold(sweep8)
    assert sweep8.clock.dilation == pytest.approx(60_000)


@pytest.fixture(scope="module")
def reference():
    return parlab.run("single", steps=STEPS, batch_size=12)


@pytest.mark.parametrize("world_size", [4, 8])
def test_every_run_is_exact_and_its_memory_and_bytes_are_closed_forms(world_size, sweep4, sweep8,
                                                                       reference):
    """Each paced run = `single` (losses, parameters); every rank's ledger bytes per phase =
    `nd_closed_form_bytes`; the peak rank's params, grads, moments and activations = the closed
    forms byte for byte, and the busiest rank's bytes = the cost model's message list."""
    s = {4: sweep4, 8: sweep8}[world_size]
    cfg = explore.model_config()
    for plan, r in s.results.items():
        assert r.compare(reference).match, plan.describe()
        assert ledger_by_phase(r) == nd_closed_form_bytes(plan, r.config), plan.describe()
        predicted = costmodel.memory(cfg, plan, 12)
        peak = max(r.memory, key=lambda m: sum(m.get(k, 0) for k in KINDS))
        assert {k: peak.get(k, 0) for k in KINDS} == {k: predicted[k] for k in KINDS}, plan
        assert s.measured[plan]["peak_bytes"] == predicted["total"], plan
        assert s.measured[plan]["bytes"] == sum(costmodel.predict_bytes(plan, cfg, 12).values())


def test_paced_profile_is_counted_and_exact():
    """A paced span is a function of its operators and FLOPs: the profile's line equals the
    counted paced time of a block sliced by rows, tokens or width, and is the same every time."""
    rows = bench.check_scaling(clock="A100", world_size=4)
    assert all(abs(r["error"]) < 1e-9 for r in rows), rows
    clock = paced.clock_for("A100", 4)
    assert paced.profile(explore.model_config(), clock) is paced.profile(explore.model_config(), clock)
    with pytest.raises(ValueError, match="clock='wall'"):
        paced.clock_for("wall", 4)


def test_paced_prediction_is_in_paced_seconds():
    """The same plan at world size 4 and 8: paced seconds scale with the clock's margin M (and the
    link's dilation N with it); in accelerator seconds (÷ N) the raw model is the same."""
    cfg = explore.model_config()
    got = {}
    for ws in (4, 8):
        clock = paced.clock_for("A100", ws)
        p = costmodel.predict(Plan(dp=2, pp=2), cfg, paced.profile(cfg, clock), None, "NVLink",
                              12, None, clock)
        got[ws] = (p.step_s, clock.accelerator_seconds(p.step_s))
    assert got[8][0] == pytest.approx(2 * got[4][0])
    assert got[8][1] == pytest.approx(got[4][1])


def test_a_contended_run_is_measured_again_and_the_least_overrun_kept():
    runs = iter([{"overrun": 0.30, "step_s": 1.3}, {"overrun": 0.02, "step_s": 1.0},
                 {"overrun": 0.00, "step_s": 0.9}])
    got, repeats = search.least_overrun(lambda: next(runs), 0.05, 2)
    assert (got["step_s"], repeats) == (1.0, 1)  # the second run was under 5%: no third
    runs = iter([{"overrun": 0.30, "step_s": 1.3}, {"overrun": 0.20, "step_s": 1.1},
                 {"overrun": 0.40, "step_s": 1.5}])
    got, repeats = search.least_overrun(lambda: next(runs), 0.05, 2)
    assert (got["step_s"], repeats) == (1.1, 2)  # retries spent: the least overrun of the three
    assert search.least_overrun(lambda: {"overrun": 0.9}, None, 2)[1] == 0
    with pytest.raises(ValueError, match="max_overrun=0.05 needs a paced clock"):
        explore.sweep(2, "NVLink", plans=[Plan(dp=2)], clock="wall", max_overrun=0.05)
