"""NCCL's double binary tree all-reduce, pipelined in chunks, from point-to-point messages.

Sanders, Speck & Träff, "Two-tree algorithms for full bandwidth broadcast, reduction and scan"
(Parallel Computing 2009), built as NCCL 2.4 does (src/graph/trees.cc): tree 0 a binary tree in
which every odd rank is a leaf, tree 1 its mirror (even N) or its shift by one (odd N), so a rank
inner in one tree is a leaf of the other. Tree t reduces, then broadcasts, half t of the tensor
in k chunks, PIPELINED: a rank forwards chunk c while chunk c+1 is still coming in. Every chunk is
its own `Comm.isend` / `irecv`, so a paced clock prices each message (α + c/β on its pair's link,
one at a time on a rank's port) and the pipelining is measured, not assumed. Each rank follows
`simulate`'s list schedule. Closed forms: `traffic` (exact), `time`, `time_on`. Details:
docs/core.md, `parlab.core.double_tree`.
"""

from __future__ import annotations

import heapq
import math

import torch

from parlab.core import cost
from parlab.core.topology import Topology

MAX_CHUNKS = 16  # per tree: a message each, so the run's CPU cost grows with it


def btree(n: int, role: int) -> tuple[int, list[int]]:
    """(parent, children) of position `role` in NCCL's binary tree of `n` positions (parent −1 at
    the root, position 0): the lowest set bit b of `role` sets its level; its parent is
    (role ^ b) | 2b, or role ^ b when that is out of range; its children role ∓ b/2 (the larger
    halved until it is in range)."""
    if role == 0:
        bit = 1
        while bit < n:
            bit <<= 1
        return -1, ([bit >> 1] if n > 1 else [])
    bit = role & -role
    up = (role ^ bit) | (bit << 1)
    if up >= n:
        up = role ^ bit
    children, low = [], bit >> 1
    if low:
        children.append(role - low)
        while low and role + low >= n:
            low >>= 1
        if low:
            children.append(role + low)
    return up, children


def trees(n: int) -> list[list[tuple[int, list[int]]]]:
    """The two trees: trees(n)[t][rank] = (parent rank, child ranks) in tree t (parent −1: root)."""
    if n % 2 == 0:
        to_rank, to_role = (lambda p: n - 1 - p), (lambda r: n - 1 - r)
    else:
        to_rank, to_role = (lambda p: (p + 1) % n), (lambda r: (r - 1) % n)
    first = [btree(n, r) for r in range(n)]
    second = []
    for r in range(n):
        parent, children = btree(n, to_role(r))
        second.append((-1 if parent < 0 else to_rank(parent), [to_rank(c) for c in children]))
    return [first, second]


def port_messages(n: int) -> int:
    """p: the most messages one rank sends per chunk index, both trees together (up to its parent,
    down to each child): the busiest outgoing port's share of every pipeline step."""
    if n < 2:
        return 0
    return max(sum((t[r][0] >= 0) + len(t[r][1]) for t in trees(n)) for r in range(n))


def traffic(numel: int, n: int, rank: int) -> tuple[int, int]:
    """Closed form of one rank's (elements sent, elements received): in tree t, half h_t of the
    tensor goes up once (not from the root) and down once to each child, and comes in once from
    each child and once from the parent."""
    sent = recv = 0
    if n < 2:
        return 0, 0
    for t, half in zip(trees(n), cost.shard_sizes(numel, 2)):
        parent, children = t[rank]
        sent += half * ((parent >= 0) + len(children))
        recv += half * ((parent >= 0) + len(children))
    return sent, recv


def best_chunks(nbytes: float, n: int, alpha: float, beta: float, most: int = MAX_CHUNKS) -> int:
    """k minimising `time` (whole k in [1, most]): T(k) is convex in k, so the first k whose
    successor is no faster."""
    k = 1
    while k < most and time(nbytes, n, alpha, beta, k + 1) < time(nbytes, n, alpha, beta, k):
        k += 1
    return k


