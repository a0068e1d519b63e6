"""Cross-mesh resharding: move a 2-D tensor from one group of ranks, sharded one way, to another
group sharded another way (between pipeline stages whose layouts differ).

Zhuang et al., "On Optimizing the Communication of Model Parallelism" (AlpaComm, MLSys 2023,
arXiv 2211.05322, §3): cut the tensor into the *cells* (the paper's tiles) where a source rank's
region meets a destination rank's; four ways to move them through `Comm` send / recv:
"send-recv" (each destination from the first holder), "broadcast" (one chunked chain per cell),
"even-split" (ours: a cell cut across its holders; "balanced" is its old name) and "alpacomm" (the
paper's load-balanced broadcast in a searched order, `parlab.tensor_parallel.alpacomm`).
`predicted_seconds` is the α-β model of a plan, `scheduled_seconds` the plan on AlpaComm's
per-host NIC model; `ordered=True` runs transfers one at a time (Alpa's runtime).

Simplification: NIC sharing is per rank (each process its own host). Details of the methods and
the two runtimes: docs/tensor_parallel.md, `parlab.tensor_parallel.reshard`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from parlab.core import cost
from parlab.tensor_parallel import alpacomm

LAYOUTS = ("replicated", "row", "col")
METHODS = ("send-recv", "broadcast", "even-split", "alpacomm")
ALIASES = {"balanced": "even-split"}  # the even split's old name, still accepted


def region(shape, layout: str, index: int, parts: int) -> tuple[int, int, int, int]:
    """(row0, row1, col0, col1) of member `index` of `parts` ranks holding `shape` in `layout`."""
    rows, cols = shape
    if layout == "replicated":
        return 0, rows, 0, cols
    if layout == "row":
        r0, r1 = cost.shard_bounds(rows, parts)[index]
        return r0, r1, 0, cols
    if layout == "col":
        c0, c1 = cost.shard_bounds(cols, parts)[index]
        return 0, rows, c0, c1
    raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}")


@dataclass(frozen=True)
class Transfer:
    """Rows [r0, r1) × cols [c0, c1) move from rank `src` along the chain `dsts` (comm ranks)."""

    r0: int
    r1: int
    c0: int
    c1: int
    src: int
    dsts: tuple

    @property
    def numel(self) -> int:
        return (self.r1 - self.r0) * (self.c1 - self.c0)


def validate(shape, src_layout, src_ranks, dst_layout, dst_ranks, method) -> None:
    """ValueError naming every bad argument, before anything moves."""
    problems = []
    if len(shape) != 2 or min(shape) < 1:
        problems.append(f"shape={tuple(shape)} must be 2-D with sizes >= 1")
    for name, layout in (("src_layout", src_layout), ("dst_layout", dst_layout)):
        if layout not in LAYOUTS:
            problems.append(f"{name}={layout!r} must be one of {LAYOUTS}")
    if method not in METHODS and method not in ALIASES:
        problems.append(f"method={method!r} must be one of {METHODS}")
    if set(src_ranks) & set(dst_ranks):
        problems.append(f"src_ranks={list(src_ranks)} and dst_ranks={list(dst_ranks)} overlap")
    if not src_ranks or not dst_ranks:
        problems.append("src_ranks and dst_ranks must not be empty")
    if problems:
        raise ValueError("; ".join(problems))


def plan(shape, src_layout, src_ranks, dst_layout, dst_ranks, method, hosts=None) -> list[Transfer]:
    """Every transfer of `method`, in one order all ranks agree on. `hosts` (rank -> host, e.g.
    `alpacomm.host_map(topology, ranks)`): the NICs "alpacomm" orders its sends for; default one
    host per rank."""
    validate(shape, src_layout, src_ranks, dst_layout, dst_ranks, method)
    method = ALIASES.get(method, method)
    key = (tuple(shape), src_layout, tuple(src_ranks), dst_layout, tuple(dst_ranks), method,
           tuple(sorted((hosts or {}).items(), key=str)))
    if key not in _PLANS:
        _PLANS[key] = _plan(*key[:6], hosts)
    return list(_PLANS[key])


_PLANS: dict = {}  # a pipeline boundary plans the same message every micro-batch


def _plan(shape, src_layout, src_ranks, dst_layout, dst_ranks, method, hosts) -> list[Transfer]:
    src = [region(shape, src_layout, i, len(src_ranks)) for i in range(len(src_ranks))]
    dst = [region(shape, dst_layout, i, len(dst_ranks)) for i in range(len(dst_ranks))]
    row_cuts = sorted({b for r in src + dst for b in r[:2]})
    col_cuts = sorted({b for r in src + dst for b in r[2:]})
    inside = lambda cell, reg: reg[0] <= cell[0] and cell[1] <= reg[1] and reg[2] <= cell[2] \
        and cell[3] <= reg[3]  # noqa: E731
    load = dict.fromkeys(src_ranks, 0)
    transfers, tiles = [], []
    for r0, r1 in zip(row_cuts[:-1], row_cuts[1:]):
        for c0, c1 in zip(col_cuts[:-1], col_cuts[1:]):
            cell = (r0, r1, c0, c1)
            holders = [s for s, reg in zip(src_ranks, src) if inside(cell, reg)]
            needers = tuple(d for d, reg in zip(dst_ranks, dst) if inside(cell, reg))
            if not needers:
                continue
            if method == "send-recv":
                transfers += [Transfer(*cell, holders[0], (d,)) for d in needers]
            elif method == "broadcast":
                transfers.append(Transfer(*cell, holders[0], needers))
            elif method == "alpacomm":  # whole tiles: senders and order chosen below
                tiles.append((cell, holders, needers))
            else:  # even-split: one piece per holder, each to the least-loaded holder
                for p0, p1 in cost.shard_bounds(r1 - r0, len(holders)):
                    if p1 == p0:
                        continue
                    sender = min(holders, key=lambda s: (load[s], holders.index(s)))
                    piece = Transfer(r0 + p0, r0 + p1, c0, c1, sender, needers)
                    load[sender] += piece.numel
                    transfers.append(piece)
    if method == "alpacomm":
        transfers = _alpacomm(tiles, hosts)
    return transfers


def _alpacomm(tiles, hosts) -> list[Transfer]:
    """Whole tiles to the least-loaded holder, in the order the DFS finds shortest (durations in
    elements: with α = 0 the order that is shortest in elements is shortest at any β)."""
    size = lambda c: (c[1] - c[0]) * (c[3] - c[2])  # noqa: E731
    senders = alpacomm.assign_senders([(size(c), h) for c, h, _ in tiles])
    transfers = [Transfer(*c, s, n) for (c, _, n), s in zip(tiles, senders)]
    tasks = [alpacomm.Task(t.src, t.dsts, float(t.numel)) for t in transfers]
    order, _ = alpacomm.search_order(tasks, hosts)
    return [transfers[i] for i in order]


def traffic(transfers: list[Transfer], chunks: int = 8) -> dict[int, dict]:
    """Per comm rank: elements sent and received, and messages each way, of a plan."""
    out: dict[int, dict] = {}

    def add(rank, key, value):
        out.setdefault(rank, {"sent": 0, "recv": 0, "msgs_sent": 0, "msgs_recv": 0})[key] += value

    for t in transfers:
        pieces = min(chunks, t.r1 - t.r0)
        chain = (t.src,) + t.dsts
        for a, b in zip(chain[:-1], chain[1:]):
            add(a, "sent", t.numel)
            add(a, "msgs_sent", pieces)
            add(b, "recv", t.numel)
            add(b, "msgs_recv", pieces)
    return out


def predicted_seconds(transfers, alpha: float, beta: float, itemsize: int = 4, chunks=8) -> float:
    """α-β time of a plan: the busiest rank's direction, plus one chunk per extra chain hop."""
    busiest = 0.0
    for t in traffic(transfers, chunks).values():
        busiest = max(busiest, t["msgs_sent"] * alpha + t["sent"] * itemsize / beta,
                      t["msgs_recv"] * alpha + t["recv"] * itemsize / beta)
    fill = max((len(t.dsts) - 1) * (alpha + t.numel / min(chunks, t.r1 - t.r0) * itemsize / beta)
               for t in transfers) if transfers else 0.0
    return busiest + fill


