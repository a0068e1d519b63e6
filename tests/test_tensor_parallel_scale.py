"""Chapter 03 at real scale: TP past the NVLink domain (Narayanan et al., SC 2021, §3), GQA's
key/value heads replicated past tp = n_kv (Ainslie et al., EMNLP 2023), the predict-then-run
cell's measurement, and the resharding's real link."""

import math

import pytest

from parlab.models.presets import PRESETS
from parlab.tensor_parallel import gqa
from parlab.tensor_parallel.explore import nvlink_domain


def test_gqa_kv_heads_per_rank_and_copies():
    assert [gqa.kv_heads_per_rank(8, tp) for tp in (1, 2, 4, 8, 16, 32)] == [8, 4, 2, 1, 1, 1]
    assert [gqa.copies(8, tp) for tp in (1, 2, 4, 8, 16, 32)] == [1, 1, 1, 1, 2, 4]
    with pytest.raises(ValueError, match="one must divide the other"):
        gqa.kv_heads_per_rank(8, 3)


def test_gqa_bytes_stop_shrinking_at_n_kv_for_llama3_8b():
    cfg = PRESETS["llama3-8b"]
    table = gqa.rows(cfg, (1, 2, 4, 8, 16, 32), batch_rows=1, seq_len=8192, element_size=2)
    hs = 4096 // 32
    by_tp = {r["tp"]: r for r in table}
    # K and V of one layer at tp = 1: 2 × (B·T, 8·128) bf16
    assert by_tp[1]["kv_layer_B"] == 2 * 8192 * 8 * hs * 2
    assert by_tp[8]["kv_layer_B"] == by_tp[16]["kv_layer_B"] == by_tp[32]["kv_layer_B"] \
        == 2 * 8192 * hs * 2
    assert by_tp[16]["kv_weight_B"] == 2 * hs * 4096 * 2  # one copy of one key/value head
    assert by_tp[32]["q_weight_B"] == hs * 4096 * 2  # query heads keep shrinking
    assert by_tp[32]["kv_all_layers_B"] == 32 * by_tp[32]["kv_layer_B"]
    assert gqa.stops_shrinking(table) == 8
    # multi-head attention (no n_kv_head): no copies at any degree that divides the heads
    mha = gqa.rows(PRESETS["megatron-7.5b"], (1, 8, 16, 32))
    assert gqa.stops_shrinking(mha) is None and all(r["copies"] == 1 for r in mha)


def test_gqa_show_prints_the_computed_stop(capsys):
    from parlab.tensor_parallel.explore import gqa as ex_gqa

    ex_gqa.show()
    out = capsys.readouterr().out
    assert "stop shrinking past tp=8 (= n_kv_head=8" in out
    assert "each key/value head lives on 4 ranks" in out and "(4×)" in out


def test_the_ring_is_priced_on_the_slowest_link_it_crosses():
    from parlab.core.link import REAL

    assert nvlink_domain.slowest_link(8).bandwidth_Bps == REAL["NVLink3"][1]
    assert nvlink_domain.slowest_link(16).bandwidth_Bps == REAL["HDR-IB"][1]
    assert nvlink_domain.cluster(1) is None and nvlink_domain.cluster(8) == "NVLink"
    assert nvlink_domain.cluster(16).world_size == 16


def test_the_estimate_is_the_closed_form():
    # megatron-7.5b, B = 1: tp = 16 over HDR-IB (α = 2 µs, β = 25 GB/s)
    B, T, C, V, tp, F = 1, 2048, 4096, 51200, 16, 150e12
    e = nvlink_domain.estimate_ms(tp, B, T, C, V)
    compute = 6 * B * T * (12 * C * C + V * C) / tp / F
    nbytes = B * T * C * 4
    comm = 6 * (2 * (tp - 1) * 2e-6 + 2 * (tp - 1) / tp * nbytes / 25e9)
    assert math.isclose(e["compute_ms"], compute * 1e3, rel_tol=1e-12)
    assert math.isclose(e["comm_ms"], comm * 1e3, rel_tol=1e-12)
    assert nvlink_domain.estimate_ms(1, B, T, C, V)["comm_ms"] == 0.0


def _rows(past_ms, past_est):
    rows = [{"tp": 1, "measured_ms": 60.0, "estimate_ms": 30.0},
            {"tp": 8, "measured_ms": 10.0, "estimate_ms": 5.0},
            {"tp": 16, "measured_ms": past_ms, "estimate_ms": past_est}]
    return rows


def test_the_verdict_is_computed_from_the_rows():
    v = nvlink_domain.verdict(_rows(20.0, 15.0))
    assert v["holds"] is True and v["best_tp"] == 8 and v["ratio"] == 2.0 and v["estimate_ratio"] == 3.0
    assert nvlink_domain.verdict(_rows(9.0, 4.0))["holds"] is False  # past the node still faster
    assert nvlink_domain.verdict(_rows(10.2, 15.0))["holds"] is False  # within 5%: not shown
    assert nvlink_domain.verdict(_rows(20.0, 15.0)[:2])["holds"] is None


def test_show_prints_the_table_and_the_verdict(capsys):
    rows = _rows(20.0, 15.0)
    for r in rows:
        r.update(nodes=-(-r["tp"] // 8), ring_on="x", compute_ms=1.0, comm_ms=1.0,
                 clock="A100 time", speedup=60.0 / r["measured_ms"])
    nvlink_domain.show(rows)
    out = capsys.readouterr().out
    assert "tp=16 across 2 nodes took 2.00× tp=8's step" in out and "HOLDS" in out


def test_the_resharding_runs_on_the_real_link():
    from parlab.core.link import REAL
    from parlab.tensor_parallel.explore.reshard import clock_line, reshard_link

    link = reshard_link("1GbE")
    assert (link.latency_s, link.bandwidth_Bps) == REAL["1GbE"]
    assert reshard_link("loopback") is None
    assert "wall clock" in clock_line("1GbE") and "125 MB/s" in clock_line("1GbE")


def test_the_predict_cell_measures_the_ledger(capsys):
    from parlab.tensor_parallel import exercises
    from parlab.tensor_parallel.explore.predict import forward_bytes

    out = forward_bytes(4 * 2 * 12 * 32 * 40 * 4)
    assert out["measured"] == out["formula"] == 4 * 2 * 12 * 32 * 40 * 4
    assert exercises.exercise("tp-forward-bytes").expect(out["measured"])
    printed = capsys.readouterr().out
    assert "closed form" in printed and "equal" in printed and "right (to the byte)" in printed


def test_the_chapter_has_two_design_exercises_and_one_predict():
    from parlab.tensor_parallel import exercises

    kinds = [e.kind for e in exercises.EXERCISES]
    assert kinds.count("design") >= 2 and kinds.count("predict") >= 1
    assert 5 <= len(kinds) <= 6
