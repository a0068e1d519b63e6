"""Collective algorithms written from point-to-point messages: ring, tree, naive, pairwise.

What NCCL and gloo do inside, spelled out so the bytes can be counted and the algorithms
compared (Thakur, Rabenseifner & Gropp, IJHPCA 2005; Patarasuk & Yuan, JPDC 2009):

* ring reduce-scatter: N-1 rounds; in round k rank r passes its partial sum of chunk r-k-1 to
  r+1 and adds what r-1 sends (chunk r-k-2). After N-1 rounds rank r holds chunk r, fully summed.
* ring all-gather: N-1 rounds; in round k rank r forwards chunk r-k to r+1.
* ring all-reduce = ring reduce-scatter + ring all-gather: 2(N-1)/N·S per rank, bandwidth-optimal.
* tree all-reduce: reduce up a binary tree (children of i are 2i+1, 2i+2), broadcast down:
  2·log2(N) rounds, the latency-optimal shape for small messages.
* naive all-reduce: everyone sends to rank 0, which reduces and sends the sum back: rank 0's
  link carries (N-1)·S each way, the bottleneck the ring removes.
* pairwise all-to-all: in round k rank r sends to r+k and receives from r-k.

Chunks follow `parlab.core.cost.shard_sizes`, so every length works, not only multiples of N. Each
function fills the `Traffic` of its one ledger record with the elements it really sent.
Called only through `parlab.core.comm.Comm` (algo="ring", ...), which records and times them.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from parlab.core.cost import chunk_bounds, shard_bounds


def _exchange(comm, traffic, send=None, dst=None, recv=None, src=None) -> None:
    """Send `send` to group rank dst while receiving into `recv` from src (either may be None)."""
    works = []
    if recv is not None and recv.numel():
        works.append(dist.irecv(recv, comm.global_rank(src), comm.group))
        traffic.recv += recv.numel()
        traffic.peers.add(src)
    if send is not None and send.numel():
        works.append(dist.isend(send.contiguous(), comm.global_rank(dst), comm.group))
        traffic.sent += send.numel()
        traffic.peers.add(dst)
    for work in works:
        work.wait()


def _combine(op: str, acc: torch.Tensor, incoming: torch.Tensor) -> None:
    if op in ("sum", "avg"):
        acc.add_(incoming)
    elif op == "max":
        torch.maximum(acc, incoming, out=acc)
    else:
        torch.minimum(acc, incoming, out=acc)


def _ring_reduce_scatter_inplace(comm, flat, bounds, op, traffic) -> None:
    n, r = comm.size, comm.rank
    nxt, prv = (r + 1) % n, (r - 1) % n
    buffer = flat.new_empty(max(hi - lo for lo, hi in bounds))  # one receive buffer for all rounds
    for k in range(n - 1):
        s_lo, s_hi = bounds[(r - k - 1) % n]
        r_lo, r_hi = bounds[(r - k - 2) % n]
        incoming = buffer[:r_hi - r_lo]  # (chunk,) partial sum from rank r-1
        _exchange(comm, traffic, flat[s_lo:s_hi], nxt, incoming, prv)
        _combine(op, flat[r_lo:r_hi], incoming)
        traffic.rounds += 1


def _ring_all_gather_inplace(comm, flat, bounds, traffic) -> None:
    n, r = comm.size, comm.rank
    nxt, prv = (r + 1) % n, (r - 1) % n
    for k in range(n - 1):
        s_lo, s_hi = bounds[(r - k) % n]
        r_lo, r_hi = bounds[(r - k - 1) % n]
        _exchange(comm, traffic, flat[s_lo:s_hi], nxt, flat[r_lo:r_hi], prv)
        traffic.rounds += 1


def ring_all_reduce(comm, tensor, op, traffic):
    """Ring reduce-scatter then ring all-gather, in place on `tensor`."""
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)  # (S,)
    bounds = shard_bounds(flat.numel(), comm.size)
    _ring_reduce_scatter_inplace(comm, flat, bounds, op, traffic)
    _ring_all_gather_inplace(comm, flat, bounds, traffic)
    if not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def ring_reduce_scatter(comm, flat, sizes, op, traffic):
    """Ring reduce-scatter of the flat tensor cut into `sizes`; returns this rank's chunk."""
    work = flat.clone()  # (S,) partial sums travel around the ring
    bounds = chunk_bounds(sizes)
    _ring_reduce_scatter_inplace(comm, work, bounds, op, traffic)
    lo, hi = bounds[comm.rank]
    return work[lo:hi].clone()  # (S/N,)


def ring_all_gather(comm, shard, sizes, traffic):
    """Ring all-gather of flat shards of `sizes`; returns the concatenation."""
    bounds = chunk_bounds(sizes)
    full = shard.new_empty(sum(sizes))  # (S,)
    lo, hi = bounds[comm.rank]
    full[lo:hi] = shard
    _ring_all_gather_inplace(comm, full, bounds, traffic)
    return full


def tree_all_reduce(comm, tensor, op, traffic):
    """Binary-tree reduce to rank 0, then broadcast back down the same tree."""
    n, r = comm.size, comm.rank
    flat = tensor.contiguous().view(-1)  # (S,)
    children = [c for c in (2 * r + 1, 2 * r + 2) if c < n]
    parent = (r - 1) // 2
    for child in children:
        incoming = torch.empty_like(flat)
        _exchange(comm, traffic, recv=incoming, src=child)
        _combine(op, flat, incoming)
    if r > 0:
        _exchange(comm, traffic, send=flat, dst=parent)
        _exchange(comm, traffic, recv=flat, src=parent)
    for child in children:
        _exchange(comm, traffic, send=flat, dst=child)
    traffic.rounds = 2 * (n.bit_length() - 1)
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def naive_all_reduce(comm, tensor, op, traffic):
    """Gather everything at rank 0, reduce there, send the result to every rank."""
    n, r = comm.size, comm.rank
    flat = tensor.contiguous().view(-1)  # (S,)
    if r == 0:
        for peer in range(1, n):
            incoming = torch.empty_like(flat)
            _exchange(comm, traffic, recv=incoming, src=peer)
            _combine(op, flat, incoming)
        for peer in range(1, n):
            _exchange(comm, traffic, send=flat, dst=peer)
    else:
        _exchange(comm, traffic, send=flat, dst=0)
        _exchange(comm, traffic, recv=flat, src=0)
    traffic.rounds = 2 * (n - 1)
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def pairwise_all_to_all(comm, inputs, outputs, traffic):
    """Round k: send inputs[r+k] to rank r+k, receive outputs[r-k] from rank r-k."""
    n, r = comm.size, comm.rank
    outputs[r].copy_(inputs[r])
    for k in range(1, n):
        dst, src = (r + k) % n, (r - k) % n
        _exchange(comm, traffic, inputs[dst], dst, outputs[src], src)
        traffic.rounds += 1
    return outputs

