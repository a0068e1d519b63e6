"""AlpaComm's load-balanced broadcast (Zhuang et al., MLSys 2023, §3): whole tiles to the
least-loaded holder and a DFS-searched send order. Results equal the plain resharding's, bytes
equal the closed form, and the assignment and the order search match brute force on small cases."""

import random

import pytest

from parlab.core import topology
from parlab.core.launch import launch
from parlab.tensor_parallel import alpacomm, reshard
from tests import workers_tp

PAIRS = [("row", "col"), ("replicated", "row"), ("row", "replicated"), ("replicated", "replicated"),
         ("replicated", "col")]


@pytest.mark.parametrize("world_size,shape", [(4, (64, 48)), (6, (72, 48))])
@pytest.mark.parametrize("src_layout,dst_layout", PAIRS)
def test_alpacomm_delivers_and_bytes_are_closed_form(world_size, shape, src_layout, dst_layout):
    results = launch(workers_tp.reshard_check, world_size, shape, src_layout, dst_layout,
                     "alpacomm")
    assert all(r["ok"] for r in results)  # every destination holds exactly the plain result
    m, n = world_size // 2, world_size - world_size // 2
    plan = reshard.plan(shape, src_layout, list(range(m)), dst_layout, list(range(m, world_size)),
                        "alpacomm")
    expect = reshard.traffic(plan)
    for rank, r in enumerate(results):
        assert (r["sent"], r["recv"]) == (expect.get(rank, {}).get("sent", 0),
                                          expect.get(rank, {}).get("recv", 0))
        if rank < m:
            assert r["sent"] == reshard.source_elements(shape, src_layout, m, dst_layout, n,
                                                        "alpacomm", rank)


@pytest.mark.parametrize("src_layout,dst_layout", PAIRS)
def test_alpacomm_sends_whole_tiles_once(src_layout, dst_layout):
    src, dst = [0, 1, 2], [3, 4]
    cells = reshard.plan((36, 12), src_layout, src, dst_layout, dst, "broadcast")
    tiles = reshard.plan((36, 12), src_layout, src, dst_layout, dst, "alpacomm")
    key = lambda t: (t.r0, t.r1, t.c0, t.c1, t.dsts)  # noqa: E731
    assert sorted(map(key, tiles)) == sorted(map(key, cells))  # the same cells, none cut
    for t in tiles:
        lo = reshard.region((36, 12), src_layout, src.index(t.src), len(src))
        assert lo[0] <= t.r0 and t.r1 <= lo[1] and lo[2] <= t.c0 and t.c1 <= lo[3]


