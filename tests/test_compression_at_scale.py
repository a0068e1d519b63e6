"""Chapter 08's real-scale estimate: gpt2-xl's sync by closed form, ddp-bucketed bandwidth-bound
across nodes, and the α-β prices by hand; the equal-error comparison of §7."""

import math

import pytest

from parlab.compression import cost
from parlab.compression.explore import at_scale
from parlab.core.link import REAL


def test_bucketed_baseline_is_the_ring_closed_form():
    shapes = at_scale.gpt2xl_shapes()
    params = sum(math.prod(s) for s in shapes)
    assert params == 1_556_920_000
    r = at_scale.sync_seconds("ddp-bucketed", shapes, 64, "buckets")
    alpha, beta = REAL["HDR-IB"]
    assert r["bytes"] == pytest.approx(2 * 63 / 64 * 4 * params)
    assert r["seconds"] == pytest.approx(math.ceil(4 * params / 25e6) * 126 * alpha + r["bytes"] / beta)
    top = at_scale.sync_seconds("topk", shapes, 64, "all-gather", ratio=0.01)
    assert top["bytes"] == sum(cost.bytes_per_step("topk", shapes, 64, ratio=0.01).values())


def test_step_table_bandwidth_bound_and_powersgd_shortest(capsys):
    out = at_scale.step_table()
    b = out[64]["ddp-bucketed"]
    assert b["bytes_s"] > b["latency_s"]
    assert min(out[64], key=lambda k: out[64][k]["seconds"]) == "powersgd"
    assert "bandwidth-bound" in capsys.readouterr().out


def test_equal_error_counts_bytes_to_the_threshold(capsys):
    from parlab.compression.explore import lowdim as ex_lowdim

    hits = ex_lowdim.equal_error(32, 150, 1088, 12288, 0.998, 3072)
    assert hits["compressed"] is not None and hits["compressed"] < hits["original"]
    out = capsys.readouterr().out
    assert f"{hits['compressed']} steps × 1,088 B" in out and "not reached" in out
