"""Collective algorithms written from point-to-point messages: ring, tree, naive, pairwise.

What NCCL and gloo do inside, spelled out so the bytes can be counted and the algorithms
compared (Thakur, Rabenseifner & Gropp, IJHPCA 2005; Patarasuk & Yuan, JPDC 2009): ring
reduce-scatter and all-gather (N-1 rounds each; their sum is the bandwidth-optimal all-reduce,
2(N-1)/N·S per rank), pipelined in segments of about SEGMENT_BYTES (Patarasuk & Yuan 2009, §4),
tree all-reduce (2·log2(N) rounds), naive all-reduce through rank 0, pairwise all-to-all.
Chunks follow `parlab.core.cost.shard_sizes`, so every length works. Each function fills the
`Traffic` of its one ledger record with the elements it really sent. Called only through
`parlab.core.comm.Comm` (algo="ring", ...), which records and times them. Each algorithm round
by round: docs/core.md, `parlab.core.collectives`.
"""

from __future__ import annotations

import threading
import weakref

import torch
import torch.distributed as dist

from parlab.core.cost import chunk_bounds, shard_bounds
from parlab.core.shapes import is_fake


class _NoWork:
    """A message of a shapes-only run (`parlab.core.shapes`): counted, never sent (no data)."""

    def wait(self) -> bool:
        return True


def _isend(tensor, dst: int, group, tag: int):
    """torch.distributed.isend, or for a fake tensor nothing: its bytes are counted by the caller
    and its time priced by `Comm` from the op's posts on the board."""
    return _NoWork() if is_fake(tensor) else dist.isend(tensor, dst, group, tag=tag)


def _irecv(tensor, src: int, group, tag: int):
    """torch.distributed.irecv, or for a fake tensor nothing (see `_isend`)."""
    return _NoWork() if is_fake(tensor) else dist.irecv(tensor, src, group, tag=tag)


def _exchange(comm, traffic, send=None, dst=None, recv=None, src=None) -> None:
    """Send `send` to group rank dst while receiving into `recv` from src (either may be None)."""
    works = []
    if recv is not None and recv.numel():
        works.append(_irecv(recv, comm.global_rank(src), comm.group, tag=traffic.tag))
        traffic.recv += recv.numel()
        traffic.peers.add(src)
    if send is not None and send.numel():
        works.append(_isend(send.contiguous(), comm.global_rank(dst), comm.group,
                                tag=traffic.tag))
        traffic.sent += send.numel()
        traffic.peers.add(dst)
    for work in works:
        work.wait()


def _combine(op: str, acc: torch.Tensor, incoming: torch.Tensor, out=None) -> None:
    """acc ⊕= incoming, or with `out` given out = acc ⊕ incoming (one pass, no copy after)."""
    out = acc if out is None else out
    if op in ("sum", "avg"):
        torch.add(acc, incoming, out=out)
    elif op == "max":
        torch.maximum(acc, incoming, out=out)
    else:
        torch.minimum(acc, incoming, out=out)


# A ring step's chunk travels as segments of about SEGMENT_BYTES (at most MAX_SEGMENTS), each its
# own message with its own tag: segment j of step k+1 leaves as soon as segment j of step k has
# arrived and been reduced, so the reduction of one segment overlaps the transfer of the next and
# the whole ring streams (the pipelined ring of Patarasuk & Yuan, JPDC 2009, §4). Every op's tags
# (`Traffic.tag`, from `Comm`) start at or above TAG_BASE, one range per op, so its messages
# never match a user's send/recv (tag 0) nor another op's in flight on the same group.
# 4 MB, not smaller: every message costs CPU in gloo's transport, and with as many ranks as cores
# the CPU, not the socket, sets the pace; 4 MB segments beat 1 MB ones in 6 of 8 medians of two
# interleaved 15-repeat runs here (16 and 64 MB, N = 2 and 4), by 0.06 of gloo's time on average.
SEGMENT_BYTES = 4 << 20
MAX_SEGMENTS = 16
TAG_BASE = 1 << 16
TAG_SLOTS = 1024  # hand-written ops in flight at once on one Comm, each with MAX_SEGMENTS tags


