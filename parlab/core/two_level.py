"""The two-level (hierarchical) all-reduce: NVLink inside a node, InfiniBand only for 1/g of the data.

A flat ring over the GPUs of several nodes waits for its slowest hop (InfiniBand) on each of its
2(N−1) rounds. The two-level all-reduce splits the work by link, ranks in nodes of g:

1. ring **reduce-scatter inside each node** (g ranks, NVLink): rank (node, i) holds the node's
   sum of shard i, S/g elements;
2. ring **all-reduce of that shard across nodes** (m ranks of the same local index i, one per
   node: a *rail*, one NIC per GPU; the g rails run at once): shard i summed over every node;
3. ring **all-gather inside each node** (NVLink): every rank holds the whole sum.

This is the reduce-scatter / all-reduce / all-gather split of Huawei HCCL's hierarchical
all-reduce ("Hierarchical Communication Principles", HCCL user guide) and of Horovod's
`NCCLHierarchicalAllreduce` (horovod/common/ops/nccl_operations.cc: ncclReduceScatter inside the
node, MPI_Allreduce across, ncclAllGather inside; HOROVOD_HIERARCHICAL_ALLREDUCE=1); its
parts are Thakur, Rabenseifner & Gropp's (IJHPCA 2005) reduce-scatter + all-gather all-reduce
run as rings (Patarasuk & Yuan, JPDC 2009). Per rank it sends (g−1)/g·S + 2(m−1)/m·S/g +
(g−1)/g·S elements (`traffic`, exact for any length: shards follow `cost.shard_sizes`) in
2(g−1) rounds on NVLink and 2(m−1) on InfiniBand:

    T = 2(g−1)(α_i + S/(g·β_i)) + 2(m−1)α_e + 2(m−1)/m·(S/g)/β_e

Every message goes through `parlab.core.comm.Comm` (three ledger records per rank: one per step).
Its α-β price is `parlab.core.explore.real_link.two_level`; chapter 00 runs it on paced A100s
(`parlab.core.explore.two_level_run`).
"""

from __future__ import annotations

from parlab.core import cost


def split(comm, per_node: int):
    """(node Comm, rail Comm) of `comm`'s ranks in nodes of `per_node` consecutive ranks: the
    node holds this rank's machine, the rail the ranks of this rank's local index on every node.
    Collective: every rank of `comm` calls it."""
    if comm.size % per_node:
        raise ValueError(f"world size {comm.size} is not a whole number of nodes of {per_node}")
    m = comm.size // per_node
    node = comm.split([list(range(k * per_node, (k + 1) * per_node)) for k in range(m)], "node")
    rail = comm.split([list(range(i, comm.size, per_node)) for i in range(per_node)], "rail")
    return node, rail


def all_reduce(node, rail, tensor, op: str = "sum"):
    """Sum (or max/min/avg) `tensor` over every rank of every node, in place, in three steps:
    ring reduce-scatter on `node`, ring all-reduce of the shard on `rail`, ring all-gather on
    `node` (`split`). Returns `tensor`."""
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1)  # (S,) a copy if not
    sizes = cost.shard_sizes(flat.numel(), node.size)  # S/g each, ± 1
    shard = node.reduce_scatter(flat, op=op, algo="ring", phase="intra")  # (S/g,) node's sum
    rail.all_reduce(shard, op=op, algo="ring", phase="inter")  # (S/g,) summed over the nodes
    node.all_gather(shard, sizes=sizes, algo="ring", phase="intra", out=flat)  # (S,) whole sum
    if not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def traffic(numel: int, per_node: int, nodes: int, rank: int) -> tuple[int, int, int, int]:
    """Closed form of one rank's elements (sent, received) and rounds (NVLink, InfiniBand) of
    `all_reduce` on `numel` elements, ranks in `nodes` nodes of `per_node`: the ring
    reduce-scatter and all-gather inside (`cost`), plus the ring all-reduce of this rank's
    shard on its rail."""
    local, node = rank % per_node, rank // per_node
    shard = cost.shard_sizes(numel, per_node)[local]
    s1, r1, k1 = cost.ring_reduce_scatter(numel, per_node, local)
    s2, r2, k2 = cost.ring_all_reduce(shard, nodes, node)
    s3, r3, k3 = cost.ring_all_gather(numel, per_node, local)
    return s1 + s2 + s3, r1 + r2 + r3, k1 + k3, k2

