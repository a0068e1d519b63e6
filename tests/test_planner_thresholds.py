"""The scaling-book's closed-form thresholds (parlab.planner.thresholds): hand-computed values,
monotonicity in the link, bad input named."""

import pytest

from parlab.planner import thresholds as th


def test_dp_and_fsdp_hand_computed():
    # A100 sustained 150 TFLOP/s over NVLink 3 (300 GB/s): F/β = 500; bf16 → (2/2)·500 = 500 tokens
    assert th.dp_min_tokens_per_device(150e12, 300e9) == 500.0
    assert th.fsdp_min_tokens_per_device(150e12, 300e9) == 500.0
    # fp32 gradients (4 bytes) double it; HDR InfiniBand (25 GB/s): 6000 tokens
    assert th.dp_min_tokens_per_device(150e12, 300e9, bytes_per_param=4) == 1000.0
    assert th.dp_min_tokens_per_device(150e12, 25e9) == 6000.0


def test_tp_hand_computed():
    # megatron-1.7b: d = 2304, d_ff = 9216 on an A100 over NVLink 3: (2·2304 + 9216)/(2·500) = 13.824
    assert th.tp_max_degree(2304, 9216, 150e12, 300e9) == pytest.approx(13.824, rel=1e-12)
    # the MLP alone (the book's Y < F·W/C): 2·9216/(2·500) = 18.432
    assert th.tp_max_degree(2304, 9216, 150e12, 300e9, attention=False) == pytest.approx(18.432,
                                                                                       rel=1e-12)


def test_faster_link_lowers_dp_threshold_and_raises_tp_bound():
    betas = [25e9, 50e9, 300e9, 450e9]
    dp = [th.dp_min_tokens_per_device(150e12, b) for b in betas]
    tp = [th.tp_max_degree(2304, 9216, 150e12, b) for b in betas]
    assert dp == sorted(dp, reverse=True) and len(set(dp)) == len(dp)
    assert tp == sorted(tp) and len(set(tp)) == len(tp)


def test_table_reads_the_link_and_clock_constants():
    rows = {(r["accelerator"], r["link"]): r for r in th.threshold_table("megatron-1.7b")}
    assert rows[("A100", "NVLink3")]["dp_min_tokens"] == 500.0
    assert rows[("A100", "HDR-IB")]["dp_min_tokens"] == 6000.0
    assert rows[("H100", "NDR-IB")]["dp_min_tokens"] == 8000.0
    assert rows[("H100", "NVLink4")]["F_over_beta"] == pytest.approx(400e12 / 450e9)


def test_plan_check():
    nv = th.threshold_row("megatron-1.7b", "A100", "NVLink")
    ib = th.threshold_row("megatron-1.7b", "A100", "InfiniBand")
    assert th.plan_check(4, 1, 16384, ib, nv)["compute_bound"]
    assert not th.plan_check(1, 4, 4096, ib, nv)["dp_ok"]
    assert not th.plan_check(2, 1, 16384, ib, ib)["tp_ok"]  # tp over InfiniBand: bound 1.15


@pytest.mark.parametrize("call, name", [
    (lambda: th.dp_min_tokens_per_device(0, 1e9), "flops=0"),
    (lambda: th.dp_min_tokens_per_device(1e12, -1.0), "beta=-1.0"),
    (lambda: th.fsdp_min_tokens_per_device(1e12, 1e9, bytes_per_param=float("nan")),
     "bytes_per_param=nan"),
    (lambda: th.tp_max_degree(0, 4, 1e12, 1e9), "d_model=0"),
    (lambda: th.tp_max_degree(8, 4, 1e12, True), "beta=True"),
    (lambda: th.threshold_row("nope", "A100", "NVLink"), "preset='nope'"),
    (lambda: th.threshold_row("megatron-1.7b", "B200", "NVLink"), "accelerator='B200'"),
    (lambda: th.threshold_row("megatron-1.7b", "A100", "Ethernet"), "link='Ethernet'"),
    (lambda: th.plan_check(0, 1, 1.0, {}, {}), "tp=0"),
])
def test_bad_input_names_the_value(call, name):
    with pytest.raises(ValueError, match=name.replace("(", r"\(")):
        call()


def test_explore_verdict_computed():
    from parlab.planner.explore import thresholds as ex

    c = ex.check_ranking("megatron-1.7b", 4, 8)
    assert c["rows"][0]["name"] == "tp4·pp1·dp1 b8" and c["rows"][0]["compute_bound"]
    assert ex.verdict(c).startswith("N=4: agrees")
    bad = {**c, "rows": [{**c["rows"][0], "compute_bound": False}] + c["rows"][1:]}
    assert "disagrees" in ex.verdict(bad)