def scheduled_seconds(transfers, alpha: float, beta: float, itemsize: int = 4, hosts=None) -> float:
    """The per-host NIC model's time of a plan run in its order (`alpacomm.makespan`): each
    transfer α + bytes/β, holding its sender's out-NIC and its receivers' in-NICs."""
    tasks = [alpacomm.Task(t.src, t.dsts, alpha + t.numel * itemsize / beta) for t in transfers]
    return alpacomm.makespan(tasks, range(len(tasks)), hosts)


def reshard(tx, rx, local, shape, src_layout, src_ranks, dst_layout, dst_ranks,
            method="broadcast", chunks: int = 8, phase: str = "reshard", ordered: bool = False):
    """Run the plan on this rank; return its destination region (or None if not a destination).

    tx, rx: two Comms on the same group (send side, receive side); `local` is this rank's
    source region (ignored elsewhere); ranks are ranks of that group. `ordered=False`: every
    receive posted at once and every send issued at once (the links queue them); `ordered=True`:
    the runtime AlpaComm's order is written for (`_run_ordered`)."""
    me = tx.rank
    transfers = plan(shape, src_layout, src_ranks, dst_layout, dst_ranks, method)
    mine = region(shape, src_layout, src_ranks.index(me), len(src_ranks)) if me in src_ranks \
        else None
    target = region(shape, dst_layout, dst_ranks.index(me), len(dst_ranks)) if me in dst_ranks \
        else None
    out = local.new_empty(target[1] - target[0], target[3] - target[2]) if target else None
    if ordered:
        _run_ordered(tx, rx, local, transfers, mine, target, out, chunks, phase)
        return out
    # post every receive first (plan order), so a rank's receiving link never idles; then
    # send and forward in plan order, so every pair of ranks sees its messages in one order
    arrivals = []
    for t in transfers:
        if me in t.dsts:
            hop = t.dsts.index(me)
            prev = t.src if hop == 0 else t.dsts[hop - 1]
            cuts = cost.shard_bounds(t.r1 - t.r0, min(chunks, t.r1 - t.r0))
            bufs = [local.new_empty(b - a, t.c1 - t.c0) for a, b in cuts]  # (chunk rows, cols)
            arrivals.append((t, cuts, bufs, [rx.irecv(buf, prev, phase=phase) for buf in bufs]))
    incoming = {id(a[0]): a for a in arrivals}
    pending = []
    for t in transfers:
        if t.src == me:
            piece = local[t.r0 - mine[0]:t.r1 - mine[0], t.c0 - mine[2]:t.c1 - mine[2]]
            for a, b in cost.shard_bounds(t.r1 - t.r0, min(chunks, t.r1 - t.r0)):
                pending.append(tx.isend(piece[a:b].contiguous(), t.dsts[0], phase=phase))  # (rows, cols)
        elif me in t.dsts[:-1]:  # forward each chunk down the chain as soon as it is in
            _, _, bufs, handles = incoming[id(t)]
            for buf, handle in zip(bufs, handles):
                handle.wait()
                pending.append(tx.isend(buf, t.dsts[t.dsts.index(me) + 1], phase=phase))  # (chunk, cols)
    for handle in pending:
        handle.wait()
    for t, cuts, bufs, handles in arrivals:
        for (a, b), buf, handle in zip(cuts, bufs, handles):
            handle.wait()
            out[t.r0 - target[0] + a:t.r0 - target[0] + b, t.c0 - target[2]:t.c1 - target[2]] = buf
    return out


