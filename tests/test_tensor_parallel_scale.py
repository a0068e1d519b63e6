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


@pytest.mark.parametrize("scheme", ["tp", "tp-sp"])
def test_replicated_kv_heads_train_exactly_like_one_process(scheme):
    """tp = 4 > n_kv = 2: each key/value head on 2 ranks, their gradients summed (kv-grad-sync);
    the same losses and parameters as one process, the sum's bytes equal to the closed form."""
    import parlab
    from parlab.tensor_parallel.explore import ledger_vs_formula

    mc = {"n_kv_head": 2}
    reference = parlab.run("single", steps=2, model_config=mc)
    result = parlab.run(scheme, world_size=4, tp=4, steps=2, model_config=mc)
    assert result.compare(reference).match
    rows = ledger_vs_formula(result)
    assert all(row["equal"] for row in rows), rows
    kv = [row for row in rows if row["phase"] == "kv-grad-sync"]
    # one ring all-reduce per block and step of (n_kv, 2·hs, C) fp32: 2 · 3/4 · 2·2·8·32 · 4 B
    assert len(kv) == 4 and kv[0]["ledger_bytes"] == 4 * int(1.5 * 2 * 2 * 8 * 32 * 4)


def test_no_kv_grad_sync_when_tp_divides_the_kv_heads():
    from parlab.engine.runner import make_config
    from parlab.tensor_parallel.cost import closed_form_bytes

    cfg = make_config("tp", world_size=2, model_config={"n_kv_head": 2})
    assert "kv-grad-sync" not in closed_form_bytes(cfg.model_config, cfg.batch_size, 2, 0, 1, False)
    assert closed_form_bytes(cfg.model_config, cfg.batch_size, 4, 0, 1, False)["kv-grad-sync"] > 0


def test_a_degree_that_splits_a_group_unevenly_is_refused_before_any_process():
    import parlab

    with pytest.raises(ValueError, match="do not divide one another"):
        parlab.run("tp", world_size=4, tp=4, steps=1,
                   model_config={"n_head": 12, "n_embd": 48, "n_kv_head": 6})


def test_assembling_replicated_kv_takes_one_copy_of_each_head():
    import torch

    from parlab.tensor_parallel.layers import unshard_grouped_qkv

    C, hs, tp, n_kv = 8, 2, 4, 2  # 4 query heads of 2, one per rank; 2 key/value heads, 2 copies
    q, k, v = torch.randn(C, C), torch.randn(n_kv * hs, C), torch.randn(n_kv * hs, C)
    shards = [torch.cat([q[r * hs:(r + 1) * hs], k[(r // 2) * hs:(r // 2 + 1) * hs],
                         v[(r // 2) * hs:(r // 2 + 1) * hs]]) for r in range(tp)]
    assert torch.equal(unshard_grouped_qkv(shards, kv_copies=2), torch.cat([q, k, v]))


def test_llama_style_blocks_with_copied_kv_heads_match_one_process():
    """RoPE, SwiGLU, RMSNorm and an untied head (the Llama 3 parts) at tp = 4 > n_kv_head = 2."""
    import parlab

    small = {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_kv_head": 2, "mlp": "swiglu",
             "d_ff": 96, "norm": "rmsnorm", "positions": "rope", "rope_theta": 500000.0,
             "tie_head": False}
    reference = parlab.run("single", steps=2, model_config=small)
    result = parlab.run("tp", world_size=4, tp=4, steps=2, model_config=small)
    assert result.compare(reference).match
