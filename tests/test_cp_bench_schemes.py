"""`python -m parlab bench cp` at tiny sizes: Llama 3's all-gather and USP beside the ring, each
paced step beside the serial α-β model (`parlab.context_parallel.step_price`)."""

import contextlib
import io
import json

import pytest

from parlab.context_parallel import bench


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cp_bench") / "rows.json"
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = bench.main(["--seq-lens", "16", "--cps", "4", "--schemes", "allgather", "usp",
                           "--steps", "2", "--n-layer", "1", "--skip-video", "--out", str(out)])
    return code, text.getvalue(), json.loads(out.read_text())["train"]


def test_rows_name_every_scheme_and_split(bench_run):
    code, text, rows = bench_run
    assert code == 0
    assert [(r["scheme"], r["cp"]) for r in rows] == [
        ("no CP (single)", 1), ("cp-allgather", 4), ("cp-usp (u=2 × r=2)", 4)]
    assert {r["clock"] for r in rows} == {"A100 time"}
    assert "model = counted compute + closed-form messages" in text
    assert "2 of 2 rows" in text  # the verdict line


def test_paced_step_beside_the_model(bench_run):
    _, _, rows = bench_run
    gather, usp = rows[1], rows[2]
    for r in (gather, usp):
        assert r["closed_form"] == "="  # the ledger's attention bytes are the closed form's
        assert r["verdict"] == "holds"
        assert r["ledger_comm_ms"] == pytest.approx(r["comm_ms"], rel=1e-9)
        assert r["model_ms"] == pytest.approx(r["compute_ms"] + r["comm_ms"], rel=1e-12)
    assert gather["ring_ms"] == 0.0  # every message blocks: the paced step is the model
    assert gather["paced_ms"] == pytest.approx(gather["model_ms"], rel=1e-9)
    assert 0.0 < usp["ring_ms"] < usp["comm_ms"]  # USP's ring part may hide, its all-to-alls not
    assert usp["model_ms"] - usp["ring_ms"] <= usp["paced_ms"] * (1 + 1e-9) <= usp["model_ms"] * (1 + 1e-9)


def test_usp_splits_follow_the_heads():
    assert bench.usp_splits(4, 4, 4, 16) == [2]
    assert bench.usp_splits(2, 4, 4, 16) == []  # u = 1 is the ring, u = cp Ulysses
    assert bench.usp_splits(8, 4, 4, 32) == [2, 4]
    assert bench.usp_splits(8, 4, 2, 32) == [2]  # two key/value heads: u ≤ 2
    assert bench.usp_splits(8, 6, 6, 48) == [2]
    assert bench.usp_splits(4, 4, 4, 16, wanted=[4]) == [4]
