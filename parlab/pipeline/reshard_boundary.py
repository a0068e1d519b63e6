"""A pipeline stage boundary that is a cross-mesh resharding (AlpaComm: Zhuang et al., "On Optimizing
the Communication of Model Parallelism", MLSys 2023, §3–4).

Each stage runs on a mesh of w ranks (`widths`, e.g. [2, 1]) holding its activation replicated,
so a boundary moves a tensor from w holders to w needers with chapter 03's
`parlab.tensor_parallel.reshard` ("send-recv", "broadcast", "even-split", "alpacomm"). `Boundary`
offers the executor's `isend` / `recv`, so a schedule runs unchanged. On a paced clock a send
is issued from the rank's own thread where the schedule reaches it — one async `Comm.isend` per
chunk, priced on the board from its issue time, so a message sent early (eager 1F1B's point)
arrives early and the rank's one virtual timeline is touched by one thread only (bit-reproducible).
On the wall clock its sends run on a background thread and the emulated link is applied at the
sender (`SenderLink`: α + n/β after the link is free). Why the runtime's own wall-clock emulation
could not show that: docs/pipeline.md, `parlab.pipeline.reshard_boundary`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from parlab.core import cost
from parlab.tensor_parallel import reshard as rs


class SenderLink:
    """Wall clock: a Comm whose sends are held until an emulated full-duplex link has carried
    them (on a paced clock the Comm's own link is priced on the board instead)."""

    def __init__(self, comm, link):
        self.comm, self.link, self.rank = comm, link, comm.rank
        self._free_at = 0.0

    def isend(self, tensor, dst, phase=None):
        if self.link is not None:
            start = max(time.perf_counter(), self._free_at)
            self._free_at = start + self.link.cost(tensor.numel() * tensor.element_size())
            delay = self._free_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        return self.comm.isend(tensor, dst, phase=phase)  # (rows, cols) chunk, after the wire

    def irecv(self, tensor, src, phase=None):
        return self.comm.irecv(tensor, src, phase=phase)


def _widths(pp: int, width) -> list[int]:
    return [width] * pp if isinstance(width, int) else list(width)


def stage_ranks(widths: list[int]) -> list[list[int]]:
    """World ranks of every stage's mesh: members numbered member-major, stages inner, absent
    members skipped — so with equal widths w member d of stage s is rank d·pp + s (pp innermost,
    as `Mesh([("dp", w), ("pp", pp)])`), and [2, 1] gives stage 0 ranks [0, 2], stage 1 [1]."""
    out: list[list[int]] = [[] for _ in widths]
    rank = 0
    for d in range(max(widths)):
        for s, w in enumerate(widths):
            if d < w:
                out[s].append(rank)
                rank += 1
    return out


def boundary_groups(pp: int, width) -> tuple[list[list[int]], list[list[int]]]:
    """World ranks of boundary k (stage mesh k ∪ mesh k+1), split into even and odd boundaries so
    that each split is a partition (ranks on no boundary of a split get their own group).
    `width`: ranks per stage, one int or a list per stage (`stage_ranks`)."""
    ranks = stage_ranks(_widths(pp, width))
    world = sum(len(r) for r in ranks)
    splits = []
    for parity in (0, 1):
        groups, used = [], set()
        for k in range(parity, pp - 1, 2):
            g = sorted(ranks[k] + ranks[k + 1])
            groups.append(g)
            used |= set(g)
        splits.append(groups + [[r] for r in range(world) if r not in used])
    return splits[0], splits[1]


class _Sent:
    """The executor's handle on a background send: `wait()` until the source side is done."""

    def __init__(self, future):
        self.future = future

    def wait(self):
        return self.future.result()


class _Sends:
    """The executor's handle on a paced send: its chunks' `Comm` handles, waited together."""

    def __init__(self, handles: list):
        self.handles = handles

    def wait(self):
        for handle in self.handles:
            handle.wait()


def source_sends(tx, flat, shape, src: list, dst: list, method: str, chunks: int, phase) -> list:
    """Issue, now and on this thread, this source rank's part of a replicated → replicated
    reshard (`parlab.tensor_parallel.reshard.reshard`'s sends, in its plan and chunk order, so
    every pair sees its messages in the order the receivers post them); return the handles."""
    me = tx.rank
    mine = rs.region(shape, "replicated", src.index(me), len(src))  # the whole (rows, cols)
    handles = []
    for t in rs.plan(shape, "replicated", src, "replicated", dst, method):
        if t.src != me:
            continue
        piece = flat[t.r0 - mine[0]:t.r1 - mine[0], t.c0 - mine[2]:t.c1 - mine[2]]  # (rows, cols)
        for a, b in cost.shard_bounds(t.r1 - t.r0, min(chunks, t.r1 - t.r0)):
            handles.append(tx.isend(piece[a:b].contiguous(), t.dsts[0], phase=phase))  # (chunk, cols)
    return handles


class Boundary:
    """One direction (kind "F": activations down, "B": gradients up) of every boundary of a rank.

    `comms[k]` = (tx, rx) on boundary k's group (`boundary_groups`); a message is a reshard plan
    from the sending stage's mesh of replicas to the receiving one's (`width`: ranks per stage, one
    int or a list per stage). Paced (the Comms keep virtual time): the Comms carry the link and
    sends are issued on the caller's thread; wall clock: `link` is applied by `SenderLink` and
    sends run on a background thread."""

    def __init__(self, kind: str, comms: dict, pp: int, width, method: str, link,
                 chunks: int = 4):
        self.kind, self.pp, self.width, self.method, self.chunks = kind, pp, width, method, chunks
        self.ranks = stage_ranks(_widths(pp, width))
        self.paced = any(tx.virtual for tx, _ in comms.values())
        if self.paced:
            self.comms, self._pool = dict(comms), None
        else:
            self.comms = {k: (SenderLink(tx, link), rx) for k, (tx, rx) in comms.items()}
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"pp-boundary-{kind}")

    def _plan(self, src_stage: int, dst_stage: int, shape):
        k = min(src_stage, dst_stage)
        group = sorted(self.ranks[k] + self.ranks[k + 1])
        src = [group.index(r) for r in self.ranks[src_stage]]
        dst = [group.index(r) for r in self.ranks[dst_stage]]
        rows = 1
        for n in shape[:-1]:
            rows *= n
        return *self.comms[k], (rows, shape[-1]), src, dst

    def isend(self, tensor, peer: int, phase=None):
        """Send this rank's replica of `tensor` to stage `peer`'s mesh: paced, issued now on this
        thread (`source_sends`); on the wall clock, on the background thread."""
        tx, rx, shape, src, dst = self._plan(peer - 1 if self.kind == "F" else peer + 1, peer,
                                             tensor.shape)
        flat = tensor.detach().reshape(shape)  # (mb·T, C): reshard moves 2-D tensors
        if self.paced:
            return _Sends(source_sends(tx, flat, shape, src, dst, self.method, self.chunks, phase))
        return _Sent(self._pool.submit(rs.reshard, tx, rx, flat, shape, "replicated", src,
                                       "replicated", dst, self.method, self.chunks, phase))

    def recv(self, buf, peer: int, phase=None):
        """Receive stage `peer`'s tensor in this mesh's layout (replicated); return it."""
        tx, rx, shape, src, dst = self._plan(peer, peer + 1 if self.kind == "F" else peer - 1,
                                             buf.shape)
        out = rs.reshard(tx, rx, buf.reshape(shape), shape, "replicated", src, "replicated", dst,
                         self.method, self.chunks, phase)  # (mb·T, C)
        return out.reshape(buf.shape)  # (mb, T, C)


def source_bytes(numel: int, width: int, method: str, member: int, itemsize: int = 4,
                 needers: int | None = None) -> int:
    """Closed form: bytes member `member` of a source mesh of w replicas sends per message to n
    needers (n = `needers`, default w; chunk rows divisible by w): send-recv: the first holder
    sends it n times; broadcast and alpacomm (one replicated tile, sent whole): the first holder
    once; even-split: every holder 1/w of it."""
    method = rs.ALIASES.get(method, method)
    if method == "send-recv":
        return numel * (needers or width) * itemsize if member == 0 else 0
    if method in ("broadcast", "alpacomm"):
        return numel * itemsize if member == 0 else 0
    return numel // width * itemsize


def forward_bytes(numel: int, width: int, method: str, member: int, itemsize: int = 4) -> int:
    """Closed form: bytes a destination forwards down the chain per message: the chain's members
    but the last pass the whole tensor on (broadcast, even-split, alpacomm); send-recv forwards
    nothing."""
    if method == "send-recv" or member == width - 1:
        return 0
    return numel * itemsize
