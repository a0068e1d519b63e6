"""Chapter 00 runs the two-level all-reduce (`parlab.core.two_level`) on paced A100s in two nodes.

N = 8 = 2 nodes × 4 GPUs (`parlab.core.topology.nodes`): NVLink 3 inside a node, HDR InfiniBand
between (one 200 Gb/s NIC per GPU), the real links of `parlab.core.link.REAL`. In one launch every
rank

* checks the result on real tensors: the two-level all-reduce of integer-valued float32 (every
  order of summation gives the same bits) equals torch's own all-reduce (gloo, through `Comm`);
* times, on the paced A100 clock, the two-level all-reduce, one flat ring and one binary tree
  over all 8 ranks (whose every round waits for its slowest hop, InfiniBand) and NCCL's
  pipelined double binary tree (`parlab.core.double_tree`: every chunk its own message, priced on
  its pair's link) at sizes to 1 GiB, shapes-only
  (`parlab.core.shapes`: no data, the real byte counts, priced by the clock);
* returns its ledger's bytes, which must equal the closed form `two_level.traffic` exactly.

`show` prints the run beside the prices `parlab.core.explore.real_link` already computes
(`two_level`, `flat_ring`: Thakur, Rabenseifner & Gropp, IJHPCA 2005) with computed verdicts;
`parlab.core.explore.double_tree_show` prints the double tree's rows.
"""

from __future__ import annotations

import math
import warnings

import torch

from parlab.core import double_tree, topology, two_level
from parlab.core.clock import Clock
from parlab.core.comm import Comm
from parlab.core.explore import real_link as rl
from parlab.core.explore.real_link_show import _size
from parlab.core.launch import launch
from parlab.core.link import ACCELERATORS, real
from parlab.core.pacer import Pacer
from parlab.core.shapes import shapes

PER_NODE, NODES = 4, 2
SIZES = (4 << 10, 1 << 20, 64 << 20, 1 << 30)  # bytes of float32, priced shapes-only
KINDS = ("two", "flat", "tree", "dtree")  # two-level, flat ring, binary tree, double tree
CHECK_NUMEL = 4099  # the real check: a length 4 does not divide (shards 1025, 1025, 1025, 1024)


def cluster(world_size: int, per_node: int = PER_NODE) -> topology.Topology:
    """Nodes of `per_node` A100s: NVLink 3 inside, HDR InfiniBand between (real, undilated)."""
    return topology.nodes(world_size, per_node, intra=real(rl.INTRA, rl.ACCELERATOR),
                          inter=real(rl.INTER, rl.ACCELERATOR))


def _sent(comm, since: int) -> int:
    """Bytes this rank sent in the ledger records from index `since` on."""
    return sum(r["bytes_sent"] for r in comm.ledger.records[since:])


