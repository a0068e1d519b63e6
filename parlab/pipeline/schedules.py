"""Pipeline schedules as data: for each rank, the ordered list of what it computes.

An `Action` is (op, stage, micro-batch): F, B (the input gradient only when the backward is
split), W (the weight gradient). `Schedule.lowered()` derives the communication (a RECV before
every action whose input is remote, a SEND after every action whose output is), so the list that
is executed (`executor`), drawn and costed (`cost`) and checked (`validate`) is one and the same.
With `chunks` = v, stage s lives on rank s mod p as its chunk s // p (Narayanan et al., SC 2021, §2.2).

Generators (p ranks, m micro-batches): `naive` (plain model parallelism); `gpipe` (Huang et al.,
NeurIPS 2019: all F, then all B); `1f1b` (PipeDream-Flush: Narayanan et al., ICML 2021; PipeDream,
SOSP 2019: p−s−1 warm-up forwards, holds ≤ p−s); `interleaved` (Megatron-LM, SC 2021: bubble
(p−1)/(v·m+p−1), m a multiple of p); `zb` (ZB-H1: Qi et al., "Zero Bubble Pipeline Parallelism",
ICLR 2024: W deferred into the bubbles); `dualpipe` (DeepSeek-V3, arXiv 2412.19437, §3.2.1:
`parlab.pipeline.dualpipe`); `eager-1f1b` (AlpaComm: Zhuang et al., MLSys 2023, §4: 2(p−s−1)
warm-up forwards so each send overlaps compute; holds ≤ 2(p−s)−1); `looped-bfs` (Lamy-Poirier,
MLSys 2023: interleaved chunks run breadth first, `parlab.pipeline.looped_bfs`); `zbv` (ZB-V: Qi et
al., ICLR 2024, §6: two chunks per rank in a V, `parlab.pipeline.zbv`). Each generator's contract in
full: docs/pipeline.md, `parlab.pipeline.schedules`.
"""

from __future__ import annotations

from parlab.pipeline.actions import COMM, COMPUTE, Action, Schedule, _schedule  # noqa: F401
from parlab.pipeline.dualpipe import dualpipe as _dualpipe
from parlab.pipeline.looped_bfs import looped_bfs
from parlab.pipeline.zbv import zbv


def gpipe(p: int, m: int, chunks: int = 1) -> Schedule:
    """All forwards of every micro-batch, then all backwards (in micro-batch order)."""
    ranks = [[Action("F", r, i) for i in range(m)] + [Action("B", r, i) for i in range(m)]
             for r in range(p)]
    return _schedule("gpipe", p, m, 1, False, ranks)


def naive(p: int, m: int = 1, chunks: int = 1) -> Schedule:
    """Plain model parallelism: one micro-batch (the whole batch) down the stages and back."""
    return _schedule("naive", p, 1, 1, False, gpipe(p, 1).actions)


def _warm_then_alternate(name: str, p: int, m: int, warmup) -> Schedule:
    """Each rank r: `warmup(r)` forwards, then one forward / one backward, then the backwards left."""
    ranks = []
    for r in range(p):
        warm = min(warmup(r), m)
        seq = [Action("F", r, i) for i in range(warm)]
        for i in range(m - warm):
            seq += [Action("F", r, warm + i), Action("B", r, i)]
        seq += [Action("B", r, i) for i in range(m - warm, m)]
        ranks.append(seq)
    return _schedule(name, p, m, 1, False, ranks)


def one_f_one_b(p: int, m: int, chunks: int = 1) -> Schedule:
    """Warm up with p−r−1 forwards, alternate one forward and one backward, cool down."""
    return _warm_then_alternate("1f1b", p, m, lambda r: p - r - 1)


def eager_one_f_one_b(p: int, m: int, chunks: int = 1) -> Schedule:
    """AlpaComm's eager 1F1B: warm up with 2(p−r−1) forwards, then as 1F1B.

    Rank r runs min(2(p−r)−1, m) forwards before its first backward (1F1B: p−r). In the steady
    state a 1F1B rank sends micro-batch i's activation just as the next rank wants it, so the
    transfer sits on the critical path; here the next rank's input was sent one forward earlier,
    and a transfer shorter than a forward hides behind it (Zhuang et al., MLSys 2023, §4, Fig. 6).
    The price: p−r−1 more micro-batches of activations held on rank r.
    """
    return _warm_then_alternate("eager-1f1b", p, m, lambda r: 2 * (p - r - 1))