def test_even_split_is_the_old_balanced():
    args = ((96, 8), "replicated", [0, 1, 2], "replicated", [3, 4, 5])
    assert reshard.plan(*args, "balanced") == reshard.plan(*args, "even-split")
    loads = {method: max(reshard.traffic(reshard.plan(*args, method)).get(s, {}).get("sent", 0)
                         for s in args[2]) for method in ("even-split", "alpacomm")}
    # one replicated tile: the paper sends it whole (as broadcast); our even split cuts it in 3
    assert loads == {"even-split": 96 * 8 // 3, "alpacomm": 96 * 8}


def test_order_avoids_receiver_collisions():
    """row → col: every source holds a tile for every destination; sending them in plan order
    makes both sources hit destination 0's NIC first. The searched order reaches the in-NIC bound."""
    src, dst = [0, 1], [2, 3]
    times = {m: reshard.scheduled_seconds(reshard.plan((64, 64), "row", src, "col", dst, m),
                                          alpha=0.0, beta=1.0)
             for m in reshard.METHODS}
    per_receiver = 64 * 64 // 2 * 4  # bytes each destination must take in
    assert times["alpacomm"] == per_receiver
    assert times["broadcast"] == times["even-split"] == 1.5 * per_receiver
    for pair in PAIRS:
        plans = {m: reshard.plan((64, 64), pair[0], src, pair[1], dst, m) for m in reshard.METHODS}
        seconds = {m: reshard.scheduled_seconds(p, 1e-3, 1e6) for m, p in plans.items()}
        assert seconds["alpacomm"] <= min(seconds["broadcast"], seconds["send-recv"]) + 1e-12


def _random_tasks(rng, n, ranks=5):
    tasks = []
    for _ in range(n):
        sender, *receivers = rng.sample(range(ranks), rng.randint(2, 3))
        tasks.append(alpacomm.Task(sender, tuple(receivers), float(rng.randint(1, 5))))
    return tasks


@pytest.mark.parametrize("seed", range(25))
def test_search_order_matches_brute_force(seed):
    rng = random.Random(seed)
    tasks = _random_tasks(rng, rng.randint(1, 6))
    hosts = {r: r // 2 for r in range(5)} if seed % 2 else None  # odd seeds: 2 ranks per host
    order, span = alpacomm.search_order(tasks, hosts)
    assert sorted(order) == list(range(len(tasks)))
    assert span == alpacomm.makespan(tasks, order, hosts)
    assert span == alpacomm.brute_force_order(tasks, hosts)[1]


@pytest.mark.parametrize("seed", range(25))
def test_assignment_against_brute_force(seed):
    """Whole tiles, least-loaded first: optimal when the tiles are equal and share their holders
    (the layouts of chapter 03), and within one tile of optimal (list scheduling) otherwise."""
    rng = random.Random(seed)
    holders = tuple(range(rng.randint(1, 3)))
    equal = [(6, holders)] * rng.randint(1, 7)
    assert alpacomm.max_load(equal, alpacomm.assign_senders(equal)) == \
        alpacomm.brute_force_assignment(equal)
    mixed = [(rng.randint(1, 9), holders) for _ in range(rng.randint(1, 7))]
    best = alpacomm.brute_force_assignment(mixed)
    got = alpacomm.max_load(mixed, alpacomm.assign_senders(mixed))
    assert best <= got <= best + max(s for s, _ in mixed)
    assert all(s in h for (_, h), s in zip(mixed, alpacomm.assign_senders(mixed)))


def test_one_host_nic_is_shared():
    """Two ranks on one host: their sends to two other hosts share its out-NIC (one after the
    other); on two hosts they run together."""
    tasks = [alpacomm.Task(0, (2,), 1.0), alpacomm.Task(1, (3,), 1.0)]
    assert alpacomm.makespan(tasks, [0, 1]) == 1.0
    hosts = alpacomm.host_map(topology.two_nodes(4, first=2), range(4))
    assert hosts[0] == hosts[1] != hosts[2]
    assert alpacomm.makespan(tasks, [0, 1], hosts) == 2.0


def ordered_check(rank, world_size, shape, src_layout, dst_layout, method):
    """Rank worker: the ordered runtime (`ordered=True`) delivers the region; its ledger bytes."""
    import torch

    from parlab.core.comm import Comm

    tx = Comm()
    rx = Comm(ledger=tx.ledger, timeline=tx.timeline, name="world-rx")
    m = world_size // 2
    src, dst = list(range(m)), list(range(m, world_size))
    full = reshard.full_tensor(shape)
    local = full[:0]
    if rank in src:
        r0, r1, c0, c1 = reshard.region(shape, src_layout, rank, m)
        local = full[r0:r1, c0:c1].clone()
    out, _ = reshard.timed_reshard(tx, rx, local, shape, src_layout, src, dst_layout, dst, method,
                                   chunks=3, ordered=True)
    ok = True
    if rank in dst:
        r0, r1, c0, c1 = reshard.region(shape, dst_layout, rank - m, world_size - m)
        ok = torch.equal(out, full[r0:r1, c0:c1])
    records = [r for r in tx.ledger.records if r["phase"] == "reshard"]
    return {"ok": ok, "sent": sum(r["elements_sent"] for r in records)}


@pytest.mark.parametrize("method", reshard.METHODS)
def test_ordered_runtime_delivers_every_method(method):
    shape = (36, 24)
    for src_layout, dst_layout in PAIRS:
        results = launch(ordered_check, 4, shape, src_layout, dst_layout, method)
        assert all(r["ok"] for r in results), (src_layout, dst_layout)
        expect = reshard.traffic(reshard.plan(shape, src_layout, [0, 1], dst_layout, [2, 3], method))
        assert [r["sent"] for r in results] == [expect.get(k, {}).get("sent", 0) for k in range(4)]


def test_plan_orders_for_the_hosts_it_is_given():
    """Sources 0 and 1 on one machine (`topology.two_nodes`): their NIC carries both rows, so no
    order beats sending them one after the other; one host per rank, the search halves that."""
    args = ((64, 64), "row", [0, 1], "col", [2, 3], "alpacomm")
    shared = alpacomm.host_map(topology.two_nodes(4, first=2), range(4))
    one_nic = reshard.scheduled_seconds(reshard.plan(*args, hosts=shared), 0.0, 1.0, hosts=shared)
    own = reshard.scheduled_seconds(reshard.plan(*args), 0.0, 1.0)
    assert one_nic == 64 * 64 * 4 and own == 64 * 64 * 4 / 2


@pytest.mark.parametrize("world_size", [8, 16])
def test_large_plans_reach_the_nic_bound(world_size):
    """Past brute force's reach (16 and 64 tiles), the searched order still meets the lower bound
    every destination's in-NIC sets: its own region's bytes."""
    m = world_size // 2
    for src_layout, dst_layout in [("row", "col"), ("replicated", "row"), ("replicated", "col")]:
        plan = reshard.plan((256, 256), src_layout, list(range(m)), dst_layout,
                            list(range(m, world_size)), "alpacomm")
        assert reshard.scheduled_seconds(plan, 0.0, 1.0) == 256 * 256 * 4 / m
