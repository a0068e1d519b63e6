"""The paced board: each rank's paced issue time of every message, shared by the ranks of a launch.

On a paced clock (`parlab.core.clock`) a rank's time is its real time less the debt its real
work owes its paced spans: a rank descheduled by a busy machine runs late in real time, and the
slack of its next spans pays the debt back. A wait on a peer breaks that bookkeeping: when the
op completes, the real time says when the *last peer really* arrived — its lateness included —
not when it arrived on the paced clock. Charging that real time would let contention back into
every timing lesson (a collective is as late as its latest rank's scheduler).

So every rank posts, when it issues an op on a paced clock, its paced issue time under the
op's key — a collective's key is (group, how many collectives this Comm issued before), a
message's is (sender, receiver, how many messages before on that pair) — and after the real wait
reads its peers' times: the op completes, on the paced clock, at

    max(this rank's paced now, its own delivery α + n/β after its issue, every peer's paced issue)

— what the same op's real time is on an idle machine (gloo's own transfer is not paced; the
emulated link is, and with no emulated link the delivery is instant), with each rank's lateness
left out. A collective waits for every rank of the
group, a receive for its sender, a send for its receiver when the receiver has posted (gloo may
complete a send without it). A key not found (the board's ring overwritten, or a launch without
a board: torchrun across machines) falls back to the real time, as before the board.

The board lives in one shared-memory file per launch (`create`, made and removed by the
launcher), read and written with `mmap` and `struct` — not with tensors, which the paced meter
would count as compute. Layout: REGIONS × DEPTH × world slots of (key, paced seconds) float64.
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
import zlib

REGIONS = 1024  # hash buckets for groups and rank pairs
DEPTH = 256  # ops of one group (or pair) in flight before a slot is reused
SLOT = struct.Struct("dd")  # (key, paced issue time)


def size_bytes(world_size: int) -> int:
    return REGIONS * DEPTH * world_size * SLOT.size


def create(world_size: int) -> str:
    """A new, zeroed board file for a launch of `world_size` ranks; the launcher removes it."""
    folder = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    fd, path = tempfile.mkstemp(prefix=f"parlab-board-{os.getpid()}-", dir=folder)
    try:
        os.ftruncate(fd, size_bytes(world_size))  # sparse: only the pages written take memory
    finally:
        os.close(fd)
    return path


def remove(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def region(*parts) -> int:
    """The hash bucket of a group or a rank pair: the same on every rank (not Python's hash)."""
    return zlib.crc32(repr(parts).encode()) % REGIONS


def salt(*parts) -> int:
    """What tells apart two groups (or pairs) that share a region."""
    return zlib.crc32(repr(("salt",) + parts).encode())


def key(seq: int, salt_id: int) -> float:
    """A slot's key: which op wrote it (exact in a float64: < 2**53)."""
    return float((salt_id % (1 << 20)) * (1 << 32) + seq % (1 << 32) + 1)


class Board:
    """One rank's view of its launch's board."""

    def __init__(self, path: str, world_size: int):
        self.world_size = world_size
        with open(path, "r+b") as f:
            self.mm = mmap.mmap(f.fileno(), size_bytes(world_size))

    def _offset(self, region_id: int, seq: int, rank: int) -> int:
        return ((region_id * DEPTH + seq % DEPTH) * self.world_size + rank) * SLOT.size

    def post(self, region_id: int, seq: int, salt_id: int, rank: int, paced_t: float) -> None:
        """Rank `rank` issued op `seq` of `region_id` at paced time `paced_t`."""
        SLOT.pack_into(self.mm, self._offset(region_id, seq, rank), key(seq, salt_id), paced_t)

    def read(self, region_id: int, seq: int, salt_id: int, rank: int) -> float | None:
        """The paced issue time rank `rank` posted for op `seq` of `region_id`, None if absent."""
        found, paced_t = SLOT.unpack_from(self.mm, self._offset(region_id, seq, rank))
        return paced_t if found == key(seq, salt_id) else None


class Ticket:
    """The board entries one op waits on: its peers' (region, seq, salt, rank), and whether an
    absent entry means 'no constraint' (a send that gloo completed before the receive was posted)
    or 'unknown' (fall back to the real time)."""

    def __init__(self, board: Board, entries: list, optional: bool = False):
        self.board, self.entries, self.optional = board, entries, optional

    def peers_issued(self) -> float | None:
        """The latest paced issue time of the op's peers; None where one is unknown."""
        latest = float("-inf")
        for entry in self.entries:
            paced_t = self.board.read(*entry)
            if paced_t is None:
                if self.optional:
                    continue
                return None
            latest = max(latest, paced_t)
        return latest


class Posts:
    """One Comm's posts on its launch's board: the keys of its ops, and the entries each waits on.

    A Comm's identity — its name, its group's global ranks and how many Comms of that name and
    group this rank created before — is the same on every rank of the group, and so are the
    board region and salt derived from it: computed once here, per group (and per rank pair, the
    first time a pair exchanges a message), not once per op.
    """

    def __init__(self, board: Board | None, name: str, ranks, rank: int):
        self.board = board
        self.ranks = tuple(ranks)  # the group's global ranks, in group order
        self.me = self.ranks[rank]  # this rank's global rank
        identity = (name, self.ranks)
        _CREATED[identity] = _CREATED.get(identity, 0) + 1
        self.identity = identity + (_CREATED[identity],)
        self._group = None  # (region, salt) of the group's collectives, on the first post
        self._pairs: dict = {}  # (sender, receiver) -> (region, salt)
        self.collectives = 0  # collectives posted so far
        self.messages: dict = {}  # (op, peer global rank) -> messages posted so far

    def post(self, op: str, peers, paced_t: float) -> Ticket | None:
        """Post op `op` (issued at paced time `paced_t`) to the group ranks `peers`, or to the
        whole group for a collective; return the entries its completion waits on (None without
        a board)."""
        if self.board is None:
            return None
        if op in ("send", "recv"):
            (peer,) = peers
            other = self.ranks[peer]
            pair = (self.me, other) if op == "send" else (other, self.me)  # (sender, receiver)
            seq = self.messages.get((op, other), 0)
            self.messages[(op, other)] = seq + 1
            if pair not in self._pairs:
                self._pairs[pair] = (region("p2p", self.identity, pair),
                                     salt("p2p", self.identity, pair))
            region_id, salt_id = self._pairs[pair]
            self.board.post(region_id, seq, salt_id, self.me, paced_t)
            # gloo may complete a send before its receive is posted: then nothing waits for it
            return Ticket(self.board, [(region_id, seq, salt_id, other)], optional=op == "send")
        if self._group is None:
            self._group = (region(self.identity), salt(self.identity))
        region_id, salt_id = self._group
        seq = self.collectives
        self.collectives += 1
        self.board.post(region_id, seq, salt_id, self.me, paced_t)
        return Ticket(self.board, [(region_id, seq, salt_id, r) for r in self.ranks if r != self.me])


def completed_at(paced_asked: float, ready_at: float, ticket: Ticket | None, delivered: bool):
    """The paced time an op completes for its rank: the latest of when the rank asked for it,
    its own delivery and its peers' paced issue times — None (the real time) where a peer's time
    is unknown and the op did block on it."""
    peers = ticket.peers_issued() if ticket is not None else None
    if peers is None and not delivered:
        return None
    return max(paced_asked, ready_at, peers if peers is not None else float("-inf"))


_CREATED: dict = {}  # (name, global ranks) -> Comms created on this rank
_ATTACHED: dict = {}


def attach(path: str | None, world_size: int) -> Board | None:
    """This process's Board on `path` (mapped once), or None without one."""
    if not path:
        return None
    if path not in _ATTACHED:
        _ATTACHED[path] = Board(path, world_size)
    return _ATTACHED[path]
