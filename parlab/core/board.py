"""The board: each rank's virtual ready time of every op, shared by the ranks of a launch.

On a paced clock (`parlab.core.clock`) an op with peers completes at a time that depends on
theirs, so every rank posts, when it issues an op, the virtual time its link could start it
under the op's key, and when it waits reads the posts it needs (a collective every peer's, a
receive its sender's). A rank really blocks until those posts are there, at no virtual cost:
conservative synchronisation (Chandy & Misra, "Distributed Simulation: A Case Study in Design and
Verification of Distributed Programs", IEEE TSE 1979). One shared-memory file per launch
(`create`), read with `mmap` and `struct` so the paced meter counts nothing; REGIONS × DEPTH ×
world slots of (key, virtual seconds) float64. Without a board (torchrun across machines) a rank
prices each op from its own post. The keys and the waits: docs/core.md, `parlab.core.board`.
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
import time
import zlib

REGIONS = 1024  # hash buckets for groups and rank pairs
DEPTH = 1024  # ops of one group (or pair) in flight before a slot is reused
SLOT = struct.Struct("dd")  # (key, virtual ready time)
_FLOAT = struct.Struct("d")


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

    def post(self, region_id: int, seq: int, salt_id: int, rank: int, t: float) -> None:
        """Rank `rank` posted op `seq` of `region_id`, ready at virtual time `t`: the time is
        written before the key, so a reader that sees the key sees its time."""
        offset = self._offset(region_id, seq, rank)
        _FLOAT.pack_into(self.mm, offset + 8, t)
        _FLOAT.pack_into(self.mm, offset, key(seq, salt_id))

    def read(self, region_id: int, seq: int, salt_id: int, rank: int) -> float | None:
        """The virtual time rank `rank` posted for op `seq` of `region_id`, None if absent.

        The key is read before the time, and again after it: one read of both could take the
        time before the writer wrote it and the key after (a copy reads its bytes in no stated
        order), and a run would then price an op from a peer's stale slot."""
        offset = self._offset(region_id, seq, rank)
        wanted = key(seq, salt_id)
        if _FLOAT.unpack_from(self.mm, offset)[0] != wanted:
            return None
        (t,) = _FLOAT.unpack_from(self.mm, offset + 8)
        return t if _FLOAT.unpack_from(self.mm, offset)[0] == wanted else None


class BoardTimeout(RuntimeError):
    """A peer never posted an op this rank waits for (it died, or the ranks issue different ops)."""


class Ticket:
    """The board entries one op's completion needs: (region, seq, salt, rank) of each peer."""

    def __init__(self, board: Board, entries: list, what: str):
        self.board, self.entries, self.what = board, entries, what

    def latest(self, timeout: float) -> float:
        """The latest virtual ready time the op's peers posted (-inf for none), blocking — in real
        time only — until every one of them has posted; BoardTimeout after `timeout` seconds."""
        latest, waiting = float("-inf"), list(self.entries)
        deadline, pause = None, 20e-6
        while waiting:
            still = []
            for entry in waiting:
                t = self.board.read(*entry)
                if t is None:
                    still.append(entry)
                else:
                    latest = max(latest, t)
            waiting = still
            if waiting:
                now = time.monotonic()
                deadline = deadline if deadline is not None else now + timeout
                if now > deadline:
                    ranks = sorted(entry[3] for entry in waiting)
                    raise BoardTimeout(f"{self.what}: rank(s) {ranks} never posted it on the board "
                                       f"within {timeout:g} s (a peer died, or the ranks issue "
                                       "different ops)")
                time.sleep(pause)
                pause = min(2 * pause, 2e-3)
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

    def _pair(self, pair) -> tuple[int, int]:
        if pair not in self._pairs:
            self._pairs[pair] = (region("p2p", self.identity, pair), salt("p2p", self.identity, pair))
        return self._pairs[pair]

    def post(self, op: str, peers, ready: float, needs=None) -> Ticket | None:
        """Post op `op` (to group rank `peers`' one peer for a message), ready at virtual time
        `ready`; return the entries its completion needs: a receive its sender's, a send none, a
        collective those of the group ranks `needs` (default: every other rank). None without a
        board."""
        if self.board is None:
            return None
        if op in ("send", "recv"):
            (peer,) = peers
            other = self.ranks[peer]
            pair = (self.me, other) if op == "send" else (other, self.me)  # (sender, receiver)
            seq = self.messages.get((op, other), 0)
            self.messages[(op, other)] = seq + 1
            region_id, salt_id = self._pair(pair)
            if op == "send":
                self.board.post(region_id, seq, salt_id, self.me, ready)
                return Ticket(self.board, [], f"send #{seq} {self.me}->{other}")
            return Ticket(self.board, [(region_id, seq, salt_id, other)],
                          f"recv #{seq} {other}->{self.me}")
        if self._group is None:
            self._group = (region(self.identity), salt(self.identity))
        region_id, salt_id = self._group
        seq = self.collectives
        self.collectives += 1
        self.board.post(region_id, seq, salt_id, self.me, ready)
        others = ([self.ranks[r] for r in needs] if needs is not None
                  else [r for r in self.ranks if r != self.me])
        return Ticket(self.board, [(region_id, seq, salt_id, r) for r in others if r != self.me],
                      f"{op} #{seq} of group {self.identity[0]!r} {list(self.ranks)}")


_CREATED: dict = {}  # (name, global ranks) -> Comms created on this rank
_ATTACHED: dict = {}


def attach(path: str | None, world_size: int) -> Board | None:
    """This process's Board on `path` (mapped once), or None without one."""
    if not path:
        return None
    if path not in _ATTACHED:
        _ATTACHED[path] = Board(path, world_size)
    return _ATTACHED[path]
