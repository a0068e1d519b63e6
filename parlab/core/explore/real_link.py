"""Ring vs tree vs naive all-reduce where the lesson lives: N = 4–16 A100s on a real link (NVLink 3
inside a DGX A100, HDR InfiniBand between nodes), on the paced A100 clock, to 1 GB.

Two α-β prices of one all-reduce of S bytes on N ranks (Hockney's α + n/β per message):

* **Thakur's closed form** (Thakur, Rabenseifner & Gropp, IJHPCA 2005, §4; `cost.all_reduce_time`):
  the levels of a tree run one after another, each carrying the whole S:
  ring 2(N−1)α + 2(N−1)/N·S/β, tree 2⌊log₂N⌋(α + S/β), naive 2(N−1)(α + S/β).
* **The paced clock's price** (`parlab.core.virtual_link`): rank r finishes k·α + b_r/β after the
  op starts, b_r its busiest direction's bytes (the ledger's), and the op ends when the slowest rank
  does. For the tree that is the price of a perfectly *pipelined* tree (S/β per edge, not per level).

`paced_worker` runs the hand-written algorithms for real on that clock (small tensors: time depends
on bytes only); `priced` applies the clock's formula to `parlab.core.cost`'s exact byte counts, so
sizes to 1 GB cost no memory (shapes only); the two must agree to the bit where both exist.

The next steps, priced: the **two-level** all-reduce (reduce-scatter inside each node, ring
all-reduce of 1/g of the data across nodes on each of g rails, all-gather inside; Horovod's
hierarchical mode; run for real in `parlab.core.explore.two_level_run`) and NCCL's **pipelined
double binary tree** (Sanders, Speck & Träff, "Two-tree algorithms for full bandwidth broadcast,
reduction and scan", Parallel Computing 2009; NCCL 2.4's trees; run for real in
`parlab.core.double_tree`): two trees, each reducing and broadcasting S/2 in k chunks, every rank
a leaf in one of them, one message at a time per port: (3H − 1 + p(k − 1))·(α + S/(2kβ)),
H = ⌈log₂N⌉, p = 4 messages per chunk on the busiest port, k chosen best.
"""

from __future__ import annotations

import math
import warnings
from contextlib import nullcontext

import torch

from parlab.core import cost
from parlab.core import double_tree as dt
from parlab.core.clock import Clock
from parlab.core.comm import Comm
from parlab.core.link import ACCELERATORS, real
from parlab.core.pacer import Pacer
from parlab.core.shapes import shapes

ALGOS = ("ring", "tree", "naive")
BYTES = {"ring": cost.ring_all_reduce, "tree": cost.tree_all_reduce,
         "naive": cost.naive_all_reduce}
ACCELERATOR = "A100"
INTRA, INTER, GPUS_PER_NODE = "NVLink3", "HDR-IB", 8  # a DGX A100 cluster
CLOCK_LINE = (f"paced {ACCELERATOR} time (parlab.core.clock): NVLink 3 inside a node "
              f"(α = 1 µs, β = 300 GB/s per direction), HDR InfiniBand between (α = 2 µs, 25 GB/s)")


