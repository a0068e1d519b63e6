"""Chapter 06's real-scale ring (`explore.scale`: shapes-only, bf16, paced A100 over NVLink 3),
USP's priced table (`explore.usp`, Fang & Zhao 2024), the predict-then-run cell of Llama 3's
all-gather (`explore.predict`) and the bf16 crossover t* = F/β."""

import pytest

from parlab.context_parallel import cost
from parlab.context_parallel.explore import predict, scale, usp
from parlab.context_parallel.explore.regime import crossover_tokens


def test_crossover_is_bf16_on_both_sides():
    assert crossover_tokens("NVLink", "A100") == pytest.approx(150e12 / 300e9)  # 500 tokens
    assert crossover_tokens("NVLink", "A100", itemsize=4) == pytest.approx(2 * 150e12 / 300e9)


def test_ring_at_scale_prices_the_transfers_from_the_ledger_and_hides_them_past_t_star(capsys):
    (row,) = scale.ring_at_scale((4096,), cp=2, preset="gpt2", n_layer=1)
    t, C = 2048, 768
    one_send = 1e-6 + 2 * t * C * 2 / 300e9  # α + K/V block in bf16 / β, NVLink 3
    assert row["tokens/rank"] == t and row["transfer ms/step"] == round(2 * one_send * 1e3, 3)
    assert row["exposed ms/step"] <= row["transfer ms/step"]
    assert scale.explain_scale([row], "A100", "gpt2") is True
    assert "verdict: every length past 2·t* hid its transfers" in capsys.readouterr().out


def test_explain_scale_fails_an_exposed_ring_past_t_star(capsys):
    row = {"T": 65536, "tokens/rank": 32768, "t/t*": 65.5, "transfer ms/step": 1.4,
           "exposed ms/step": 0.7, "exposed share": 0.5, "fwd+bwd ms/step": 10.0,
           "clock": "A100 time", "link": "NVLink"}
    assert scale.explain_scale([row]) is False
    assert "NOT hidden" in capsys.readouterr().out


def test_usp_table_rows_are_the_closed_form_and_pick_the_least_exposed(capsys):
    rows = usp.usp_table("megatron-7.5b", 131072, gpus=16, per_node=8, accelerator="A100")
    assert [(r["ulysses u"], r["ring r"]) for r in rows] == [(1, 16), (2, 8), (4, 4), (8, 2), (16, 1)]
    for r in rows:
        b = cost.usp_bytes(1, 32, 131072, 128, r["ulysses u"], r["ring r"])
        assert r["all-to-all MB"] == round(b["ulysses"] / 1e6, 1)
        assert r["ring MB"] == round(b["ring"] / 1e6, 1)
    best = usp.explain_usp(rows)
    assert best["exposed ms"] == min(r["exposed ms"] for r in rows)
    assert rows[-1]["all-to-all link"] == "IB"  # a Ulysses group of 16 spans two nodes of 8


def test_the_prediction_cell_measures_the_closed_form(capsys):
    from parlab.context_parallel import exercises

    out = predict.allgather_forward_bytes(786432, **exercises.PREDICT)
    assert out["measured"] == out["formula"] == 786432
    assert "right (within 0.1%)" in capsys.readouterr().out
    assert exercises.exercise("allgather-bytes").expect(out["measured"])
