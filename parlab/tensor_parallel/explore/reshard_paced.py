"""Chapter 03, section 9 on the paced clock: cross-mesh resharding between two DGX A100 nodes.

Zhuang et al., "On Optimizing the Communication of Model Parallelism" (AlpaComm, MLSys 2023, §3):
a tensor leaves one mesh (sharded one way) for another (sharded another way); load-balanced
broadcast sends each tile whole from its least-loaded holder, in an order searched so that no
NIC carries two transfers at once. Here the source mesh is node 0's GPUs [0, m), the destination
mesh node 1's [m, N); every message crosses HDR InfiniBand (one 200 Gb/s NIC per GPU, the DGX
A100's; `parlab.core.topology.nodes`), at Llama 3 8B's activation of one sequence (T × C =
8192 × 4096 bf16, 64 MiB), shapes-only (`parlab.core.shapes`: no data, the real byte counts), on
the paced A100 clock. A small real-data run first checks that every plan delivers the right
values on both runtimes.

What the paced clock prices (`parlab.core.virtual_link`): a rank's sends queue on its outgoing
link one after another; receives from several senders are not serialised. So

* **all at once** (`reshard.reshard`'s default runtime: every receive posted, every send issued):
  a source's load is what counts, and the send order changes nothing;
* **one at a time** (`ordered=True`, Alpa's runtime): each rank takes part in one transfer at a
  time, in plan order, a transfer starting when both ends reach it — so a destination that two
  sources reach together takes them one after the other: AlpaComm's receiver NIC, emerging from
  the runtime. Order and load balance both change the paced time.

Beside each run, AlpaComm's cost model (`reshard.scheduled_seconds`: the plan in its order on
per-GPU NICs, each tile α + bytes/β) and that model with the runtime's own costs added
(`protocol_seconds`: each hop's 4-byte ready token, one α per chunk, a chain's fill).
"""

from __future__ import annotations

import torch

from parlab.core import cost
from parlab.tensor_parallel import alpacomm, reshard

ACCELERATOR, INTRA, INTER = "A100", "NVLink", "HDR-IB"
SHAPE = (8192, 4096)  # Llama 3 8B: T = 8192 tokens × C = 4096 (Meta 2024, Table 3), bf16
CHECK_SHAPE = (48, 40)  # the real-data check: divides among 2..4 ranks, several chunks per tile
RUNTIMES = ("all-at-once", "one-at-a-time")
PAIRS = (("row", "col"), ("replicated", "row"), ("row", "replicated"),
         ("replicated", "replicated"))
CHUNKS = 8  # `reshard.reshard`'s chunks per tile
TOKEN_BYTES = 4  # the one-at-a-time runtime's "ready" token: one fp32 element


def cluster(world_size: int, inter: str = INTER):
    """Two nodes of world_size/2 A100s: NVLink 3 inside, `inter` between (real links of
    `parlab.core.link.REAL`; HDR InfiniBand by default)."""
    from parlab.core import topology
    from parlab.core.link import real

    return topology.nodes(world_size, world_size // 2, intra=real(INTRA, ACCELERATOR),
                          inter=real(inter, ACCELERATOR))


def _meshes(world_size: int):
    m = world_size // 2
    return list(range(m)), list(range(m, world_size))


def _fresh_clock(tx, rx) -> None:
    """Every measurement from virtual time 0 with idle links: the same plan then gives the same
    bits (a later start would round its sums differently). Called right after a barrier, when
    every rank has waited for all of the previous measurement's messages."""
    from parlab.core.pacer import Pacer

    tx.timeline.pacer = Pacer(tx.timeline.pacer.clock)
    for comm in (tx, rx):
        comm.idle_port()


def _run(tx, rx, local, shape, pair, src, dst, method, ordered):
    """(this rank's result, its paced seconds from a common start to its last byte)."""
    tx.barrier(phase="reshard-sync")  # every rank is done with the previous plan
    _fresh_clock(tx, rx)
    tx.barrier(phase="reshard-sync")  # every rank starts at one virtual time
    t0 = tx.timeline.now()
    out = reshard.reshard(tx, rx, local, shape, pair[0], src, pair[1], dst, method,
                          chunks=CHUNKS, ordered=ordered)
    return out, tx.timeline.now() - t0


