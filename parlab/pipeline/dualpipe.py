"""DualPipe: the bidirectional pipeline schedule of DeepSeek-V3 (DeepSeek-AI, "DeepSeek-V3
Technical Report", arXiv 2412.19437, §3.2.1, Fig. 5 and Table 2), as data like every schedule.

What the report does, and what this module builds of it:
- **Two directions.** The m micro-batches are fed from both ends: the first m/2 enter at rank 0
  and flow to rank p−1 (direction 0), the other m/2 enter at rank p−1 and flow to rank 0
  (direction 1). Each direction is a whole pipeline of the p stages, so rank r holds two chunks:
  stage r of direction 0 and stage p−1−r of direction 1 — 2× the parameters of 1F1B. Ranks r and
  p−1−r hold the same two stages; their gradients are summed before the update (the two copies
  of the model are two data-parallel replicas laid out mirrored), so the update is the
  single-process one. Actions carry their direction (`Action.dir`), `Schedule.rank_of(stage,
  direction)` places them, `validate` checks and simulates both directions, and the executor
  runs them — one schedule, two flows.
- **Backward split** into B (input gradient) and W (weight gradient) as in zero bubble (Qi et al.,
  ICLR 2024); DualPipe defers W only where it fills a bubble (its steps 3, 6 and 7: "use zero
  bubble"); elsewhere a full backward, which here is a B immediately followed by its W (the same
  products, `parlab.pipeline.executor`).
- **Forward and backward chunks overlapped.** In the steady state each rank runs pairs "F of one
  direction & B of the other" (F&B); the report overlaps their computation with their
  communication (all-to-all and PP sends) by splitting each chunk into components and
  interleaving them on the GPU (§3.2.1, Fig. 4). `Schedule.pairs` marks those pairs.

The order of actions on each rank follows the reference implementation's eight steps
(deepseek-ai/DualPipe, `DualPipe.step`; read to learn, written here from its structure): with
H = p/2, h = m/2, rank r at half-rank k = min(r, p−1−r), "phase 0" the direction that reaches the
rank first (direction 0 on ranks r < H, direction 1 on the others), "phase 1" the other:

  1. 2(H−k−1) × F0                      5. H−k−1 × (B1 W1, F1 & B0 W0)
  2. k+1 × (F0, F1)                     6. k+1 × (B1, B0), W deferred from the middle on
  3. H−k−1 × (B1 W1, F1)                7. H−k−1 × (W, B0) with B0's W deferred
  4. h−p+k+1 × (F0 & B1 W1, F1 & B0 W0) 8. k+1 × W (the deferred W's, oldest first)

Requirements, as the reference asserts: p even, m even and m >= 2p (ValueError otherwise).

Closed forms (`parlab.pipeline.cost`): bubble (p/2−1)(F&B + B − 3W) with B the full backward
(the report's Table 2), 1F1B's (p−1)(F+B) and ZB1P's (p−1)(F+B−2W) beside it; activations p+1
micro-batch chunks on the busiest rank where 1F1B holds p; parameters 2×.

Simplification, stated: our ranks cannot truly overlap a forward and a backward chunk's compute
(one CPU thread per rank; the paced clock charges the two computations one after the other), so
F&B = F + B here and the schedule's compute-compute overlap is not modelled. What the overlap buys
in the report — the pair's communication hidden behind its computation — shows here as the pair's
B input (the gradient from the neighbour) being asked for when the pair's F starts, so on an
emulated link its transfer runs behind F's compute (`Schedule.pairs`, `executor._Receives`);
1F1B and ZB-H1 ask for each input only when they need it.
"""

from __future__ import annotations

from parlab.pipeline.actions import Action, Schedule


def check_sizes(p: int, m: int) -> None:
    """ValueError naming p or m when DualPipe cannot take them (the reference's assertions)."""
    if p < 2 or p % 2:
        raise ValueError(f"DualPipe needs an even number of pipeline ranks pp >= 2 (the two "
                         f"directions pair rank r with rank p-1-r); got pp={p}")
    if m % 2 or m < 2 * p:
        raise ValueError(f"DualPipe needs an even microbatches >= 2 × pp = {2 * p} (m/2 fed from "
                         f"each end, each direction at least p micro-batches); got "
                         f"microbatches={m} with pp={p}")


class _Rank:
    """One rank's list being written: F, B (W now or deferred), deferred W, F&B pair."""

    def __init__(self, p: int, m: int, r: int):
        self.h = m // 2
        second = r >= p // 2
        self.direction = (int(second), int(not second))  # phase -> direction
        self.stage = [r if d == 0 else p - 1 - r for d in self.direction]  # phase -> stage
        self.next_f, self.next_b = [0, 0], [0, 0]
        self.deferred: list[Action] = []  # W's postponed, oldest first
        self.seq: list[Action] = []
        self.pairs: list[tuple] = []

    def forward(self, phase: int) -> Action:
        d = self.direction[phase]
        a = Action("F", self.stage[phase], self.next_f[phase] + d * self.h, d)
        self.next_f[phase] += 1
        self.seq.append(a)
        return a

    def backward(self, phase: int, defer: bool = False) -> Action:
        d = self.direction[phase]
        b = Action("B", self.stage[phase], self.next_b[phase] + d * self.h, d)
        self.next_b[phase] += 1
        self.seq.append(b)
        w = Action("W", b.stage, b.mb, d)
        if defer:
            self.deferred.append(w)
        else:
            self.seq.append(w)  # a full backward: B then its W
        return b

    def weight(self) -> None:
        self.seq.append(self.deferred.pop(0))

    def pair(self, f_phase: int, b_phase: int) -> None:
        f = self.forward(f_phase)
        self.pairs.append((f, self.backward(b_phase)))


def dualpipe(p: int, m: int, chunks: int = 1) -> Schedule:
    """DualPipe's per-rank action lists for p ranks (even) and m micro-batches (even, >= 2p)."""
    check_sizes(p, m)
    half, h = p // 2, m // 2
    ranks, pairs = [], []
    for r in range(p):
        k = min(r, p - 1 - r)  # half-rank
        x = _Rank(p, m, r)
        for _ in range(2 * (half - k - 1)):  # 1: warm up phase 0
            x.forward(0)
        for _ in range(k + 1):  # 2: F0 F1
            x.forward(0)
            x.forward(1)
        for _ in range(half - k - 1):  # 3: B1 W1 F1 (zero bubble: W right after B)
            x.backward(1, defer=True)
            x.weight()
            x.forward(1)
        for _ in range(h - p + k + 1):  # 4: the main step, F0&B1, F1&B0
            x.pair(0, 1)
            x.pair(1, 0)
        for _ in range(half - k - 1):  # 5: B1, F1&B0
            x.backward(1)
            x.pair(1, 0)
        defer = False
        for i in range(k + 1):  # 6: B1 B0, the second half with deferred W
            if i == (k + 1) // 2 and k % 2 == 1:
                defer = True
            x.backward(1, defer)
            if i == (k + 1) // 2 and k % 2 == 0:
                defer = True
            x.backward(0, defer)
        for _ in range(half - k - 1):  # 7: W, B0 (deferred W)
            x.weight()
            x.backward(0, defer=True)
        for _ in range(k + 1):  # 8: the deferred W's
            x.weight()
        assert not x.deferred and x.next_f == [h, h] and x.next_b == [h, h]
        ranks.append(tuple(x.seq))
        pairs.append(tuple(x.pairs))
    return Schedule("dualpipe", p, m, 1, True, tuple(ranks), bidirectional=True,
                    pairs=tuple(pairs))