def worker(rank: int, world_size: int, per_node: int, sizes: list[int], check_numel: int) -> dict:
    """One rank: the real check, then each size's two-level and flat-ring all-reduce on the paced
    A100 clock (shapes-only); {"equal", "check_bytes", (size, "two"|"flat"): (seconds, bytes)}."""
    comm = Comm(link=cluster(world_size, per_node))
    comm.timeline.pacer = Pacer(Clock(ACCELERATORS[rl.ACCELERATOR]))
    node, rail = two_level.split(comm, per_node)
    x = (torch.arange(check_numel) % 97 + 100 * rank).float()  # (S,) integer-valued float32
    mine, ref = x.clone(), x.clone()
    since = len(comm.ledger.records)
    two_level.all_reduce(node, rail, mine)
    out = {"check_bytes": _sent(comm, since)}
    comm.all_reduce(ref, algo="gloo")  # torch's all_reduce (sum), recorded like every op
    out["equal"] = torch.equal(mine, ref)
    trees = double_tree.split(comm)
    mine, since = x.clone(), len(comm.ledger.records)
    double_tree.all_reduce(trees, mine, 3)  # 3 chunks per tree
    out["dtree_equal"], out["dtree_check_bytes"] = torch.equal(mine, ref), _sent(comm, since)
    with shapes():  # no data from here on: the real byte counts, priced by the clock
        for nbytes in sizes:
            for kind in KINDS:
                tensor = torch.empty(nbytes // 4)  # (S/4,) float32, shapes only
                comm.barrier()  # every rank starts at the same virtual time
                since, t0 = len(comm.ledger.records), comm.timeline.now()
                if kind == "two":
                    two_level.all_reduce(node, rail, tensor)
                elif kind == "dtree":
                    double_tree.all_reduce(trees, tensor, dtree_chunks(nbytes, world_size))
                else:
                    with warnings.catch_warnings():  # the tree reads a fake tensor's data_ptr
                        warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
                        comm.all_reduce(tensor, algo="ring" if kind == "flat" else "tree")
                out[(nbytes, kind)] = (comm.timeline.now() - t0, _sent(comm, since))
    for c in (node, rail, *trees, comm):
        c.close()
    return out


def dtree_chunks(nbytes: int, n: int) -> int:
    """Chunks per tree of the double tree: the best k of its closed form on InfiniBand (every
    tree crosses the nodes)."""
    alpha, beta = rl._ab(rl.INTER)
    return double_tree.chunk_count(nbytes, n, alpha, beta)


def run(world_size: int = PER_NODE * NODES, per_node: int = PER_NODE, sizes=SIZES,
        check_numel: int = CHECK_NUMEL) -> list[dict]:
    """Launch `worker` on `world_size` ranks; the ranks' results in rank order."""
    return launch(worker, world_size, per_node, list(sizes), check_numel, timeout=600.0)


def rows(ranks: list[dict], per_node: int = PER_NODE, sizes=SIZES) -> list[dict]:
    """Per size: the op's paced time (its slowest rank) for two-level and flat ring, beside their
    α-β prices (`real_link.two_level`, `real_link.flat_ring`), and whether every rank's ledger
    bytes equal the closed forms."""
    n = len(ranks)
    nodes = n // per_node
    out = []
    for nbytes in sizes:
        numel = nbytes // 4
        two = max(r[(nbytes, "two")][0] for r in ranks)
        flat = max(r[(nbytes, "flat")][0] for r in ranks)
        bytes_ok = all(r[(nbytes, "two")][1] == two_level.traffic(numel, per_node, nodes, k)[0] * 4
                       and r[(nbytes, "flat")][1]
                       == rl.BYTES["ring"](numel, n, k)[0] * 4 for k, r in enumerate(ranks))
        out.append({"bytes": nbytes, "two": two, "flat": flat,
                    "two_price": rl.two_level(nbytes, nodes, per_node),
                    "flat_price": rl.flat_ring(nbytes, n), "bytes_ok": bytes_ok,
                    "two_bytes_rank0": ranks[0][(nbytes, "two")][1]})
    return out


def show(ranks: list[dict], per_node: int = PER_NODE, sizes=SIZES) -> dict:
    """Print the check, the bytes, and each size's run beside its price; returns the verdicts."""
    n = len(ranks)
    nodes = n // per_node
    table = rows(ranks, per_node, sizes)
    print(f"clock: paced {rl.ACCELERATOR} time; {cluster(n, per_node).name} "
          f"(NVLink 3: α = 1 µs, 300 GB/s per direction; HDR InfiniBand: α = 2 µs, 25 GB/s per GPU, "
          f"{per_node} rails); sizes priced shapes-only (no data, the real byte counts)")
    equal = all(r["equal"] for r in ranks)
    print(f"two-level result = torch's all_reduce (gloo) on {CHECK_NUMEL:,} integer-valued float32 "
          f"per rank, on all {n} ranks: {equal}")
    check = [two_level.traffic(CHECK_NUMEL, per_node, nodes, k)[0] * 4 for k in range(n)]
    check_ok = [r["check_bytes"] for r in ranks] == check
    print(f"ledger bytes sent per rank at {CHECK_NUMEL:,} elements: {[r['check_bytes'] for r in ranks]}; "
          f"closed form (g−1)/g·S + 2(m−1)/m·S/g + (g−1)/g·S (exact shards): {check}: "
          f"{'equal' if check_ok else 'NOT equal'}")
    print(f"{'size':>8} {'two-level run':>14} {'its price':>11} {'flat ring run':>14} "
          f"{'its price':>11} {'speed-up':>9}  ledger = closed form")
    held = 0
    for r in table:
        ok = (math.isclose(r["two"], r["two_price"], rel_tol=1e-9)
              and math.isclose(r["flat"], r["flat_price"], rel_tol=1e-9))
        held += ok
        print(f"{_size(r['bytes']):>8} {_us(r['two']):>14} {_us(r['two_price']):>11} "
              f"{_us(r['flat']):>14} {_us(r['flat_price']):>11} {r['flat'] / r['two']:>8.2f}×  "
              f"{r['bytes_ok']}")
    wins = sum(r["two"] < r["flat"] for r in table)
    print(f"paced run = its α-β price (relative tolerance 1e-9) at {held} of {len(table)} sizes: "
          f"{'holds' if held == len(table) else 'does NOT hold'}; the two-level all-reduce is faster "
          f"than the flat ring at {wins} of {len(table)} sizes")
    return {"equal": equal, "check_bytes": check_ok, "held": held, "wins": wins,
            "sizes": len(table), "bytes_ok": all(r["bytes_ok"] for r in table), "rows": table}


def _us(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.4g} µs"


def when_line(verdict: dict) -> str:
    """The summary's line on the two-level all-reduce, from the run's verdicts (`show`)."""
    speedups = [r["flat"] / r["two"] for r in verdict["rows"]]
    line = (f"across nodes (section 9, paced A100 time, 2 nodes of {PER_NODE}): the two-level "
            f"all-reduce beat one flat ring at {verdict['wins']} of {verdict['sizes']} sizes, "
            f"{min(speedups):.2f}× to {max(speedups):.2f}× faster; its paced time equalled its "
            f"α-β price at {verdict['held']} of {verdict['sizes']}")
    return line
