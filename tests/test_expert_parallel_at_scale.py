"""Chapter 07's real-scale estimate and node-limit table: the α-β closed form by hand, and the
node limit held on every token."""

import pytest

from parlab.core.link import REAL
from parlab.expert_parallel.explore import at_scale


def test_dispatch_inside_a_node_is_nvlink_only():
    d = at_scale.dispatch_seconds(8, 8192, 2, 1600)
    rows = 8192 * 2 * 7 / 8
    assert d["ib_bytes"] == 0 and d["nv_bytes"] == rows * 1600 * 2
    alpha, beta = REAL["NVLink3"]
    assert d["seconds"] == pytest.approx(7 * alpha + rows * 1600 * 2 / beta)


def test_dispatch_across_nodes_is_bounded_by_infiniband():
    d = at_scale.dispatch_seconds(64, 8192, 2, 1600)
    assert d["ib_bytes"] == 8192 * 2 * 56 / 64 * 1600 * 2
    assert d["nv_bytes"] == 8192 * 2 * 7 / 64 * 1600 * 2
    (a_nv, _), (a_ib, b_ib) = REAL["NVLink3"], REAL["HDR-IB"]
    assert d["seconds"] == pytest.approx(7 * a_nv + 56 * a_ib + d["ib_bytes"] / b_ib)


def test_cost_table_grows_past_the_node(capsys):
    rows = at_scale.cost_table()
    assert [r["ep"] for r in rows] == [8, 16, 32, 64]
    assert all(a["seconds"] < b["seconds"] for a, b in zip(rows, rows[1:]))
    assert "α-β estimate, not a run" in capsys.readouterr().out


def test_node_limit_table_holds_every_limit():
    out = at_scale.node_limit_table(tokens=512)
    assert all(row["max_nodes"] <= m for m, row in out.items())
    assert out[2]["ib_copies"] < out[4]["ib_copies"] < out[8]["ib_copies"]
