"""Cross-mesh resharding (AlpaComm): every method delivers the right region; the ledger's bytes
are the plan's and the closed form's; bad arguments fail before anything moves."""

import pytest

from parlab.core.launch import launch
from parlab.tensor_parallel import reshard
from tests import workers_tp

SHAPE = (64, 48)
PAIRS = [("row", "col"), ("replicated", "row"), ("row", "replicated"), ("replicated", "replicated")]


@pytest.mark.parametrize("world_size", [4])
@pytest.mark.parametrize("src_layout,dst_layout", PAIRS)
@pytest.mark.parametrize("method", reshard.METHODS)
def test_reshard_delivers_and_bytes_are_closed_form(world_size, src_layout, dst_layout, method):
    results = launch(workers_tp.reshard_check, world_size, SHAPE, src_layout, dst_layout, method)
    assert all(r["ok"] for r in results)
    m = world_size // 2
    plan = reshard.plan(SHAPE, src_layout, list(range(m)), dst_layout,
                        list(range(m, world_size)), method)
    expect = reshard.traffic(plan)
    for rank, r in enumerate(results):
        assert (r["sent"], r["recv"]) == (expect.get(rank, {}).get("sent", 0),
                                          expect.get(rank, {}).get("recv", 0))
        if rank < m:
            assert r["sent"] == reshard.source_elements(SHAPE, src_layout, m, dst_layout,
                                                        world_size - m, method, rank)
    total_needed = sum(r["recv"] for r in results)  # every destination gets exactly its region
    per_dst = SHAPE[0] * SHAPE[1] // (1 if dst_layout == "replicated" else world_size - m)
    assert total_needed == per_dst * (world_size - m)


def test_even_split_unloads_the_first_replica():
    src, dst = [0, 1, 2], [3, 4, 5]
    loads = {}
    for method in reshard.METHODS:
        traffic = reshard.traffic(reshard.plan((96, 8), "replicated", src, "replicated", dst,
                                               method))
        loads[method] = max(traffic.get(s, {}).get("sent", 0) for s in src)
    # one replicated cell: only our even split cuts it; AlpaComm sends whole tiles (= broadcast)
    assert loads == {"send-recv": 3 * 96 * 8, "broadcast": 96 * 8, "even-split": 96 * 8 // 3,
                     "alpacomm": 96 * 8}


def test_prediction_orders_the_methods():
    src, dst = [0, 1], [2, 3]
    times = {m: reshard.predicted_seconds(reshard.plan((256, 256), "replicated", src, "row", dst, m),
                                          alpha=50e-6, beta=1.25e6) for m in reshard.METHODS}
    assert times["even-split"] < times["broadcast"] <= times["send-recv"]
    assert times["alpacomm"] < times["broadcast"]  # two row tiles, one per replica


@pytest.mark.parametrize("kwargs,match", [
    (dict(src_layout="diag"), r"src_layout='diag'"),
    (dict(method="magic"), r"method='magic'"),
    (dict(dst_ranks=[1, 2]), r"overlap"),
    (dict(shape=(0, 4)), r"shape=\(0, 4\)"),
])
def test_bad_arguments(kwargs, match):
    args = dict(shape=(8, 8), src_layout="row", src_ranks=[0, 1], dst_layout="col",
                dst_ranks=[2, 3], method="broadcast")
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        reshard.plan(**args)
