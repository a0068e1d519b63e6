"""NCCL's pipelined double binary tree (parlab.core.double_tree) on paced A100s over NVLink 3, at
world sizes 2, 3, 4 and 8: its result equals torch's all-reduce (integer-valued float32 exactly,
random float32 within rtol = atol = 1e-5: the trees add in another order), each rank's ledger
bytes equal the closed form exactly, and its paced time equals the list schedule's (every chunk
message priced by the clock) and lies within one message under the α-β closed form. One launch
per world size; paced time only, no raw clock."""

import math

import pytest

from parlab.core import double_tree as dt
from parlab.core.explore import double_tree_run as run
from parlab.core.link import real

NBYTES = 96 << 12  # 393,216 bytes: S/(2k) whole for k = 1, 3
CHUNKS = (1, 3)
NVLINK = real("NVLink3")


@pytest.fixture(scope="module", params=[2, 3, 4, 8])
def ranks(request):
    n = request.param
    return n, run.run(n, "NVLink3", numel=1001, chunks=3, sizes=[(NBYTES, k) for k in CHUNKS])


def test_result_bytes_and_paced_time(ranks):
    n, res = ranks
    assert all(r["equal"] and r["close"] for r in res)  # integer-valued: exact; random: 1e-5
    assert [r["bytes"] for r in res] == [dt.traffic(1001, n, q)[0] * 4 for q in range(n)]
    for k in CHUNKS:
        message = NVLINK.cost(NBYTES / (2 * k), 1)
        paced = max(r[(NBYTES, k)][0] for r in res)
        _, simulated = dt.simulate(n, k, lambda a, b, e: NVLINK.cost(e * 4, 1),
                                   [[NBYTES // 8 // k] * k] * 2)
        assert math.isclose(paced, simulated, rel_tol=1e-12)  # the clock followed the schedule
        closed = dt.time(NBYTES, n, NVLINK.latency_s, NVLINK.bandwidth_Bps, k)
        assert paced <= closed * (1 + 1e-12) and closed - paced <= message * (1 + 1e-12)
        assert all(r[(NBYTES, k)][1] == dt.traffic(NBYTES // 4, n, q)[0] * 4
                   for q, r in enumerate(res))


def test_trees_are_complementary():
    for n in range(2, 17):
        shape = dt.trees(n)
        for tree in shape:
            assert sum(p < 0 for p, _ in tree) == 1  # one root
            assert sorted(c for _, cs in tree for c in cs) == sorted(
                r for r in range(n) if tree[r][0] >= 0)  # every other rank is someone's child
            assert all(r in tree[p][1] for r, (p, _) in enumerate(tree) if p >= 0)
        inner_in_both = [r for r in range(n) if shape[0][r][1] and shape[1][r][1]]
        assert inner_in_both == ([] if n % 2 == 0 else [0])


def test_closed_forms():
    m = NVLINK.cost(NBYTES / 6, 1)
    for n, h, p in ((2, 1, 2), (4, 2, 4), (8, 3, 4), (16, 4, 4)):
        assert (dt.height(n), dt.port_messages(n)) == (h, p)
        assert math.isclose(dt.time(NBYTES, n, NVLINK.latency_s, NVLINK.bandwidth_Bps, 3),
                            (3 * h - 1 + p * 2) * m, rel_tol=1e-12)
    for n in (2, 3, 8):  # sent = received over all ranks; about 2S per rank
        assert sum(dt.traffic(4099, n, q)[0] for q in range(n)) == sum(
            dt.traffic(4099, n, q)[1] for q in range(n))
    assert dt.traffic(4000, 8, 1) == (8000, 8000)  # a leaf of tree 0 (up), inner in tree 1 (up, 2 down)
