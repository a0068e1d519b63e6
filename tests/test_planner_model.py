"""Chapter 13's cost model, planner and extrapolation: bytes equal to the scheme's registered
closed form for every plan, the planner under a cap, the judge, the calibration, the hardware
extrapolation, the exercises (memory and bytes against measured runs, and the model's accuracy
in paced time: test_planner_paced.py)."""

import math

import pytest

from parlab.core.cost import AlphaBeta
from parlab.planner import costmodel, exercises, search
from parlab.planner.plan import Plan
from parlab.planner.profile import CommFit, Line, Profile
from parlab.planner.scaling import extrapolate

KINDS = ("params", "grads", "optimizer", "activations")


def _config():
    from parlab.models import model_config
    return model_config("gpt", None)


def _synthetic():
    """A profile and a fit with round numbers: deterministic predictions without measuring."""
    cfg = _config()
    prof = Profile(Line(1e-4, 1e9), Line(2e-4, 5e8), Line(5e-5, 1e9), Line(5e-5, 5e8),
                   1e-5, 1e-9, 2, cfg, 1e-4)
    fits = {n: AlphaBeta(1e-4 * n, 1e9, "ring", n) for n in (2, 4)}
    return cfg, prof, CommFit(4, fits, 1e-4, 1e9)


# memory and ledger bytes against measured runs: test_planner_paced.py (the paced sweep's runs)


def test_time_models_lists_compose_to_the_per_rank_closed_form_for_every_plan():
    """One source of bytes (tests/test_messages.py: each chapter's list = its ledger): the time
    model's composition of those lists stage by stage (`costmodel.messages`) carries the
    busiest rank's bytes of their composition rank by rank (`nd_closed_form_bytes`)."""
    from parlab.planner.explore import closed_form_table
    table = closed_form_table(4)
    assert len(table) >= 20
    assert table["equal"].all(), table[~table["equal"]]


GRAD_SYNCS = [Plan(dp=4, dp_sync=s, dp_bucket_mb=0.05) for s in ("naive", "bucketed", "overlap")] + [
    Plan(dp=4, dp_sync="dear", dp_bucket_mb=0.05), Plan(dp=3, dp_sync="dear", dp_bucket_mb=0.05),
    Plan(dp=4, dp_sync="priority", dp_bucket_mb=0.05, dp_partition_kb=8, dp_credit=2)] + [
    Plan(dp=2, pp=2, microbatches=2, dp_sync="naive"), Plan(dp=2, tp=2, dp_sync="bucketed",
                                                             dp_bucket_mb=0.05)] + [
    Plan(dp=4, dp_compressor=c) for c in ("topk", "randomk", "qsgd", "signsgd", "powersgd")] + [
    Plan(dp=2, tp=2, dp_compressor="powersgd", dp_rank=2), Plan(dp=2, cp=2, dp_compressor="qsgd")]


def test_the_time_models_gradient_messages_are_chapter_01s_and_08s():
    """Every dp_sync and compressor plan: the messages the time model prices carry the bytes of
    the composed closed form (chapter 01's reducers, chapter 08's compressors)."""
    from parlab.planner.explore import closed_form_table
    table = closed_form_table(4, plans=GRAD_SYNCS)
    assert len(table) == len(GRAD_SYNCS)
    assert table["equal"].all(), table[~table["equal"]]
    cfg = _config()
    count = {p.dp_sync: sum(x.dim == "dp" for x in costmodel.messages(cfg, p, 12))
             for p in GRAD_SYNCS[:3]}
    assert count["naive"] == len(list(cfg_params(cfg))) > count["bucketed"] > 1
    assert count["bucketed"] == count["overlap"]


def cfg_params(cfg):
    from parlab.models import build_model
    return build_model("gpt", cfg, seed=0).parameters()