def _run_ordered(tx, rx, local, transfers, mine, target, out, chunks, phase) -> None:
    """Each rank takes part in its transfers one at a time, in plan order, and a hop starts only
    when both its ends have reached it — as Alpa's runtime runs a host's send / receive /
    broadcast instructions one after another, the setting in which AlpaComm searches the order.
    The handshake: the receiving end of a hop sends its sender a 1-element "ready" token (phase
    `phase + "-ready"`, 4 bytes on the ledger, not counted in `phase`) once the rest of its chain
    is ready; the sender then sends the tile's chunks, and a chain's middle rank forwards each
    chunk as it arrives. So two sources
    that reach one destination together wait for each other, as on one NIC. Simplification: the
    token is a real message on the emulated link (it pays α)."""
    me = tx.rank
    token = local.new_zeros(1)
    for t in transfers:
        chain = (t.src,) + t.dsts
        if me not in chain:
            continue
        pos = chain.index(me)
        cuts = cost.shard_bounds(t.r1 - t.r0, min(chunks, t.r1 - t.r0))
        handles, bufs = [], []
        if pos < len(chain) - 1:  # the next rank is ready (tokens run from the chain's end back)
            rx.recv(local.new_zeros(1), chain[pos + 1], phase=phase + "-ready")
        if pos > 0:  # ready to receive: tell the previous rank, then post every chunk's receive
            tx.send(token, chain[pos - 1], phase=phase + "-ready")
            bufs = [local.new_empty(b - a, t.c1 - t.c0) for a, b in cuts]  # (chunk rows, cols)
            handles = [rx.irecv(buf, chain[pos - 1], phase=phase) for buf in bufs]
        sends = []
        if pos < len(chain) - 1:
            if pos == 0:
                piece = local[t.r0 - mine[0]:t.r1 - mine[0], t.c0 - mine[2]:t.c1 - mine[2]]
                bufs = [piece[a:b].contiguous() for a, b in cuts]  # (chunk rows, cols)
            for i, buf in enumerate(bufs):
                if handles:
                    handles[i].wait()
                sends.append(tx.isend(buf, chain[pos + 1], phase=phase))
        for handle in sends + handles:
            handle.wait()
        if pos > 0:
            for (a, b), buf in zip(cuts, bufs):
                out[t.r0 - target[0] + a:t.r0 - target[0] + b,
                    t.c0 - target[2]:t.c1 - target[2]] = buf


