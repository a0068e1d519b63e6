"""Which losses train which stages: the gradient routes of local and interlocking learning.

At depth d the gradient of stage m's loss (auxiliary, weight w; the last stage's true loss,
weight 1) reaches stages m−d, …, m, so stage j learns from the losses m ∈ [j, j+d] (Gomez et al.,
"Interlocking Backpropagation", JMLR 2022, §3; d = 0 is decoupled greedy learning, Belilovsky et
al., ICML 2020; d = p−1 with w = 0 is global backprop). Boundary j carries one tensor per loss
m ∈ [j+1, min(j+d, p−1)] with nonzero weight (`crossing(j)`, the closed form of the bytes).
A stage runs `warmup` forwards, then alternates (`order`; d = p−1, w = 0 is 1F1B); the tied
embedding stays tied only when d >= p−1 (`tied`). Why the losses travel apart, early and late
messages and the deadlock-freedom argument: docs/local_learning.md, `parlab.local_learning.routes`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    pp: int
    depth: int  # boundaries a loss's gradient may cross (clamped to pp − 1)
    aux_weight: float  # weight of every auxiliary loss

    @classmethod
    def of(cls, pp: int, depth: int, aux_weight: float) -> Route:
        return cls(pp, min(depth, pp - 1), float(aux_weight))

    def weight(self, m: int) -> float:
        return 1.0 if m == self.pp - 1 else self.aux_weight

    def has_head(self, stage: int) -> bool:
        """Whether `stage` computes an auxiliary loss (non-last stages with weight > 0)."""
        return stage < self.pp - 1 and self.aux_weight != 0

    def reaching(self, stage: int) -> tuple:
        """The losses whose gradient trains `stage`."""
        return tuple(m for m in range(stage, min(stage + self.depth, self.pp - 1) + 1)
                     if self.weight(m) != 0)

    def crossing(self, boundary: int) -> tuple:
        """The losses whose gradient crosses `boundary` (from stage boundary+1 down to it)."""
        return tuple(m for m in range(boundary + 1, min(boundary + self.depth, self.pp - 1) + 1)
                     if self.weight(m) != 0)

    def sends(self, stage: int) -> tuple:
        """The losses whose gradient `stage` sends down (its input gradient, one per loss)."""
        return self.crossing(stage - 1) if stage > 0 else ()

    def receives(self, stage: int) -> tuple:
        return self.crossing(stage) if stage < self.pp - 1 else ()

    def early(self, stage: int) -> bool:
        """The message down carries only this stage's own loss: it can leave after the forward."""
        return self.sends(stage) == (stage,)

    def warmup(self, stage: int, microbatches: int) -> int:
        """Forwards before the first backward."""
        w = 0
        for s in range(self.pp - 2, stage - 1, -1):
            w = 0 if not self.receives(s) else 1 if self.early(s + 1) else w + 1
        return min(w, microbatches)

    def order(self, stage: int, microbatches: int) -> list[tuple[str, int]]:
        """[("F", i) | ("B", i)]: warm-up forwards, then one forward / one backward, then the rest."""
        m, w = microbatches, self.warmup(stage, microbatches)
        seq = [("F", i) for i in range(w)]
        for i in range(m - w):
            seq += [("F", w + i), ("B", i)]
        return seq + [("B", i) for i in range(m - w, m)]

    @property
    def tied(self) -> bool:
        """Whether the first and the last stage keep one tied embedding (see the module doc)."""
        return self.depth >= self.pp - 1