def test_the_time_model_prices_each_gradient_message_and_hides_overlap_behind_backward():
    cfg, prof, fit = _synthetic()
    step = {s: costmodel.predict(Plan(dp=4, dp_sync=s, dp_bucket_mb=0.05), cfg, prof, fit)
            for s in ("flat", "naive", "bucketed", "overlap")}
    # every message pays its α: one per tensor costs more than one per bucket, than one in all
    assert step["naive"].exposed_comm_s > step["bucketed"].exposed_comm_s > step["flat"].exposed_comm_s
    # the overlapped buckets leave during backward: less exposed than the same buckets after it
    assert step["overlap"].exposed_comm_s < step["bucketed"].exposed_comm_s
    # DeAR's halves hide behind backward and the next forward: less exposed than after backward
    dear = costmodel.predict(Plan(dp=4, dp_sync="dear", dp_bucket_mb=0.05), cfg, prof, fit)
    assert dear.exposed_comm_s < step["bucketed"].exposed_comm_s
    # P3's partitions hide behind the next forward, but each pays its α: more messages, more α
    coarse, fine = (costmodel.predict(Plan(dp=4, dp_sync="priority", dp_bucket_mb=0.05,
                                           dp_partition_kb=kb), cfg, prof, fit) for kb in (64, 1))
    assert fine.exposed_comm_s > coarse.exposed_comm_s
    assert coarse.exposed_comm_s < step["bucketed"].exposed_comm_s
    # a compressor's fewer bytes cost less time on a slow link than the flat all-reduce
    slow = {c: costmodel.predict(Plan(dp=4, dp_compressor=c), cfg, prof, fit, link="1GbE")
            for c in ("none", "signsgd")}
    assert slow["signsgd"].exposed_comm_s < slow["none"].exposed_comm_s


def test_prediction_structure():
    cfg, prof, fit = _synthetic()
    one = costmodel.predict(Plan(pp=4, microbatches=1), cfg, prof, fit)
    more = costmodel.predict(Plan(pp=2, dp=2, microbatches=2), cfg, prof, fit)
    assert one.bubble_fraction == pytest.approx(3 / 4)
    assert more.bubble_fraction == pytest.approx(1 / 3)  # (p−1)/(m+p−1)
    single = costmodel.predict(Plan(), cfg, prof, CommFit(1, {}, 0.0, math.inf))
    assert single.exposed_comm_s == 0 and single.exposed_fraction == 0
    tp = costmodel.predict(Plan(tp=4), cfg, prof, fit)
    assert 0 < tp.exposed_fraction < 1
    assert tp.step_s == pytest.approx(tp.compute_s + tp.exposed_comm_s)
    # an emulated link only ever slows a message down
    slow = costmodel.predict(Plan(tp=4), cfg, prof, fit, link="1GbE")
    assert slow.exposed_comm_s > tp.exposed_comm_s
    # ZeRO-3 holds a quarter of the model states of dp4
    z0, z3 = (costmodel.state_memory(cfg, Plan(dp=4, zero=z), 0) for z in (0, 3))
    assert sum(z3.values()) == pytest.approx(sum(z0.values()) / 4, rel=0.01)