def timed_reshard(tx, rx, local, shape, src_layout, src_ranks, dst_layout, dst_ranks, method,
                  chunks=8, ordered: bool = False):
    """(result, seconds on this rank from a common start to its last byte)."""
    tx.barrier(phase="reshard-sync")
    t0 = time.perf_counter()
    result = reshard(tx, rx, local, shape, src_layout, src_ranks, dst_layout, dst_ranks, method,
                     chunks, ordered=ordered)
    return result, time.perf_counter() - t0


def full_tensor(shape, seed: int = 0) -> torch.Tensor:
    """The tensor every test and benchmark reshards (deterministic)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def source_elements(shape, src_layout: str, m: int, dst_layout: str, n: int, method: str,
                    index: int) -> int:
    """Closed form: elements source rank `index` of m sends to n destinations (R divisible by
    m·n). send-recv sends a cell once per destination needing it; broadcast once per cell;
    even-split cuts a replicated source's cells evenly over its m replicas; alpacomm gives each of
    the k cells of a replicated source whole to the least-loaded replica: replica i sends cells
    i, i+m, ... (k = n for row / col destinations, 1 for replicated ones)."""
    method = ALIASES.get(method, method)
    R, C = shape
    mine = R // m * C if src_layout == "row" else R * C  # elements this source holds
    copies = n if (dst_layout == "replicated" and method == "send-recv") else 1
    if src_layout == "row":  # every cell has exactly one holder
        return mine * copies
    if src_layout == "replicated":
        if method == "even-split":
            return R * C // m
        if method == "alpacomm":
            k = 1 if dst_layout == "replicated" else n
            return R * C // k * len(range(index, k, m))
        return R * C * copies if index == 0 else 0  # the first holder sends everything
    raise ValueError(f"src_layout={src_layout!r}: closed form given for row and replicated")
