"""parlab.serving.explore.hardware: the A100/H100 table of Part C, the critical batch against the
ridge, the latency-throughput table's memory column, bad input (closed forms only: no runs)."""

import pytest

from parlab.core.link import ACCELERATORS
from parlab.serving import inference as inf
from parlab.serving.explore import hardware as hw


@pytest.fixture(scope="module")
def table():
    return {name: values for name, values, _ in hw.rows()}


def test_table_has_both_gpus_and_part_c_quantities(table):
    assert all(set(v) == {"A100", "H100"} for v in table.values())
    assert table["ridge F/HBM (FLOP/B)"]["H100"] == ACCELERATORS["H100"].flops / ACCELERATORS["H100"].hbm_Bps
    g = inf.shape("gpt2-xl")
    assert table["gpt2-xl decode B=1 L=1024 (ms)"]["A100"] == 1e3 * inf.decode(g, 1024, 1)["total"]["seconds"]
    # same 80 GB on both: the same number of sequences fit
    seqs = table["llama3-8b seqs of 8192 in memory"]
    assert seqs["A100"] == seqs["H100"] == inf.max_tokens(inf.shape("llama3-8b"), 80e9) // 8192


def test_prefill_scales_with_f_and_decode_with_hbm(table):
    f = ACCELERATORS["H100"].flops / ACCELERATORS["A100"].flops
    hbm = ACCELERATORS["H100"].hbm_Bps / ACCELERATORS["A100"].hbm_Bps
    pre = table["llama3-8b prefill 1024 tok (ms)"]
    dec = table["llama3-8b decode B=1 L=8192 (ms)"]
    assert pre["A100"] / pre["H100"] == pytest.approx(f, rel=0.10)
    assert dec["A100"] / dec["H100"] == pytest.approx(hbm, rel=0.10)
    assert dec["A100"] / dec["H100"] < f / 1.5  # decode does not gain the F ratio


def test_critical_batch_is_the_ridge():
    for acc in ("A100", "H100"):
        b = hw.critical_batch("llama3-8b", 1024, acc)
        s = inf.shape("llama3-8b")
        assert inf.decode(s, 1024, b, acc)["mlp"]["bound"] == "compute"
        assert inf.decode(s, 1024, b - 1, acc)["mlp"]["bound"] == "memory"
        assert b == pytest.approx(inf.ridge(acc), rel=0.05)
    with pytest.raises(ValueError, match="weight matmul"):
        hw.critical_batch(family="attention")


def test_latency_throughput_memory_and_order(capsys):
    out = hw.latency_throughput("llama3-8b", 1024, batches=(1, 64, 512))
    s = inf.shape("llama3-8b")
    assert out["A100", 512]["memory"] == inf.weight_bytes(s) + inf.kv_bytes(s, 512, 1024)
    assert out["A100", 512]["fits"] is False and out["H100", 64]["fits"] is True
    for acc in ("A100", "H100"):
        assert out[acc, 64]["tok_s"] > out[acc, 1]["tok_s"] and out[acc, 64]["ms"] > out[acc, 1]["ms"]
        assert out[acc, 1]["tok_s"] == pytest.approx(1e3 / out[acc, 1]["ms"])
    assert out["H100", 1]["ms"] < out["A100", 1]["ms"]
    assert "within 5%: holds" in capsys.readouterr().out


def test_launch_share_is_a_fraction():
    s = inf.shape("gpt2-xl")
    a, h = hw.launch_share(s, 1024, 1, "A100"), hw.launch_share(s, 1024, 1, "H100")
    assert 0 < a < h < 1