def height(n: int) -> int:
    """H = ⌈log₂N⌉: the levels of NCCL's binary tree of N ranks (its root has one child)."""
    return max(0, (n - 1).bit_length())


def time(nbytes: float, n: int, alpha: float, beta: float, chunks: int) -> float:
    """The α-β price on one link, k chunks per tree: T = (3H − 1 + p(k − 1))·(α + S/(2kβ)) — the
    first chunk up H = ⌈log₂N⌉ levels and down 1 + 2(H − 1) (a second child waits for the
    first), then k − 1 chunks of p (`port_messages`) messages on the busiest port; → 2S/β."""
    if n < 2:
        return 0.0
    return time_on(nbytes, n, chunks, lambda src, dst: alpha + nbytes / (2 * chunks * beta))


def time_on(nbytes: float, n: int, chunks: int, message_s) -> float:
    """`time` with message_s(src, dst) seconds per chunk message on each pair: the first chunk's
    trip up and down, plus k − 1 times the busiest port's seconds per chunk."""
    if n < 2:
        return 0.0
    fill = 0.0
    for tree in trees(n):
        up = [0.0] * n
        order, stack = [], [next(r for r in range(n) if tree[r][0] < 0)]
        while stack:
            r = stack.pop()
            order.append(r)
            stack.extend(tree[r][1])
        for r in reversed(order):  # children before parents
            up[r] = max([up[c] + message_s(c, r) for c in tree[r][1]], default=0.0)
        down = [0.0] * n
        for r in order:  # parents before children
            t = down[r]
            for c in tree[r][1]:
                t += message_s(r, c)
                down[c] = t
        fill = max(fill, up[order[0]] + max(down))
    port = max(sum(message_s(r, d) for tree in trees(n)
                   for d in ([tree[r][0]] if tree[r][0] >= 0 else []) + tree[r][1])
               for r in range(n))
    return fill + (chunks - 1) * port


def schedule(n: int, chunks: int, cost_s, parts=None) -> list[list[tuple]]:
    """Each rank's steps (`simulate`'s order)."""
    return simulate(n, chunks, cost_s, parts)[0]


def simulate(n: int, chunks: int, cost_s, parts=None) -> tuple[list[list[tuple]], float]:
    """(order, seconds): each rank's steps [(kind "up" | "down", tree, chunk), ...] as a list
    scheduler on the paced clock's rules finds them ready — a step waits for its inputs, its
    sends leave one at a time from the rank's port, cost_s(src, dst, elements) each, the
    earliest ready step of any rank goes first (causal: no deadlock) — and when the last
    message arrives. `parts[t][c]`: elements of chunk c of tree t (default 1)."""
    shape = trees(n)
    size = (lambda t, c: 1) if parts is None else (lambda t, c: parts[t][c])
    now, port = [0.0] * n, [0.0] * n
    got: dict = {}  # (rank, kind, tree, chunk) -> arrivals of its inputs so far
    need = {"up": lambda r, t: len(shape[t][r][1]), "down": lambda r, t: 1}
    heap = [(0.0, r, t, c, "up") for r in range(n) for t in (0, 1) for c in range(chunks)
            if not shape[t][r][1]]  # leaves: ready at once
    heapq.heapify(heap)
    order: list[list[tuple]] = [[] for _ in range(n)]
    while heap:
        ready, r, t, c, kind = heapq.heappop(heap)
        order[r].append((kind, t, c))
        now[r] = max(now[r], ready)
        parent, children = shape[t][r]
        if kind == "up" and parent >= 0:
            sends = [(parent, "up")]
        else:  # a root's sum, or a chunk from the parent, goes down
            sends = [(d, "down") for d in children]
        for d, what in sends:
            port[r] = max(now[r], port[r]) + cost_s(r, d, size(t, c))
            step = (d, what, t, c)
            got.setdefault(step, []).append(port[r])
            if len(got[step]) == need[what](d, t) and (what == "up" or shape[t][d][1]):
                heapq.heappush(heap, (max(got.pop(step)), d, t, c, what))
    return order, max(port)


