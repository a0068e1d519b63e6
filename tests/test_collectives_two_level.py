"""The two-level all-reduce (parlab.core.two_level) on 8 paced A100s in 2 nodes of 4 (NVLink 3
inside, HDR InfiniBand between): its result equals torch's all-reduce, its ledger's bytes per
rank equal the closed form exactly, and its paced time equals its α-β price (and the flat
ring's its own). One launch for every assert; paced time only, no raw clock."""

import math

import pytest

from parlab.core import cost, two_level
from parlab.core.explore import real_link as rl
from parlab.core.explore import two_level_run as run

SIZES = (4 << 10, 1 << 20)


@pytest.fixture(scope="module")
def ranks():
    return run.run(8, 4, SIZES, run.CHECK_NUMEL)


def test_result_equals_torchs_all_reduce_and_ledger_equals_closed_form(ranks):
    assert all(r["equal"] for r in ranks)
    for k, r in enumerate(ranks):
        assert r["check_bytes"] == two_level.traffic(run.CHECK_NUMEL, 4, 2, k)[0] * 4
        for nbytes in SIZES:
            assert r[(nbytes, "two")][1] == two_level.traffic(nbytes // 4, 4, 2, k)[0] * 4
            assert r[(nbytes, "flat")][1] == cost.ring_all_reduce(nbytes // 4, 8, k)[0] * 4


def test_paced_time_equals_the_price_and_two_level_beats_the_flat_ring(ranks):
    for row in run.rows(ranks, 4, SIZES):
        assert math.isclose(row["two"], rl.two_level(row["bytes"], 2, 4), rel_tol=1e-9)
        assert math.isclose(row["flat"], rl.flat_ring(row["bytes"], 8), rel_tol=1e-9)
        assert row["bytes_ok"] and row["two"] < row["flat"]


def test_traffic_closed_form():
    s, g, m = 1 << 20, 4, 2  # g and m divide S: the textbook form
    sent, recv, intra, inter = two_level.traffic(s, g, m, 5)
    assert sent == recv == 2 * (g - 1) * s // g + 2 * (m - 1) * (s // g) // m
    assert (intra, inter) == (2 * (g - 1), 2 * (m - 1))
    total = sum(two_level.traffic(4099, g, m, k)[0] for k in range(g * m))
    assert total == sum(two_level.traffic(4099, g, m, k)[1] for k in range(g * m))  # sent = received