def worker(rank, world_size, shape, pairs, methods, repeats, check_shape, dtype, inter):
    """One rank: the real-data check at `check_shape`, then every pair × method × runtime
    `repeats` times shapes-only at `shape`; returns {"ok": bool, (pair, method, runtime):
    [paced seconds per repeat]}."""
    from parlab.core.clock import Clock
    from parlab.core.comm import Comm
    from parlab.core.link import ACCELERATORS
    from parlab.core.pacer import Pacer
    from parlab.core.shapes import shapes

    tx = Comm(link=cluster(world_size, inter))
    tx.timeline.pacer = Pacer(Clock(ACCELERATORS[ACCELERATOR]))
    rx = Comm(ledger=tx.ledger, timeline=tx.timeline, link=tx.link, name="world-rx")
    rx.posts = tx.posts  # one identity on the paced board: rx receives what tx's peers sent
    src, dst = _meshes(world_size)
    full = reshard.full_tensor(check_shape)
    ok = True
    for pair in pairs:
        for method in methods:
            for ordered in (False, True):
                local = full
                if rank in src:
                    r0, r1, c0, c1 = reshard.region(check_shape, pair[0], rank, len(src))
                    local = full[r0:r1, c0:c1].clone()  # (rows, cols) of this source's region
                out, _ = _run(tx, rx, local, check_shape, pair, src, dst, method, ordered)
                if rank in dst:
                    r0, r1, c0, c1 = reshard.region(check_shape, pair[1], rank - len(src), len(dst))
                    ok = ok and torch.equal(out, full[r0:r1, c0:c1])
    times = {"ok": ok}
    with shapes():  # no data from here on: the real byte counts, priced by the clock
        for pair in pairs:
            local = torch.empty(1, 1, dtype=dtype)
            if rank in src:
                r0, r1, c0, c1 = reshard.region(shape, pair[0], rank, len(src))
                local = torch.empty(r1 - r0, c1 - c0, dtype=dtype)  # (rows, cols), shapes only
            for method in methods:
                for runtime in RUNTIMES:
                    times[(pair, method, runtime)] = [
                        _run(tx, rx, local, shape, pair, src, dst, method,
                             runtime == "one-at-a-time")[1] for _ in range(repeats)]
    tx.close()
    rx.close()
    return times


def _pieces(t: reshard.Transfer, itemsize: int) -> tuple[int, int]:
    """(chunks, bytes of the largest chunk) of a tile as `reshard.reshard` cuts it."""
    pieces = min(CHUNKS, t.r1 - t.r0)
    rows = max(b - a for a, b in cost.shard_bounds(t.r1 - t.r0, pieces))
    return pieces, rows * (t.c1 - t.c0) * itemsize


def _chain_seconds(t, links, itemsize: int) -> float:
    """A tile's time down its chain, chunked: every chunk through the slowest hop, plus one chunk
    on each other hop (the pipeline's fill); each chunk α + bytes/β of its hop's link."""
    pieces, chunk = _pieces(t, itemsize)
    chain = (t.src,) + tuple(t.dsts)
    per_hop = [links(a, b).cost(chunk) for a, b in zip(chain[:-1], chain[1:])]
    first = links(t.src, t.dsts[0])
    slowest = pieces * first.latency_s + t.numel * itemsize / first.bandwidth_Bps
    return max([slowest] + [pieces * c for c in per_hop[1:]]) + sum(per_hop) - per_hop[0] \
        if len(per_hop) > 1 else slowest


def protocol_seconds(transfers, links, itemsize: int) -> float:
    """AlpaComm's NIC model (`alpacomm.makespan`, one GPU one NIC) in the plan's order, each
    tile's time the one-at-a-time runtime's: a 4-byte ready token per hop, then the chunks down
    the chain (`_chain_seconds`); `links(a, b)` the Link between two ranks."""
    tasks = []
    for t in transfers:
        chain = (t.src,) + tuple(t.dsts)
        tokens = sum(links(a, b).cost(TOKEN_BYTES) for a, b in zip(chain[:-1], chain[1:]))
        tasks.append(alpacomm.Task(t.src, t.dsts, tokens + _chain_seconds(t, links, itemsize)))
    return alpacomm.makespan(tasks, range(len(tasks)))


