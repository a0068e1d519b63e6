"""Chapter 07's two-node exchange, run (parlab.expert_parallel.explore.scale_run): `ep`'s
shapes-only dispatch over two nodes of two ranks (NVLink 3 inside, HDR InfiniBand between) costs,
in paced A100 time, the hierarchical α-β form (`at_scale.dispatch_seconds`: Σ α per peer + the
larger of the NVLink and InfiniBand shares, each over its own β), not the slowest-link form."""

import pytest

from parlab.core.link import REAL
from parlab.expert_parallel.explore import scale_run


@pytest.fixture(scope="module")
def two_nodes_of_two():
    """ep = 4 in nodes of 2, one MoE block, C = 100 (25 heads of 4), one sequence per rank."""
    return scale_run.measure(4, layers=1, sequences=1, width=100, per_node=2)


def test_a_two_node_dispatch_is_the_hierarchical_closed_form(two_nodes_of_two):
    row = two_nodes_of_two
    rows = scale_run.SEQUENCE * 2  # N_r·k
    (a_nv, b_nv), (a_ib, b_ib) = REAL["NVLink3"], REAL["HDR-IB"]
    # one NVLink peer, two InfiniBand peers, a quarter of the rows to each peer, fp32 rows of C
    closed = a_nv + 2 * a_ib + max(rows / 4 * 100 * 4 / b_nv, 2 * rows / 4 * 100 * 4 / b_ib)
    assert row["nodes"] == 2 and row["bytes"] == 3 * rows // 4 * 100 * 4
    assert row["links_at_once_s"] == pytest.approx(closed, rel=1e-12)
    assert row["measured_s"] == pytest.approx(closed, rel=1e-12)  # paced: fp rounding only
    assert row["measured_s"] < row["slowest_s"]  # NVLink's peer no longer pays InfiniBand's β
