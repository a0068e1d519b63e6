"""parlab.planner.scaling.real_scale: a real preset's scaling and the planner scored against its runs,
shapes-only on paced A100 time (every assertion on paced seconds, none on a raw clock)."""

import pytest

from parlab.planner.scaling import real_scale as rs


def test_a_bad_preset_is_named_before_any_process_starts():
    for call in (lambda: rs.scaling_rows("nope", ranks=(1, 2)),
                 lambda: rs.planner_at_scale("nope", world_sizes=(2,)),
                 lambda: rs.enumerate_plans("nope", 8, 16),
                 lambda: rs.show("nope")):
        with pytest.raises(ValueError, match=r"preset='nope' must be one of \["):
            call()
    from parlab.planner.scaling import bench_scale
    with pytest.raises(ValueError, match=r"preset='gpt9' must be one of"):
        bench_scale.main(["--real", "gpt9", "--no-sweep"])


def test_bad_sweep_arguments_are_named():
    with pytest.raises(ValueError, match=r"dims \['xy'\] must be among"):
        rs.scaling_rows(dims=("dp", "xy"))
    with pytest.raises(ValueError, match=r"ranks \[128\] must be ints in \[1, 64\]"):
        rs.scaling_rows(ranks=(1, 128))
    with pytest.raises(ValueError, match=r"world_sizes \[0\] must be ints in \[1, 64\]"):
        rs.planner_at_scale(world_sizes=(0,))
    with pytest.raises(ValueError, match=r"world_size=0 must be an int >= 1"):
        rs.enumerate_plans(rs.PRESET, 0, 8)
    with pytest.raises(ValueError, match=r"max_runs=0 must be an int >= 1"):
        rs.chosen_subset([], 0)


def test_the_plan_space_omits_invalid_degrees_and_says_why():
    # 10 ranks of a 24-layer, 24-head GPT: tp=5 divides no head count, tp=10 leaves the node,
    # pp=5 does not divide the layers
    plans, omitted = rs.enumerate_plans("megatron-1.7b", 10, 20)
    text = "\n".join(omitted)
    assert "tp=5: does not divide the 24 heads" in text
    assert "tp=10: larger than a node of 8" in text
    assert "tp=1 pp=5: pp does not divide the 24 layers" in text
    assert plans, "dp10 and tp2·dp5 are valid"
    for p in plans:
        plan = p["plan"]
        assert plan.dp * plan.tp * plan.pp == 10
        assert 24 % plan.tp == 0 and 24 % plan.pp == 0 and plan.tp <= 8
        assert p["pred_memory_GB"] <= 80
    assert [p["pred_s"] for p in plans] == sorted(p["pred_s"] for p in plans)  # pick first
    _, omitted = rs.enumerate_plans("megatron-1.7b", 8, 3)
    assert any("dp=8: dp does not divide the batch of 3" in x for x in omitted)


def test_the_subset_keeps_the_pick_and_spreads_over_the_ranking():
    plans = [{"name": str(i)} for i in range(10)]
    got = [p["name"] for p in rs.chosen_subset(plans, 4)]
    assert got == ["0", "3", "6", "9"]
    assert [p["name"] for p in rs.chosen_subset(plans, 1)] == ["0"]
    assert len(rs.chosen_subset(plans[:2], 5)) == 2


def test_scoring_regret_and_rank_correlation_on_a_constructed_example():
    # the planner's pick (index 0) measured 1.5 s where the best run took 1.0 s: regret 50%;
    # ranks of the measurements 2, 1, 3, 4 against 1, 2, 3, 4: Σd² = 2, ρ = 1 − 6·2/(4·15) = 0.8
    s = rs.score([1.0, 2.0, 3.0, 4.0], [1.5, 1.0, 3.0, 5.0], pick=0)
    assert s["best"] == 1
    assert s["regret"] == pytest.approx(0.5)
    assert s["spearman"] == pytest.approx(0.8)
    assert s["errors"] == pytest.approx([1 / 1.5 - 1, 1.0, 0.0, -0.2])
    assert rs.score([2.0, 1.0], [1.0, 3.0])["regret"] == 0.0
    with pytest.raises(ValueError, match="must be non-empty and of one length"):
        rs.score([1.0], [1.0, 2.0])


def test_one_real_point_runs_shapes_only_on_paced_time():
    row = rs.measure("dp", 2, "strong", "megatron-1.7b")
    assert row["clock"] == "A100 time"
    assert row["scheme"] == "ddp-overlap" and row["batch"] == 16
    # 16 sequences of 2048 tokens of a 1.7 B GPT on two A100s: seconds, not microseconds
    assert 0.5e6 < row["step_us"] < 10e6
    assert abs(row["error"]) < 0.05  # predict_step: counted compute + α-β of the ledger
    assert row["state_B"] == row["pred_state_B"]  # 16 bytes per parameter, every one replicated


def test_the_planner_at_two_ranks_runs_its_pick_and_scores_it():
    (res,) = rs.planner_at_scale("megatron-1.7b", world_sizes=(2,), batch=2, max_runs=2)
    assert res["N"] == 2 and 1 <= len(res["rows"]) <= 2
    assert res["rows"][0]["pred_s"] == min(r["pred_s"] for r in res["rows"])  # the pick first
    assert all(r["step_s"] > 0 for r in res["rows"])  # paced A100 seconds
    assert res["regret"] >= 0
    lines = rs.planner_verdicts([res])
    assert lines[0].startswith("N=2: median |error| ")