def all_reduce(comms, tensor, chunks: int = 1, op: str = "sum"):
    """Sum (or max/min) `tensor` over the ranks, in place, with the pipelined double binary tree.
    `comms`: one Comm per tree on the same ranks (`split`), whose messages never mix; each chunk
    is one `isend`/`irecv` (ledger records). Returns `tensor`."""
    n, rank = comms[0].size, comms[0].rank
    if n < 2:
        return tensor
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1)  # (S,)
    halves = cost.shard_bounds(flat.numel(), 2)  # tree t: flat[lo:hi], about S/2
    bounds = [[(lo + a, lo + b) for a, b in cost.shard_bounds(hi - lo, chunks)] for lo, hi in halves]
    shape = trees(n)
    plan = _plan(comms[0], n, tuple(tuple(hi - lo for lo, hi in b) for b in bounds),
                 flat.element_size())[rank]
    incoming, down = {}, {}
    for t, tree in enumerate(shape):  # every receive posted up front: they occupy no port
        parent, children = tree[rank]
        for c, (lo, hi) in enumerate(bounds[t]):
            if hi == lo:
                continue
            for child in children:
                buf = flat.new_empty(hi - lo)  # (S/(2k),) a child's partial sum of chunk c
                incoming[(t, c, child)] = (buf, comms[t].irecv(buf, child))
            if parent >= 0:
                down[(t, c)] = comms[t].irecv(flat[lo:hi], parent)  # (S/(2k),) the final sum
    sends = []
    for kind, t, c in plan:
        parent, children = shape[t][rank]
        lo, hi = bounds[t][c]
        if hi == lo:
            continue
        chunk = flat[lo:hi]  # (S/(2k),) chunk c of half t
        if kind == "up":
            for child in children:
                buf, handle = incoming.pop((t, c, child))
                handle.wait()
                _combine(op, chunk, buf)  # (S/(2k),) += the child's partial sum
            dests = [parent] if parent >= 0 else children  # the root turns the sum round
        else:
            down.pop((t, c)).wait()
            dests = children
        sends.extend(comms[t].isend(chunk, d) for d in dests)
    for handle in [*down.values(), *sends]:
        handle.wait()
    if not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def _plan(comm, n: int, parts: tuple, itemsize: int) -> list[list[tuple]]:
    """`schedule` priced on `comm`'s link (a pair's own link in a Topology); cached per shape."""
    key = (n, parts, itemsize, comm.link, tuple(comm.ranks))
    if key not in _PLANS:
        link, ranks = comm.link, comm.ranks

        def cost_s(src, dst, numel):
            pair = link.link_for([ranks[src], ranks[dst]]) if isinstance(link, Topology) else link
            return 0.0 if pair is None else pair.cost(numel * itemsize, 1)

        _PLANS.clear() if len(_PLANS) > 64 else None
        _PLANS[key] = schedule(n, len(parts[0]), cost_s, parts)
    return _PLANS[key]


_PLANS: dict = {}


def _combine(op: str, acc, incoming) -> None:
    if op == "sum":
        acc.add_(incoming)
    elif op == "max":
        torch.maximum(acc, incoming, out=acc)
    elif op == "min":
        torch.minimum(acc, incoming, out=acc)
    else:
        raise ValueError(f"op={op!r} must be sum, max or min")


def split(comm):
    """One Comm per tree on all of `comm`'s ranks (their messages never mix: a pair can be
    parent and child in both trees), sharing `comm`'s outgoing port on a paced clock (one GPU,
    one port). Collective: every rank calls it."""
    everyone = [list(range(comm.size))]
    out = [comm.split(everyone, f"{comm.name}/dtree{t}") for t in (0, 1)]
    for sub in out:
        sub.share_port(comm)  # one port: the two trees' messages queue behind each other
    return out


def chunk_count(nbytes: float, n: int, alpha: float, beta: float) -> int:
    """The chunks per tree a run uses: `best_chunks`, at least 1."""
    return max(1, best_chunks(nbytes, n, alpha, beta)) if math.isfinite(beta) else 1