def queue_seconds(transfers, links, itemsize: int) -> float:
    """The all-at-once runtime replayed by the paced clock's rules (`parlab.core.virtual_link`):
    a rank's sends queue on its outgoing link in plan order, each chunk α + bytes/β of its hop;
    receives do not queue; a chain's middle rank forwards a chunk once it has arrived and its
    link is free. The finish of the last chunk to arrive."""
    free: dict = {}  # rank -> when its outgoing link is free
    now: dict = {}  # rank -> the latest arrival it has waited for (a forwarder's clock)
    end = 0.0
    for t in transfers:  # plan order: every rank's sends in its program's order
        pieces = min(CHUNKS, t.r1 - t.r0)
        sizes = [(b - a) * (t.c1 - t.c0) * itemsize
                 for a, b in cost.shard_bounds(t.r1 - t.r0, pieces)]
        arrivals = [0.0] * pieces  # at the source: every chunk is there from the start
        chain = (t.src,) + tuple(t.dsts)
        for a, b in zip(chain[:-1], chain[1:]):
            link, out = links(a, b), []
            for nbytes, arrived in zip(sizes, arrivals):
                now[a] = max(now.get(a, 0.0), arrived)  # a forwarder waits for the chunk
                ready = max(now[a], free.get(a, 0.0))
                free[a] = ready + link.cost(nbytes)
                out.append(free[a])
            arrivals = out
        end = max([end] + arrivals)
    return end


def run(world_size: int = 4, inter: str = INTER, shape=SHAPE, pairs=PAIRS,
        methods=reshard.METHODS, repeats: int = 2, check_shape=CHECK_SHAPE,
        dtype=torch.bfloat16) -> dict:
    """Launch `worker`; per (pair, method, runtime) the paced makespan (the slowest rank) of
    every repeat, beside the models; {"ok", "rows", "world_size", "shape", "itemsize"}."""
    from parlab.core.launch import launch
    from parlab.core.link import real

    outs = launch(worker, world_size, tuple(shape), [tuple(p) for p in pairs], list(methods),
                  repeats, tuple(check_shape), dtype, inter, timeout=600.0)
    link = real(inter, ACCELERATOR)
    topo = cluster(world_size, inter)
    links = lambda a, b: topo.link_for([a, b])  # noqa: E731
    itemsize = torch.empty(0, dtype=dtype).element_size()
    src, dst = _meshes(world_size)
    rows = []
    for pair in pairs:
        for method in methods:
            plan = reshard.plan(shape, pair[0], src, pair[1], dst, method)
            sent = reshard.traffic(plan)
            for runtime in RUNTIMES:
                runs = [max(o[(tuple(pair), method, runtime)][k] for o in outs)
                        for k in range(repeats)]
                row = {"pair": f"{pair[0]}→{pair[1]}", "method": method, "runtime": runtime,
                       "paced_ms": runs[0] * 1e3, "repeats_equal": len(set(runs)) == 1,
                       "busiest_source_MB": max(sent.get(s, {}).get("sent", 0) for s in src)
                       * itemsize / 1e6}
                if runtime == "one-at-a-time":
                    row["alpacomm_model_ms"] = reshard.scheduled_seconds(
                        plan, link.latency_s, link.bandwidth_Bps, itemsize) * 1e3
                    row["model_ms"] = protocol_seconds(plan, links, itemsize) * 1e3
                else:
                    row["model_ms"] = queue_seconds(plan, links, itemsize) * 1e3
                rows.append(row)
    for row in rows:  # speed-up over send-recv on the same pair and runtime
        base = next(r for r in rows if (r["pair"], r["runtime"], r["method"])
                    == (row["pair"], row["runtime"], "send-recv"))
        row["speedup"] = base["paced_ms"] / row["paced_ms"]
    return {"ok": all(o["ok"] for o in outs), "rows": rows, "world_size": world_size,
            "shape": tuple(shape), "itemsize": itemsize, "repeats": repeats, "inter": link,
            "cluster": topo.name, "check_shape": tuple(check_shape)}