def interleaved(p: int, m: int, chunks: int = 2) -> Schedule:
    """Megatron-LM's interleaved 1F1B: micro-batches go through the v chunks in groups of p.

    The k-th forward of a rank is chunk (k // p) mod v of micro-batch (k // (p·v))·p + k mod p;
    backwards visit the chunks in reverse. Warm-up: 2(p−r−1) + (v−1)·p forwards (Megatron's
    `forward_backward_pipelining_with_interleaving`).
    """
    if m % p:
        raise ValueError(f"interleaved needs microbatches={m} to be a multiple of pp={p}")
    v, total = chunks, m * chunks

    def forward(r, k):
        return Action("F", ((k // p) % v) * p + r, (k // (p * v)) * p + k % p)

    def backward(r, k):
        return Action("B", (v - 1 - (k // p) % v) * p + r, (k // (p * v)) * p + k % p)

    ranks = []
    for r in range(p):
        warm = min(2 * (p - r - 1) + (v - 1) * p, total)
        seq = [forward(r, k) for k in range(warm)]
        for j in range(total - warm):
            seq += [forward(r, warm + j), backward(r, j)]
        seq += [backward(r, j) for j in range(total - warm, total)]
        ranks.append(seq)
    return _schedule("interleaved", p, m, v, False, ranks)


def zero_bubble_h1(p: int, m: int, chunks: int = 1) -> Schedule:
    """ZB-H1 by list scheduling on unit times (F = B = W = 1, free messages).

    At each tick every stage runs, by priority: the next F if its input has arrived, fewer than
    p−s micro-batches await their B (1F1B's discipline) and fewer than p await their W (ZB-H1's
    memory budget: 1F1B's peak, p micro-batches); else a B whose output gradient has arrived; else
    the oldest pending W, which fills what would be a bubble. Feeding the next stage first keeps it
    busy; the caps keep memory at 1F1B's. For every m >= p (checked up to p = 6, m = 16) the ideal
    makespan is 3m+p−1 ticks: the paper's (p−1)(F+B−W) bubble.
    """
    done: dict[Action, int] = {}  # action -> tick it finished
    next_f, next_b = [0] * p, [0] * p
    pending_w: list[list[int]] = [[] for _ in range(p)]
    awaiting_b, awaiting_w = [0] * p, [0] * p
    ranks: list[list[Action]] = [[] for _ in range(p)]
    tick = 0
    while sum(len(seq) for seq in ranks) < 3 * p * m:
        chosen = []
        for s in range(p):
            b, f = next_b[s], next_f[s]
            if f < m and awaiting_b[s] < p - s and awaiting_w[s] < p and (
                    s == 0 or done.get(Action("F", s - 1, f), tick + 1) <= tick):
                chosen.append(Action("F", s, f))
            elif b < m and (s == p - 1 and done.get(Action("F", s, b), tick + 1) <= tick
                            or done.get(Action("B", s + 1, b), tick + 1) <= tick):
                chosen.append(Action("B", s, b))
            elif pending_w[s]:
                chosen.append(Action("W", s, pending_w[s][0]))
            else:
                chosen.append(None)
        for s, a in enumerate(chosen):
            if a is None:
                continue
            ranks[s].append(a)
            done[a] = tick + 1
            if a.op == "F":
                next_f[s] += 1
                awaiting_b[s] += 1
                awaiting_w[s] += 1
            elif a.op == "B":
                next_b[s] += 1
                awaiting_b[s] -= 1
                pending_w[s].append(a.mb)
            else:
                pending_w[s].pop(0)
                awaiting_w[s] -= 1
        tick += 1
    return _schedule("zb", p, m, 1, True, ranks)


def dualpipe(p: int, m: int, chunks: int = 1) -> Schedule:
    """DualPipe (DeepSeek-V3 report, §3.2.1): `parlab.pipeline.dualpipe`."""
    return _dualpipe(p, m, chunks)


GENERATORS = {"naive": naive, "gpipe": gpipe, "1f1b": one_f_one_b, "interleaved": interleaved,
              "zb": zero_bubble_h1, "eager-1f1b": eager_one_f_one_b, "dualpipe": dualpipe,
              "looped-bfs": looped_bfs, "zbv": zbv}


def make_schedule(name: str, pp: int, microbatches: int, chunks: int = 1) -> Schedule:
    if name not in GENERATORS:
        raise ValueError(f"schedule={name!r} is unknown; choose one of {sorted(GENERATORS)}")
    return GENERATORS[name](pp, microbatches, chunks)