# ----------------------------------------------------------------------------- in the ranks
def paced_worker(rank: int, world_size: int, sizes: list[int], link: str,
                 algos: tuple = ALGOS, real_max: float = math.inf) -> dict:
    """Every algorithm of `algos` at every size (bytes) on the paced A100 clock over the real `link`:
    {(algo, size): (virtual seconds this rank's all-reduce took, its ledger's bytes sent)}. Sizes
    above `real_max` run shapes-only (`parlab.core.shapes`: no data, the same bytes and price)."""
    comm = Comm(link=real(link, ACCELERATOR))
    comm.timeline.pacer = Pacer(Clock(ACCELERATORS[ACCELERATOR]))
    out = {}
    for nbytes in sizes:
        for algo in algos:
            with shapes() if nbytes > real_max else nullcontext(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
                tensor = torch.ones(nbytes // 4)  # (S/4,) float32
                comm.barrier()
                t0 = comm.timeline.now()
                comm.all_reduce(tensor, algo=algo)
            out[(algo, nbytes)] = (comm.timeline.now() - t0, comm.ledger.records[-1]["bytes_sent"])
        comm.drop_records()  # a sweep's ledger would be long; each op's bytes are kept above
    return out


# ----------------------------------------------------------------------------- prices
def priced(algo: str, n: int, nbytes: int, link: str) -> float:
    """The paced clock's price of an all-reduce (seconds): max over ranks of k·α + b_r/β, b_r the
    busier direction's bytes from `parlab.core.cost` (float32 elements)."""
    alpha, beta = _ab(link)
    numel = nbytes // 4
    worst = 0.0
    for r in range(n):
        sent, recv, rounds = BYTES[algo](numel, n, r)
        worst = max(worst, rounds * alpha + max(sent, recv) * 4 / beta)
    return worst


def thakur(algo: str, n: int, nbytes: float, link: str) -> float:
    """Thakur et al.'s closed form (levels of the tree in sequence): `cost.all_reduce_time`."""
    return cost.all_reduce_time(nbytes, n, *_ab(link), algo)


def _ab(link: str) -> tuple[float, float]:
    lk = real(link, ACCELERATOR)
    return lk.latency_s, lk.bandwidth_Bps


def crossover(n: int, link: str, price=priced, lo: float = 1.0, hi: float = 2.0 ** 40) -> float:
    """The size (bytes) above which the ring is faster than the tree under `price`: bisection on
    log size of price(ring) − price(tree), which is positive below and negative above (nan when
    the sign does not change in [lo, hi])."""
    def gap(s):
        return price("ring", n, int(s), link) - price("tree", n, int(s), link)
    if gap(lo) <= 0 or gap(hi) >= 0:
        return math.nan
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
    return hi


def thakur_crossover(n: int, link: str) -> float:
    """Solved: 2(N−1)α + 2(N−1)/N·S/β = 2D(α + S/β) ⇒ S* = (2(N−1) − 2D)αβ / (2D − 2(N−1)/N)."""
    alpha, beta = _ab(link)
    d = cost.tree_depth(n)
    return (2 * (n - 1) - 2 * d) * alpha * beta / (2 * d - 2 * (n - 1) / n)


def two_level(nbytes: float, nodes: int, per_node: int = GPUS_PER_NODE, intra: str = INTRA,
              inter: str = INTER) -> float:
    """Reduce-scatter inside each node (ring, g = per_node), ring all-reduce of S/g across the nodes
    on each of g rails at once, all-gather inside: 2(g−1)(α_i + S/(g·β_i)) + ring(S/g, nodes)."""
    (ai, bi), g = _ab(intra), per_node
    inside = 2 * (g - 1) * (ai + nbytes / g / bi) if g > 1 else 0.0
    return inside + cost.all_reduce_time(nbytes / g, nodes, *_ab(inter), "ring")


def flat_ring(nbytes: float, n: int, inter: str = INTER) -> float:
    """One ring over every GPU of several nodes: every round waits for its slowest hop (InfiniBand)."""
    return cost.all_reduce_time(nbytes, n, *_ab(inter), "ring")


def double_tree(nbytes: float, n: int, link: str) -> tuple[float, int]:
    """NCCL's pipelined double binary tree (Sanders et al. 2009) on one link: `double_tree.time`,
    (3H − 1 + p(k − 1))·(α + S/(2kβ)), at the best whole k in [1, 1024] chunks per tree; returns
    (seconds, k)."""
    alpha, beta = _ab(link)
    k = dt.best_chunks(nbytes, n, alpha, beta, most=1024)
    return dt.time(nbytes, n, alpha, beta, k), k
