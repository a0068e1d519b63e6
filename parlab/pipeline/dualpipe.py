"""DualPipe: the bidirectional pipeline schedule of DeepSeek-V3 (DeepSeek-AI, "DeepSeek-V3
Technical Report", arXiv 2412.19437, 2024, §3.2.1, Fig. 5 and Table 2), as data like every schedule.

The m micro-batches enter from both ends (`Action.dir`): rank r holds stage r of direction 0 and
stage p−1−r of direction 1 (2× the parameters of 1F1B; mirrored ranks sum their gradients).
The backward splits into B and W as in zero bubble (Qi et al., ICLR 2024) where W fills a bubble,
and the steady state runs "F of one direction & B of the other" pairs (`Schedule.pairs`). The
order of actions per rank follows the eight steps of the reference implementation
(deepseek-ai/DualPipe, `DualPipe.step`). Requires p even, m even and m >= 2p (ValueError).

Simplification, stated: F&B = F + B here (one CPU thread per rank: no compute-compute overlap);
only the pair's B input is asked for when its F starts. The eight steps, the closed forms and the
simplification: docs/pipeline.md, `parlab.pipeline.dualpipe`.
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
