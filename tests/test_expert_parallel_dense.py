"""Chapter 07: the dense baseline of equal active parameters — counts equal on the built models,
the width rule refuses configurations with no integer width, and the α-β prediction is the dense
step plus each run's own link cost."""

import pytest

from parlab.core.clock import pace_link, resolve
from parlab.core.link import PRESETS
from parlab.expert_parallel.explore import dense as ex_dense


@pytest.mark.parametrize("top_k", [1, 2])
def test_active_parameters_equal_the_dense_gpt(top_k):
    counts = ex_dense.active_parameters(ex_dense.moe_overrides(top_k))
    assert counts["moe_active"] == counts["dense"] < counts["moe_total"]


def test_width_rule():
    assert ex_dense.equal_active_width(2, 4, 32) == 63  # 4·32 + 2·2·32·63 = 8·32²
    assert ex_dense.equal_active_width(1, 4, 32) == 126
    with pytest.raises(ValueError, match="top_k=2 experts of n_experts=3"):
        ex_dense.equal_active_width(2, 3, 32)


def test_prediction_is_dense_compute_plus_link_cost():
    """Paced (A100 time) on real NVLink; every assertion is arithmetic on the run's ledger and
    the paced link (deterministic), none on a measured time's value or order."""
    out = ex_dense.compare(2, "NVLink", steps=2, top_k=2, clock="A100")
    assert set(out) == {"loopback", "NVLink"}
    compute = out["loopback"]["dense"]["seconds"]
    paced = pace_link(PRESETS["NVLink"], resolve("A100", 2))
    for row in out["loopback"].values():
        assert row["link_s"] == 0 and row["predicted"] == compute
    for name, row in out["NVLink"].items():
        assert row["link"] == paced and row["clock"].startswith("A100 time")
        assert row["link_s"] > 0 and row["predicted"] == compute + row["link_s"]
        assert row["bytes"] == out["loopback"][name]["bytes"]  # the link changes time, not bytes
        # α-β: each run's link cost is at least its bytes over the (paced) link's bandwidth
        assert row["link_s"] >= row["bytes"] / paced.bandwidth_Bps


def test_all_to_all_beats_all_gather_on_the_timing_link():
    """The chapter's lesson in virtual time, on `TIMING_LINK` (the real 10GbE) at `TIMING_BATCH`
    and Switch's k = 1: ep-allgather sends ~2× ep's bytes and its step is longer (measured 1.21×;
    on NVLink or 100Gb-IB the tiny GPT's kernel launches outweigh every transfer: 0.95×, 0.99×)."""
    out = ex_dense.compare(2, ex_dense.TIMING_LINK, steps=2, top_k=ex_dense.TIMING_TOP_K,
                           batch_size=ex_dense.TIMING_BATCH)
    rows = out[ex_dense.TIMING_LINK]
    assert rows["ep-allgather"]["bytes"] > 1.9 * rows["ep"]["bytes"]
    assert rows["ep-allgather"]["seconds"] > 1.1 * rows["ep"]["seconds"], rows
    assert rows["ep-allgather"]["predicted"] > rows["ep"]["predicted"]


def test_diagnosis_names_the_flip():
    loopback = {"ep": {"seconds": 0.20, "link_s": 0.0, "predicted": 0.05},
                "dense": {"seconds": 0.05, "link_s": 0.0, "predicted": 0.05}}
    link = {"ep": {"seconds": 0.30, "link_s": 0.01, "predicted": 0.06},
            "dense": {"seconds": 0.25, "link_s": 0.02, "predicted": 0.07}}
    lines = ex_dense.diagnose(link, loopback)  # ep is slower on loopback by 150 ms
    assert len(lines) == 1 and lines[0].startswith("dense < ep") and "150.000 ms" in lines[0]
    loopback["ep"]["seconds"] = 0.04  # now the link must explain it
    lines = ex_dense.diagnose(link, loopback)
    assert len(lines) == 1 and "the link added 260.000 ms to ep" in lines[0]
    link["ep"]["seconds"] = 0.2
    assert ex_dense.diagnose(link, loopback) == []


def test_summary_does_not_call_balanced_experts_even(capsys):
    """The summary prints the measured max/mean and says whether balancing made the experts even
    enough that none overflows (max/mean ≤ the capacity factor), not that it kept them even."""
    from types import SimpleNamespace

    from parlab.expert_parallel import explore
    link = SimpleNamespace(latency_s=2e-5, bandwidth_Bps=1.25e9)
    row = {"seconds": 1.0, "bytes": 100, "clock": "A100 time", "link": link}
    out = {"10GbE": {"ep": row, "ep-allgather": {**row, "seconds": 1.2, "bytes": 200},
                     "replicated": {**row, "seconds": 0.8, "bytes": 60},
                     "dense": {**row, "seconds": 0.5}},
           "loopback": {"ep": {**row, "seconds": 0.8}, "ep-allgather": {**row, "seconds": 0.7},
                        "dense": {**row, "seconds": 0.5}}}
    balance = {m: {"imbalance": [v] * 10, "dropped": [0.2] * 10, "loss": [3.0] * 10,
                   "ceiling": 4.0, "capacity_factor": 1.25}
               for m, v in (("none", 3.6), ("aux", 2.5), ("bias", 2.8))}
    explore.summary(out, balance, "10GbE")
    text = capsys.readouterr().out
    assert "(aux 2.50 and bias 2.80 below none's 3.60): holds" in text
    assert "none overflows (max/mean ≤ the capacity factor 1.25): does NOT hold" in text
    assert "2.50× (aux) and 2.80× (bias)" in text and "evens" not in text
    assert "with one, 2.50× (aux) and 2.80× (bias): lower, not even" in text
    # MoE vs dense (loopback 0.8 / 0.5) told apart from EP vs replicated experts (1.0 vs 0.8 s)
    assert "(loopback) the MoE step took 1.60× the dense step" in text
    assert "on 10GbE (A100 time): `ep` 1000.000 ms per step, sending 100 B" in text
    assert "holding every expert 800.000 ms, sending 60 B" in text and "EP 1.25× slower" in text
