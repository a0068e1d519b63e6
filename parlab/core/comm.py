"""The one place where bytes cross ranks: instrumented collectives and point-to-point messages.

A `Comm` wraps one process group, one `Ledger` and one `Timeline`, and is passed explicitly to
whatever code communicates (no global state). Every call appends one ledger record: op,
algorithm, elements and bytes sent and received, sequential rounds, group, phase, start and end.
`algo="gloo"` uses torch.distributed's collective with the ring's nominal bytes
(`parlab.core.cost`); `algo="ring" | "tree" | "naive" | "pairwise"` run `parlab.core.collectives`
with bytes counted from the tensors sent. Async ops return a `Handle`. With a `Link`
(`parlab.core.link`) an op takes at least k·α + bytes/β of wall time (charged from the rank's own
issue time); on a paced clock it completes at a virtual time computed from the ranks' posts
(`parlab.core.virtual_link`, `parlab.core.board`). In full: docs/core.md, `parlab.core.comm`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

from parlab.core import board as paced_board
from parlab.core import collectives, cost
from parlab.core.comm_ops import OpMachinery
from parlab.core.ledger import Ledger, Traffic
from parlab.core.link import Link
from parlab.core.rank_process import current as current_launch
from parlab.core.sharded import REDUCE_OPS, ShardedCollectives, predivide
from parlab.core.topology import Topology, resolve
from parlab.core.trace import Timeline


class Comm(OpMachinery, ShardedCollectives):
    """Collectives and messages on one process group, recorded in a ledger."""

    def __init__(self, group=None, *, ledger: Ledger | None = None,
                 timeline: Timeline | None = None, link: Link | Topology | str | None = "launch",
                 name: str = "world", shares_posts_with: Comm | None = None):
        """`shares_posts_with`: another Comm on the same group whose identity on the paced board
        this one takes (`parlab.core.board.Posts`): a receive side beside a send side, as a
        resharding boundary keeps (`parlab.pipeline.reshard_boundary`) — what this Comm receives
        pairs with what that one's peers sent, and each message keeps its own order per pair."""
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
        self.name = name
        self.ledger = ledger if ledger is not None else Ledger(dist.get_rank())
        self.timeline = timeline if timeline is not None else Timeline(dist.get_rank())
        if link == "launch":
            info = current_launch()
            link = info.link if info is not None else None
        self.link = resolve(link)
        self._free_at = {"tx": 0.0, "rx": 0.0}  # full duplex: each direction queues alone
        self._executor: ThreadPoolExecutor | None = None
        self._handwritten_ops = 0  # hand-written ops issued so far: their tag ranges
        # this Comm's posts on the paced board (parlab.core.board): its identity, region and salt
        info = current_launch()
        self.board_timeout = float(info.timeout_s) if info is not None else 300.0
        if shares_posts_with is not None:
            if tuple(shares_posts_with.ranks) != tuple(self.ranks):
                raise ValueError(f"shares_posts_with: group {shares_posts_with.ranks} is not this "
                                 f"Comm's {self.ranks}")
            self.posts = shares_posts_with.posts
        else:
            self.posts = paced_board.Posts(paced_board.attach(info.board, info.world_size)
                                           if info is not None else None, name, self.ranks,
                                           self.rank)

    # ------------------------------------------------------------------ the port
    def share_port(self, other: Comm) -> None:
        """Queue this Comm's messages on `other`'s port, as two jobs or two trees on one NIC do."""
        self._free_at = other._free_at  # {"tx": t, "rx": t}: when each direction is free

    def idle_port(self) -> None:
        """Both directions of this rank's port free at virtual time 0 (a clock restarted after a
        barrier: every earlier message is delivered)."""
        self._free_at.update(tx=0.0, rx=0.0)

    # ------------------------------------------------------------------ groups
    def split(self, groups: list[list[int]], name: str) -> Comm:
        """A Comm on the group (of `groups`, ranks of this Comm) holding this rank.

        Collective: every rank of this Comm calls it with the same `groups`, because
        torch.distributed.new_group must be called by all ranks in the same order.
        """
        mine = None
        for ranks in groups:
            group = dist.new_group([self.ranks[r] for r in ranks], use_local_synchronization=False)
            if self.rank in ranks:
                mine = group
        if mine is None:
            raise ValueError(f"rank {self.rank} is in none of the groups {groups}")
        return Comm(mine, ledger=self.ledger, timeline=self.timeline, link=self.link, name=name)

    def global_rank(self, group_rank: int) -> int:
        return self.ranks[group_rank]

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, tensor, op="sum", algo="gloo", async_op=False, phase=None):
        """Reduce `tensor` over the group, in place, on every rank. op: sum, avg, max, min."""
        if op not in REDUCE_OPS:
            raise ValueError(f"op={op!r} must be one of {sorted(REDUCE_OPS)}")
        if op == "avg" and predivide(tensor):
            tensor.div_(self.size)  # (same shape) 16-bit: divide first, then sum (no overflow)
            op = "sum"
        scale = (lambda _: tensor.div_(self.size) if op == "avg" else tensor)
        if algo == "gloo":
            sent, recv, rounds = cost.ring_all_reduce(tensor.numel(), self.size, self.rank)
            traffic = Traffic(sent, recv, rounds, self._ring_peers())
            return self._gloo("all_reduce", tensor, traffic, phase, async_op,
                              lambda: [dist.all_reduce(tensor, REDUCE_OPS[op], self.group, True)],
                              finish=scale)
        algorithm = {"ring": collectives.ring_all_reduce, "tree": collectives.tree_all_reduce,
                     "naive": collectives.naive_all_reduce}.get(algo)
        if algorithm is None:
            raise ValueError(f"algo={algo!r} for all_reduce must be gloo, ring, tree or naive")
        return self._handwritten("all_reduce", algo, tensor, phase, async_op,
                                 lambda traffic: scale(algorithm(self, tensor, op, traffic)))

    def all_to_all(self, inputs, output_shapes=None, algo="gloo", async_op=False, phase=None):
        """Send inputs[j] to rank j; return the list of what each rank sent here."""
        if len(inputs) != self.size:
            raise ValueError(f"all_to_all needs {self.size} inputs, got {len(inputs)}")
        shapes = output_shapes or [t.shape for t in inputs]
        inputs = [t.contiguous() for t in inputs]
        outputs = [inputs[0].new_empty(s) for s in shapes]
        counts = cost.pairwise_all_to_all([t.numel() for t in inputs],
                                          [t.numel() for t in outputs], self.rank)
        if algo == "pairwise":
            return self._handwritten("all_to_all", "pairwise", inputs[0], phase, async_op,
                                     lambda t: collectives.pairwise_all_to_all(
                                         self, inputs, outputs, t))
        if algo != "gloo":
            raise ValueError(f"algo={algo!r} for all_to_all must be gloo or pairwise")
        traffic = Traffic(*counts, peers=set(range(self.size)) - {self.rank})
        send = torch.cat([t.reshape(-1) for t in inputs])  # (Σ input numels,) in rank order
        recv = send.new_empty(sum(t.numel() for t in outputs))  # (Σ output numels,)
        in_splits, out_splits = [t.numel() for t in inputs], [t.numel() for t in outputs]

        def unpack(_):
            pieces = torch.split(recv, out_splits)
            return [p.view(t.shape) for p, t in zip(pieces, outputs)]

        return self._gloo("all_to_all", inputs[0], traffic, phase, async_op,
                          lambda: [dist.all_to_all_single(recv, send, out_splits, in_splits,
                                                          self.group, True)],
                          finish=unpack, pieces=(in_splits, out_splits))

    def broadcast(self, tensor, src=0, async_op=False, phase=None):
        """Copy `tensor` from group rank `src` to every rank, in place."""
        sent, recv, rounds = cost.flat_broadcast(tensor.numel(), self.size, self.rank, src)
        peers = set(range(self.size)) - {src} if self.rank == src else {src}
        return self._gloo("broadcast", tensor, Traffic(sent, recv, rounds, peers), phase,
                          async_op, lambda: [dist.broadcast(tensor, self.global_rank(src),
                                                            self.group, True)],
                          finish=lambda _: tensor, needs=[] if self.rank == src else [src])

    def barrier(self, phase=None):
        return self._gloo("barrier", torch.zeros(0), Traffic(0, 0, 0), phase, False,
                          lambda: [dist.barrier(self.group, async_op=True)])

    # ------------------------------------------------------------------ point to point
    def send(self, tensor, dst, async_op=False, phase=None):
        """Send `tensor` to group rank `dst` (`isend` = async_op=True)."""
        tensor = tensor.contiguous()
        return self._gloo("send", tensor, Traffic(tensor.numel(), 0, 1, {dst}), phase, async_op,
                          lambda: [dist.isend(tensor, self.global_rank(dst), self.group)])

    def recv(self, tensor, src, async_op=False, phase=None):
        """Receive into `tensor` from group rank `src` (`irecv` = async_op=True)."""
        return self._gloo("recv", tensor, Traffic(0, tensor.numel(), 1, {src}), phase, async_op,
                          lambda: [dist.irecv(tensor, self.global_rank(src), self.group)],
                          finish=lambda _: tensor)

    def isend(self, tensor, dst, phase=None):
        return self.send(tensor, dst, async_op=True, phase=phase)

    def irecv(self, tensor, src, phase=None):
        return self.recv(tensor, src, async_op=True, phase=phase)

    def close(self) -> None:
        """Finish this Comm's background work: the thread of its asynchronous hand-written ops
        ends once the ops it holds are done (call before `dist.destroy_process_group`)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def drop_records(self) -> int:
        """Forget this rank's ledger records so far (a long sweep keeps only what it reports);
        returns how many were dropped. The ledger is written and pruned only through Comm."""
        dropped = len(self.ledger.records)
        self.ledger.records.clear()
        return dropped

    # ------------------------------------------------------------------ what others sent
    NOMINAL = {"all_reduce": cost.ring_all_reduce, "all_gather": cost.ring_all_gather,
               "reduce_scatter": cost.ring_reduce_scatter}

    def record_nominal(self, op: str, tensor, numel: int | None = None, algo: str = "torch",
                       phase=None, t_start: float | None = None, t_end: float | None = None,
                       sent: int | None = None, recv: int | None = None, rounds: int = 1,
                       peers=()) -> dict:
        """Record an op that PyTorch performed on this group without `Comm` (DDP's own reducer,
        DTensor, ZeroRedundancyOptimizer, FSDP2, torch.distributed.pipelining): its bytes cannot be
        observed, so the record says `nominal=True` and holds what a ring moves for `numel`
        elements of `tensor`'s dtype (`parlab.core.cost`), or the given `sent` / `recv` elements
        for point-to-point ops. `numel` is the full (gathered) size for all_gather."""
        record = self._record(op, algo, tensor, phase, numel)
        numel = record["numel"]
        if sent is None:
            sent, recv, rounds = self.NOMINAL[op](numel, self.size, self.rank)
            peers = self._ring_peers()
        item = tensor.element_size()  # no emulated link: PyTorch's transfer is not ours to delay
        record.update(elements_sent=sent, elements_recv=recv or 0, bytes_sent=sent * item,
                      bytes_recv=(recv or 0) * item, rounds=rounds,
                      peers=tuple(self.ranks[p] for p in sorted(peers)))
        record.update(nominal=True, t_start=t_start if t_start is not None else record["t_start"],
                      t_end=t_end if t_end is not None else self.timeline.now())
        return record