def segment_count(bounds, itemsize: int) -> int:
    """Segments per chunk: the longest chunk cut into pieces of about SEGMENT_BYTES."""
    longest = max(hi - lo for lo, hi in bounds)
    return max(1, min(MAX_SEGMENTS, -(-longest * itemsize // SEGMENT_BYTES)))


def _ring_stream(comm, traffic, flat, bounds, steps, op=None, result=None):
    """Run the ring `steps` [(send chunk, receive chunk, reduce?)] on `flat`, segment-pipelined.

    The ring property holds for every schedule here: what step k+1 sends is what step k received
    (reduced if it reduces), so segment j moves on the moment it is ready. A reducing step receives
    into one of two scratch buffers (alternating per step, so the next receive is posted before
    this one is reduced) and reduces into `flat` in place; with `result` given, `flat` is read
    only and the partial sums travel in the scratch buffers instead (a reduce-scatter that must
    not touch its input), and the last step writes its sums straight into `result`. A non-reducing step
    (all-gather) receives straight into `flat`. A receive into memory that a send still reads
    waits for that send first. Each step is one round of the ledger (its segments are in flight
    together, not one after another), so the closed forms' N-1 rounds per phase hold.
    """
    n, r = comm.size, comm.rank
    nxt, prv = comm.global_rank((r + 1) % n), comm.global_rank((r - 1) % n)
    # shapes-only (a fake tensor): nothing is copied, so segments buy no time; the paced clock
    # prices the op whole (its bytes and rounds), so one segment gives the same time and ledger
    parts = 1 if is_fake(flat) else segment_count(bounds, flat.element_size())
    segs = [[(lo + a, lo + b) for a, b in shard_bounds(hi - lo, parts)] for lo, hi in bounds]
    offsets = shard_bounds(max(hi - lo for lo, hi in bounds), parts)  # scratch layout by segment
    scratch = _scratch(comm, flat, offsets[-1][1]) if any(s[2] for s in steps) else []
    sending: dict = {}  # memory region -> the isend still reading it
    recvs: list = [None] * parts

    def region(kind, index, j):  # (key, view) of segment j of a flat chunk or a scratch buffer
        if kind == "flat":
            lo, hi = segs[index][j]
            return ("flat", index, j), flat[lo:hi]
        chunk_lo, chunk_hi = segs[index[1]][j]
        lo = offsets[j][0]
        return ("scratch", index[0], j), scratch[index[0]][lo:lo + chunk_hi - chunk_lo]

    def send(key, view, j):
        if view.numel():
            sending[key] = _isend(view, nxt, comm.group, tag=traffic.tag + j)
            traffic.sent += view.numel()
            traffic.peers.add((r + 1) % n)

    def post_recv(k, j):
        chunk, reduce = steps[k][1], steps[k][2]
        key, view = region("scratch", (k % 2, chunk), j) if reduce else region("flat", chunk, j)
        if key in sending:
            sending.pop(key).wait()
        work = None
        if view.numel():
            work = _irecv(view, prv, comm.group, tag=traffic.tag + j)
            traffic.recv += view.numel()
            traffic.peers.add((r - 1) % n)
        recvs[j] = (work, key, view)

    for j in range(parts):
        post_recv(0, j)
    for j in range(parts):
        send(*region("flat", steps[0][0], j), j)
    for k, (_, chunk, reduce) in enumerate(steps):
        for j in range(parts):
            work, key, view = recvs[j]
            if work is not None:
                work.wait()
            if k + 1 < len(steps):
                post_recv(k + 1, j)  # the next receive is posted before this segment is reduced
            if reduce and result is None:
                key, target = region("flat", chunk, j)
                _combine(op, target, view)  # (segment,) flat += what rank r-1 summed so far
                view = target
            elif reduce and k + 1 < len(steps):
                _combine(op, view, region("flat", chunk, j)[1])  # (segment,) partial += own input
            elif reduce:  # the last step: the finished sum goes straight into `result`
                lo = segs[chunk][j][0] - bounds[chunk][0]
                _combine(op, view, region("flat", chunk, j)[1],
                         out=result[lo:lo + view.numel()])  # (segment,) partial + own input
            if k + 1 < len(steps):
                send(key, view, j)
        traffic.rounds += 1
    for work in sending.values():
        work.wait()


_SCRATCH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _scratch(comm, like: torch.Tensor, width: int) -> list[torch.Tensor]:
    """Two receive buffers of `width` elements, kept per Comm, thread and dtype and reused by
    every later call: a fresh 2 × 32 MB allocation per call costs its page faults each time (at
    64 MB that made the ring slower than gloo). One set per thread, because an async op runs on
    the Comm's background thread while the main thread may run another."""
    per_comm = _SCRATCH.setdefault(comm, {})
    key = (threading.get_ident(), like.dtype)
    buffers = per_comm.get(key)
    if buffers is None or buffers[0].numel() < width:
        buffers = per_comm[key] = [like.new_empty(width), like.new_empty(width)]  # 2 × (chunk,)
    return [b[:width] for b in buffers]


def _reduce_scatter_steps(n, r):
    """Ring reduce-scatter: in step k rank r sends chunk r-k-1, receives chunk r-k-2 and adds."""
    return [((r - k - 1) % n, (r - k - 2) % n, True) for k in range(n - 1)]


def _all_gather_steps(n, r):
    """Ring all-gather: in step k rank r forwards chunk r-k and receives chunk r-k-1."""
    return [((r - k) % n, (r - k - 1) % n, False) for k in range(n - 1)]


def ring_all_reduce(comm, tensor, op, traffic):
    """Ring reduce-scatter then ring all-gather, in place on `tensor`, as one segment stream:
    the all-gather's first segment leaves as soon as the reduce-scatter finished summing it."""
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)  # (S,)
    n, r = comm.size, comm.rank
    if n > 1 and flat.numel():
        bounds = shard_bounds(flat.numel(), n)
        _ring_stream(comm, traffic, flat, bounds, _reduce_scatter_steps(n, r)
                     + _all_gather_steps(n, r), op)
    elif n > 1:
        traffic.rounds = 2 * (n - 1)
    if not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def ring_reduce_scatter(comm, flat, sizes, op, traffic, out=None):
    """Ring reduce-scatter of the flat tensor cut into `sizes`; returns this rank's chunk (in
    `out` when given). The input is only read: partial sums travel in two scratch buffers."""
    n, r = comm.size, comm.rank
    bounds = chunk_bounds(sizes)
    lo, hi = bounds[r]
    out = flat.new_empty(hi - lo) if out is None else out  # (S/N,)
    if n == 1 or not flat.numel():
        traffic.rounds = n - 1
        return out.copy_(flat[lo:hi])  # (S/N,)
    _ring_stream(comm, traffic, flat, bounds, _reduce_scatter_steps(n, r), op, result=out)
    return out


def ring_all_gather(comm, shard, sizes, traffic, out=None):
    """Ring all-gather of flat shards of `sizes`; returns the concatenation (in `out` if given)."""
    n, r = comm.size, comm.rank
    bounds = chunk_bounds(sizes)
    full = shard.new_empty(sum(sizes)) if out is None else out  # (S,)
    lo, hi = bounds[r]
    full[lo:hi] = shard
    if n > 1 and full.numel():
        _ring_stream(comm, traffic, full, bounds, _all_gather_steps(n, r))
    else:
        traffic.rounds = n - 1
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

