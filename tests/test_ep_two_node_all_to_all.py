"""A paced all-to-all across two nodes is priced per destination pair (parlab.core.topology,
`Topology.all_to_all_seconds`): each rank's NVLink peers and InfiniBand peers are carried at once,
every message paying its α — the hierarchical α-β closed form, to the bit; inside one node (one
kind of link) the price is the one-link k·α + n/β it always was."""

import torch

from parlab.core import clock as clocks
from parlab.core import pacer as pacers
from parlab.core.comm import Comm
from parlab.core.launch import launch
from parlab.core.link import REAL, Link
from parlab.core.topology import nodes
from parlab.core.trace import Timeline

NV, IB = Link(*REAL["NVLink3"], "NVLink3"), Link(*REAL["HDR-IB"], "HDR-IB")
WORLD, PER_NODE = 4, 2


def numel(src: int, dst: int) -> int:
    """Elements rank `src` sends rank `dst`: uneven, and different in each direction."""
    return 1000 * (src + 1) + 300 * dst


def exchanges(rank, world_size, link):
    """An uneven all-to-all over the world (two nodes), then one inside each node: the ends."""
    comm = Comm(None, timeline=Timeline(rank, pacers.Pacer(clocks.resolve("A100"))), link=link)
    comm.all_to_all([torch.ones(numel(rank, j)) for j in range(world_size)],  # (numel(r, j),)
                    output_shapes=[(numel(j, rank),) for j in range(world_size)])
    node = comm.split([[0, 1], [2, 3]], "node")
    peers = [node.global_rank(j) for j in range(node.size)]
    node.all_to_all([torch.ones(numel(rank, j)) for j in peers],  # (numel(r, j),) each
                    output_shapes=[(numel(j, rank),) for j in peers])
    return [(r["t_start"], r["t_end"]) for r in comm.ledger.records if r["op"] == "all_to_all"]


def hierarchical(rank: int) -> float:
    """Σ α per peer + max over the two links of (busier direction's bytes)/β, fp32."""
    local = [j for j in range(WORLD) if j != rank and j // PER_NODE == rank // PER_NODE]
    remote = [j for j in range(WORLD) if j // PER_NODE != rank // PER_NODE]
    nv = max(sum(4 * numel(rank, j) for j in local), sum(4 * numel(j, rank) for j in local))
    ib = max(sum(4 * numel(rank, j) for j in remote), sum(4 * numel(j, rank) for j in remote))
    return (len(local) * NV.latency_s + len(remote) * IB.latency_s
            + max(nv / NV.bandwidth_Bps, ib / IB.bandwidth_Bps))


def test_a_two_node_all_to_all_is_the_hierarchical_closed_form_and_one_node_is_unchanged():
    got = launch(exchanges, WORLD, nodes(WORLD, PER_NODE, NV, IB), timeout=60.0)
    ends = [world[1] for world, _ in got]
    assert all(world[0] == 0.0 for world, _ in got)  # no compute before: issued at 0
    assert ends == [hierarchical(r) for r in range(WORLD)]  # exact: paced time, no noise
    slowest = IB.cost(4 * max(sum(numel(0, j) for j in (1, 2, 3)),
                              sum(numel(j, 0) for j in (1, 2, 3))), WORLD - 1)
    assert ends[0] < slowest  # the NVLink peer's bytes no longer pay InfiniBand's β
    for rank, (_, node) in enumerate(got):
        peer = rank ^ 1  # the other rank of its node
        one_link = NV.cost(4 * max(numel(rank, peer), numel(peer, rank)), 1)
        start = max(node[0], got[peer][1][0])  # it starts when both have issued it
        assert node[1] == start + one_link  # one kind of link: k·α + n/β, as before
