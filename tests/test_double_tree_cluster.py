"""The double tree on 8 paced A100s in 2 nodes of 4 (NVLink 3 inside, HDR InfiniBand between), as
chapter 00's section 10 runs it (parlab.core.explore.two_level_run): its result equals torch's
all-reduce, its ledger bytes equal the closed form, its paced time equals the list schedule's on
the pairs' links (every chunk message priced by the clock) and lies within one InfiniBand message
under `double_tree.time_on`. One launch at 1 MB; paced time only, no raw clock."""

import math

from parlab.core import cost
from parlab.core import double_tree as dt
from parlab.core.explore import double_tree_show as show
from parlab.core.explore import two_level_run as tl

NBYTES = 1 << 20


def test_double_tree_on_two_nodes():
    ranks = tl.run(8, 4, (NBYTES,))
    assert all(r["dtree_equal"] for r in ranks)
    assert [r["dtree_check_bytes"] for r in ranks] == [dt.traffic(tl.CHECK_NUMEL, 8, q)[0] * 4
                                                       for q in range(8)]
    k = tl.dtree_chunks(NBYTES, 8)
    topo = tl.cluster(8)
    parts = [cost.shard_sizes(half, k) for half in cost.shard_sizes(NBYTES // 4, 2)]  # as run
    _, simulated = dt.simulate(8, k, lambda a, b, e: topo.link_between(a, b).cost(e * 4, 1), parts)
    (row,) = show.rows(ranks, (NBYTES,))
    assert math.isclose(row["dtree"], simulated, rel_tol=1e-12)
    assert row["inside"] and row["bytes_ok"] and row["dtree"] < row["flat"]
