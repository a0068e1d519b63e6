"""Which losses train which stages: the gradient routes of local and interlocking learning.

p stages, stage m < p−1 with an auxiliary loss L_m of weight w (`aux_weight`), the last stage
with the true loss L_{p−1} (weight 1). At depth d the gradient of L_m reaches the stages
m−d, …, m: it crosses at most d boundaries (boundary j lies between stage j and stage j+1), so
stage j learns from the losses m ∈ [j, j+d] (Gomez et al., "Interlocking Backpropagation",
JMLR 2022, §3: depth 1 in the paper's experiments; d = 0 is decoupled greedy learning,
Belilovsky et al., ICML 2020; d = p−1 with w = 0 is global backprop).

Backward through a stage is linear in the gradient it receives, but truncation is per loss: the
gradient boundary j carries must keep every loss apart, because the next stage down drops the
one that has travelled d boundaries and passes on the rest. So boundary j carries one tensor of
the activation's shape per loss m ∈ [j+1, min(j+d, p−1)] with a nonzero weight — `crossing(j)`,
the closed form of the gradient bytes (`cost.py`).

When each message can leave decides the order a stage works in (`order`): a message that carries
only the sender's own loss leaves right after its forward ("early": the stage below waits one
stage's forward); a message carrying losses from further up leaves after the sender's backward,
which waits for the stage above ("late", as in 1F1B). A stage runs `warmup` forwards before its
first backward — 0 if nothing comes down to it, 1 for an early message, one more than the stage
above for a late one — then alternates forward and backward. For d = p−1 and w = 0 this is 1F1B
itself (Narayanan et al., PipeDream-Flush); for d = 0 every stage runs F, B, F, B without waiting.
The order is deadlock-free because warm-ups never increase with the stage index: a stage's
backward of micro-batch i waits at most for work the stage above does once it has micro-batch
i + warmup, which this stage has already sent.

The GPT's head is tied to its embedding, held by the first and the last stage. Summing the two
copies' gradients every step locks the first stage to the last; that costs nothing when backprop
already locks them (d >= p−1), so the tie is kept exactly then (`tied`); otherwise each end trains
its own copy (the state reports the head's).
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
