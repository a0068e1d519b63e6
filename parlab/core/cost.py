"""The α-β cost model: closed forms for bytes and time of every collective, and a fit to this machine.

Sources. Message cost α + n/β: Hockney, "The communication challenge for MPP", Parallel Computing
1994. Ring reduce-scatter / all-gather / all-reduce and the tree and naive algorithms:
Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
IJHPCA 2005 (§4), and Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 2009 (the ring is bandwidth-optimal: 2(N-1)/N·S per rank). Bus bandwidth
busbw = algbw · 2(N-1)/N for all-reduce, (N-1)/N for reduce-scatter / all-gather: NVIDIA
nccl-tests, doc/PERFORMANCE.md.

A tensor of S elements is cut into N chunks whose sizes differ by at most one
(`shard_sizes`), so every formula here is exact for any S, not only multiples of N; when N
divides S they reduce to the textbook forms (ring all-reduce: 2(N-1)/N·S per rank).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

FP32_BYTES = 4  # bytes of one float32 element (fp32 runs; mixed precision: `element_bytes`)


def element_bytes(precision: str = "fp32") -> int:
    """Bytes of one parameter / gradient / activation element as a scheme moves it: 4 in fp32, 2 in
    bf16-mixed and fp16-mixed (`parlab.core.precision`): every gradient and activation collective
    of a mixed-precision run sends half the bytes of fp32."""
    return 4 if precision == "fp32" else 2


def overflow_check_bytes(precision: str, n: int, rank: int) -> int:
    """Bytes `rank` sends per step for fp16's loss scaling: one 1-element fp32 all-reduce (max)
    of the overflow flag, so every rank skips the same steps (`parlab.core.precision`); 0 else."""
    return ring_all_reduce(1, n, rank)[0] * FP32_BYTES if precision == "fp16-mixed" else 0


def round_up(numel: int, multiple: int) -> int:
    """`numel` rounded up to a multiple of `multiple` (the padding of flat shards and buckets)."""
    return -(-numel // multiple) * multiple


def shard_sizes(numel: int, parts: int) -> list[int]:
    """Sizes of `parts` chunks of `numel` elements, the first `numel % parts` one larger."""
    base, extra = divmod(numel, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def chunk_bounds(sizes: list[int]) -> list[tuple[int, int]]:
    """(start, end) of consecutive chunks of the given sizes."""
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return bounds


def shard_bounds(numel: int, parts: int) -> list[tuple[int, int]]:
    """(start, end) of each chunk of `shard_sizes`."""
    return chunk_bounds(shard_sizes(numel, parts))


# ----------------------------------------------------------------------------- bytes per rank
# Each returns (elements sent, elements received, sequential rounds) for `rank` of `n` ranks.
def ring_reduce_scatter(numel: int, n: int, rank: int) -> tuple[int, int, int]:
    """Ring reduce-scatter: rank r sends every chunk but its own, receives every chunk but r-1's.
    N-1 rounds: the hand-written ring cuts each chunk into pipelined segments
    (parlab.core.collectives), but a step's segments are in flight together, so segmenting adds
    messages, not sequential rounds, and not a byte."""
    sizes = shard_sizes(numel, n)
    return numel - sizes[rank], numel - sizes[(rank - 1) % n], n - 1


def ring_all_gather(numel: int, n: int, rank: int) -> tuple[int, int, int]:
    """Ring all-gather: rank r forwards every chunk but r+1's, receives every chunk but its own."""
    sizes = shard_sizes(numel, n)
    return numel - sizes[(rank + 1) % n], numel - sizes[rank], n - 1


def ring_all_reduce(numel: int, n: int, rank: int) -> tuple[int, int, int]:
    """Ring all-reduce = ring reduce-scatter + ring all-gather: 2(N-1)/N·S each way when N | S."""
    s1, r1, k1 = ring_reduce_scatter(numel, n, rank)
    s2, r2, k2 = ring_all_gather(numel, n, rank)
    return s1 + s2, r1 + r2, k1 + k2