def test_planner_respects_the_cap_and_judge():
    cfg, prof, fit = _synthetic()
    plans = search.candidate_plans(4, cfg)
    preds = [costmodel.predict(p, cfg, prof, fit) for p in plans]
    peaks = sorted(p.memory["total"] for p in preds)
    cap = peaks[len(peaks) // 2]
    pick = search.choose(preds, cap)
    assert pick.memory["total"] <= cap
    assert pick.step_s == min(p.step_s for p in preds if p.memory["total"] <= cap)
    assert search.choose(preds, peaks[0] - 1) is None
    # measured exactly as predicted: no error, perfect ranking, no regret
    measured = {p.plan: {"step_s": p.step_s, "peak_bytes": p.memory["total"]} for p in preds}
    j = search.judge(preds, measured, cap)
    assert j.median_error == 0 and j.spearman == pytest.approx(1.0) and j.regret == 0
    assert all(j.goals().values())
    # the pick measured twice as slow as predicted: regret shows it
    measured[pick.plan] = {"step_s": 10 * pick.step_s, "peak_bytes": pick.memory["total"]}
    assert search.judge(preds, measured, cap).regret > 0
    with pytest.raises(ValueError, match="no prediction"):
        search.judge(preds, {})


def test_calibration_recovers_scales():
    cfg, prof, fit = _synthetic()
    plans = search.candidate_plans(4, cfg)[:8]
    raw = [costmodel.predict(p, cfg, prof, fit) for p in plans]
    measured = [2 * p.raw_compute_s + 3 * p.raw_comm_s + 0.01 for p in raw]
    cal = costmodel.fit_calibration(raw, measured)
    assert (cal.compute_scale, cal.comm_scale, cal.overhead_s) == pytest.approx((2, 3, 0.01),
                                                                                rel=1e-6)
    again = costmodel.predict(plans[0], cfg, prof, fit, calibration=cal)
    assert again.step_s == pytest.approx(measured[0])
    with pytest.raises(ValueError, match="measured steps"):
        costmodel.fit_calibration(raw, measured[:2])


def test_pure_plans_and_candidates():
    cfg = _config()
    plans = search.candidate_plans(4, cfg)
    assert not any(p.zero and p.dp * p.cp == 1 for p in plans)
    pure = search.pure_plans(plans)
    assert {p.describe().split()[0] for p in pure} == {"dp4", "tp4", "pp4", "cp4"}


def test_extrapolation_sanity():
    rows = extrapolate.megatron_table("A100")
    assert [r["model"] for r in rows] == ["1.7B", "3.6B", "7.5B", "18.4B", "39.1B", "76.1B"]
    for (shape, *_), r in zip(extrapolate.MEGATRON, rows):
        assert shape.params / 1e9 == pytest.approx(float(shape.name[:-1]), rel=0.05)
        assert 0 < r["predicted_TFLOPs"] < extrapolate.HARDWARE["A100"].flops / 1e12
        assert r["memory_GB"] <= 80
        assert r["verdict"].startswith(("agrees", "disagrees"))
    assert rows[0]["verdict"].startswith("agrees")  # 1.7B: one GPU per replica, as Megatron
    h100 = extrapolate.megatron_table("H100")
    assert all(h["predicted_TFLOPs"] > a["predicted_TFLOPs"] for h, a in zip(h100, rows))
    assert all("not comparable" in h["verdict"] for h in h100)
    # more micro-batches shrink the bubble of a pipeline
    shape, hw = extrapolate.MEGATRON[5][0], extrapolate.HARDWARE["A100"]
    few = extrapolate.predict(shape, hw, extrapolate.HwPlan(8, 4, 32, 8), 1792)
    many = extrapolate.predict(shape, hw, extrapolate.HwPlan(8, 4, 32, 1), 1792)
    assert many["bubble"] < few["bubble"]


TP_BYTES = 48 * 4 * 2 * 7 / 8 * 8 * 2048 * 8192 * 2  # blocks · all-reduces · ring share · (B/dp)TC · bf16
RIGHT = {"bubble": 7 / 15, "tp-bytes": TP_BYTES}
WRONG = {"bubble": 7 / 8, "tp-bytes": 2 * TP_BYTES}


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_exercises_check_right_and_wrong(name, capsys):
    ex = exercises.exercise(name)
    assert ex.check(RIGHT[name]) is True
    assert ex.check(WRONG[name]) is False
    assert ex.check("not a number") is False
    out = capsys.readouterr().out
    assert str(RIGHT[name]) not in out  # says right or wrong, never the answer


def test_bad_input_names_the_value():
    from parlab.planner.profile import calibrate_comm
    with pytest.raises(ValueError, match="world_size=0"):
        calibrate_comm(0)
    with pytest.raises(ValueError, match="hw_name='TPU'"):
        extrapolate.megatron_table("TPU")
    cfg, prof, fit = _synthetic()
    with pytest.raises(ValueError, match="fit.world_size=4"):
        costmodel.predict(Plan(dp=2), cfg, prof, fit)