def tree_depth(n: int) -> int:
    """Depth of the binary heap tree (children of i: 2i+1, 2i+2) over n ranks."""
    return int(math.floor(math.log2(n))) if n > 1 else 0


def tree_all_reduce(numel: int, n: int, rank: int) -> tuple[int, int, int]:
    """Reduce up a binary tree, broadcast back down: S to the parent and S per child, each way."""
    children = sum(1 for c in (2 * rank + 1, 2 * rank + 2) if c < n)
    has_parent = 1 if rank > 0 else 0
    moved = numel * (children + has_parent)
    return moved, moved, 2 * tree_depth(n)


def naive_all_reduce(numel: int, n: int, rank: int) -> tuple[int, int, int]:
    """Everyone sends S to rank 0, rank 0 reduces and sends S back to each: (N-1)·S at the root."""
    if n == 1:
        return 0, 0, 0
    moved = numel * (n - 1) if rank == 0 else numel
    return moved, moved, 2 * (n - 1)


def pairwise_all_to_all(send_numels: list[int], recv_numels: list[int], rank: int):
    """Pairwise exchange: everything but the own block leaves, everything but the own arrives."""
    n = len(send_numels)
    return (sum(send_numels) - send_numels[rank], sum(recv_numels) - recv_numels[rank], n - 1)


def flat_broadcast(numel: int, n: int, rank: int, src: int) -> tuple[int, int, int]:
    """Root sends S to each other rank (the nominal count used for gloo's broadcast)."""
    if n == 1:
        return 0, 0, 0
    return (numel * (n - 1), 0, n - 1) if rank == src else (0, numel, n - 1)


# ----------------------------------------------------------------------------- time (α-β)
def all_reduce_time(nbytes: float, n: int, alpha: float, beta: float, algo: str = "ring") -> float:
    """Predicted seconds of an all-reduce of `nbytes` on `n` ranks (Thakur et al. 2005, §4)."""
    if n == 1:
        return 0.0
    if algo in ("ring", "gloo"):
        return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / beta
    if algo == "tree":
        return 2 * tree_depth(n) * (alpha + nbytes / beta)
    if algo == "naive":
        return 2 * (n - 1) * (alpha + nbytes / beta)
    raise ValueError(f"algo={algo!r} must be ring, gloo, tree or naive")


def reduce_scatter_time(nbytes: float, n: int, alpha: float, beta: float) -> float:
    """Ring reduce-scatter (or all-gather) of a full tensor of `nbytes`: (N-1)(α + S/(N·β))."""
    return (n - 1) * (alpha + nbytes / n / beta) if n > 1 else 0.0




def bus_bandwidth(nbytes: float, seconds: float, n: int, op: str = "all_reduce") -> float:
    """nccl-tests' busbw in bytes/s: algbw · 2(N-1)/N (all-reduce) or (N-1)/N (RS, AG)."""
    algbw = nbytes / seconds
    factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
    return algbw * factor


# ----------------------------------------------------------------------------- fitting
# β is bounded: a fit may not claim a link faster than memory copies (100 GB/s) nor slower than
# 1 MB/s; an unbounded least-squares fit on latency-bound points returns any β, even 10^6 GB/s.
BETA_BOUNDS = (1e6, 1e11)
FLAG_RATIO = 2.0  # a fit whose held-out prediction is off by more than 2× is not a prediction


@dataclass
class AlphaBeta:
    """α (s per round, the algorithm's per-round software overhead included) and β (bytes/s)
    fitted for one algorithm at one world size. `held_out` judges it on sizes it has not seen:
    `held_out_error` is the median relative error there, `worst_error` the largest, and `reliable`
    is False when the typical held-out prediction is off by more than `FLAG_RATIO` either way."""

    alpha: float
    beta: float
    algo: str
    world_size: int
    held_out_error: float | None = None
    worst_error: float | None = None
    reliable: bool | None = None

    def predict(self, nbytes: float) -> float:
        return all_reduce_time(nbytes, self.world_size, self.alpha, self.beta, self.algo)

    def held_out(self, nbytes: list[float], seconds: list[float]) -> AlphaBeta:
        if not nbytes:
            raise ValueError("held_out needs at least one (size, time) pair")
        errors = sorted(abs(self.predict(b) - t) / t for b, t in zip(nbytes, seconds))
        ratios = sorted(max(self.predict(b) / t, t / self.predict(b)) if self.predict(b) > 0
                        else math.inf for b, t in zip(nbytes, seconds))
        self.held_out_error = float(np.median(errors))
        self.worst_error = errors[-1]
        self.reliable = bool(np.median(ratios) <= FLAG_RATIO)
        return self


def _design_row(nbytes: float, n: int, algo: str) -> tuple[float, float]:
    """Coefficients (of α, of 1/β) in the all-reduce time of `algo`."""
    if algo in ("ring", "gloo"):
        return 2 * (n - 1), 2 * (n - 1) / n * nbytes
    if algo == "tree":
        return 2 * tree_depth(n), 2 * tree_depth(n) * nbytes
    if algo == "naive":
        return 2 * (n - 1), 2 * (n - 1) * nbytes
    raise ValueError(f"algo={algo!r} must be ring, gloo, tree or naive")


def fit_alpha_beta(nbytes: list[float], seconds: list[float], world_size: int,
                   algo: str = "ring", beta_bounds: tuple[float, float] = BETA_BOUNDS,
                   robust: bool = True) -> AlphaBeta:
    """Fit the algorithm's α-β form to measured all-reduce times: α >= 0, β within `beta_bounds`.

    Each equation is divided by its measured time (relative error), so a 64 MB point does not
    drown the 1 KB points that pin down α. `robust`: least absolute relative error (iteratively
    reweighted least squares), so a size whose samples were stalled by the machine's load moves
    the fit less than in least squares. A solution outside the bounds is clamped to the bound and
    the other parameter refitted alone (the constrained optimum lies on the boundary it crossed).
    """
    if len(nbytes) < 2 or len(nbytes) != len(seconds):
        raise ValueError(f"need >= 2 (size, time) pairs of equal length, got {len(nbytes)}, "
                         f"{len(seconds)}")
    lo, hi = beta_bounds
    if not 0 < lo <= hi:
        raise ValueError(f"beta_bounds={beta_bounds!r} must satisfy 0 < low <= high")
    rows = np.array([_design_row(b, world_size, algo) for b in nbytes], dtype=float)
    times = np.asarray(seconds, dtype=float)
    a, c = rows[:, 0] / times, rows[:, 1] / times  # weighted: each row relative to its time
    weights = np.ones_like(times)
    for _ in range(30 if robust else 1):
        alpha, inv_beta = _bounded_lstsq(a, c, weights, lo, hi)
        residual = np.abs(a * alpha + c * inv_beta - 1.0)
        weights = 1.0 / np.maximum(residual, 1e-3)  # IRLS for the L1 norm
    return AlphaBeta(alpha, 1.0 / inv_beta, algo, world_size)


def _bounded_lstsq(a, c, w, lo: float, hi: float) -> tuple[float, float]:
    """Weighted least squares of a·α + c·(1/β) = 1 with α >= 0 and lo <= β <= hi."""
    sw = np.sqrt(w)
    ones = np.ones_like(a)
    solution, *_ = np.linalg.lstsq(np.stack([a * sw, c * sw], 1), sw, rcond=None)
    alpha, inv_beta = float(solution[0]), float(solution[1])
    if not 1 / hi <= inv_beta <= 1 / lo:  # clamp β, refit α alone
        inv_beta = min(max(inv_beta, 1 / hi), 1 / lo)
        alpha = float((w * a) @ (ones - c * inv_beta) / ((w * a) @ a))
    if alpha < 0:  # clamp α, refit β alone (within its bounds)
        alpha = 0.0
        inv_beta = min(max(float((w * c) @ ones / ((w * c) @ c)), 1 / hi), 1 / lo)
    return alpha, inv_beta
