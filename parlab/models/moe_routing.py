"""Where a mixture-of-experts layer's tokens go: the routing plans of `parlab.models.gpt_moe`.

GShard (Lepikhin et al., "GShard: Scaling Giant Models with Conditional Computation and Automatic
Sharding", 2020) bounds each expert's work by a *capacity* C = ⌈capacity_factor · N·k / E⌉ token
slots per batch and drops what overflows, first choices before second choices. The rule here is
global (an expert's queue ordered by slot, then rank, then the token's place in its rank's
rows), so any number of ranks routes and drops exactly as one process. `RoutingPlan`: top-k
routing from every rank's (slot, expert) counts; `EvenPlan`: even routing as Python integers,
known before any score (what shapes-only runs route by). Both answer the questions
`parlab.expert_parallel.layer` asks. In full: docs/models.md, `parlab.models.moe_routing`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


# ----------------------------------------------------------------------------- the routing rule
def capacity(total_assignments: int, cfg) -> int | None:
    """Token slots per expert for a batch of N·k assignments: ⌈cf·N·k/E⌉ (None: unlimited)."""
    if cfg.capacity_factor is None:
        return None
    return math.ceil(cfg.capacity_factor * total_assignments / cfg.n_experts)


def assignment_counts(experts: torch.Tensor, n_experts: int) -> torch.Tensor:
    """(N, k) chosen expert ids -> (k, E) how many tokens chose each expert in each slot."""
    return F.one_hot(experts, n_experts).sum(0)  # (N, k, E) -> (k, E)


@dataclass
class RoutingPlan:
    """Where every rank's assignments stand in the experts' global queues.

    counts (W, k, E): every rank's assignment counts, ranks in global token order; rank: this
    rank's row; cap: slots per expert or None. Queue order: slot, then rank, then local token.
    """

    counts: torch.Tensor
    rank: int
    cap: int | None

    def starts(self) -> torch.Tensor:
        """(W, k, E): the queue position of each rank's first assignment per (slot, expert)."""
        W, k, E = self.counts.shape
        by_slot = self.counts.transpose(0, 1).reshape(k * W, E)  # (k·W, E) in queue order
        start = by_slot.cumsum(0) - by_slot  # (k·W, E) exclusive prefix sum
        return start.reshape(k, W, E).transpose(0, 1)  # (W, k, E)

    def kept(self) -> torch.Tensor:
        """(W, E): assignments of each rank that each expert keeps (the all-to-all's splits)."""
        if self.cap is None:
            return self.counts.sum(1)  # (W, E)
        room = (self.cap - self.starts()).clamp(min=0)  # (W, k, E)
        return torch.minimum(room, self.counts).sum(1)  # (W, E)

    def load(self) -> torch.Tensor:
        """(E,): assignments routed to each expert, before dropping."""
        return self.counts.sum((0, 1))

    def keep_mask(self, experts: torch.Tensor) -> torch.Tensor:
        """(N, k) bool for this rank's assignments: inside its expert's capacity."""
        if self.cap is None:
            return torch.ones_like(experts, dtype=torch.bool)
        one_hot = F.one_hot(experts, self.counts.shape[2])  # (N, k, E)
        earlier = one_hot.cumsum(0) - one_hot  # (N, k, E) earlier local tokens, same slot
        position = (earlier + self.starts()[self.rank]).gather(2, experts.unsqueeze(2))  # (N, k, 1)
        return position.squeeze(2) < self.cap  # (N, k)

    def assignments(self, keep: torch.Tensor):
        """(token, slot) of this rank's kept assignments, (A,) each, token-major."""
        return keep.nonzero(as_tuple=True)

    def expert_sizes(self) -> list[int] | None:
        """Rows per expert of this rank's kept assignments (None: count them, `run_experts`)."""
        return None

    def expert_sizes_from(self, group: list[int], first: int, per: int) -> list[int] | None:
        """Rows the experts [first, first + per) receive from the ep group (None: counted)."""
        return None

    def splits(self, group: list[int], first: int, per: int):
        """For an ep group (its world ranks) whose member holds experts [first, first + per):
        (rows this rank sends each peer, rows it receives from each, the expert of each received
        row (R,), grouped by source)."""
        kept = self.kept()  # (W, E) rows each rank sends each expert
        ep = len(group)
        send = kept[self.rank].view(ep, per).sum(1).tolist()  # (ep,) rows to each peer
        mine = kept[group][:, first:first + per]  # (ep, E/ep) rows from each source
        local = torch.arange(first, first + per).repeat(ep)  # (ep·E/ep,) source-major
        return send, mine.sum(1).tolist(), local.repeat_interleave(mine.reshape(-1))

    def log_entry(self, load: torch.Tensor) -> dict:
        dropped = 0 if self.cap is None else int((load - self.cap).clamp(min=0).sum())
        return {"load": load.long().tolist(), "capacity": self.cap, "dropped": dropped,
                "kept": self.kept().tolist()}


def even_experts(n: int, n_experts: int, top_k: int) -> torch.Tensor:
    """(n, k) expert ids of even routing: token i takes (i + j·⌊E/k⌋) mod E in slot j (k distinct
    experts; every expert the same share of each slot when E divides n)."""
    stride = n_experts // top_k
    return (torch.arange(n).unsqueeze(1) + stride * torch.arange(top_k)) % n_experts  # (n, k)


def even_counts(n: int, cfg) -> list[list[int]]:
    """(k, E) of even routing: counts[j][e] = the tokens i < n with (i + j·⌊E/k⌋) mod E == e
    (what `assignment_counts` of `even_experts` gives, without reading a tensor)."""
    E, stride = cfg.n_experts, cfg.n_experts // cfg.top_k
    return [[max(0, (n - (e - j * stride) % E + E - 1) // E) for e in range(E)]
            for j in range(cfg.top_k)]


class EvenPlan:
    """The routing plan of even routing (`even_experts`) as Python integers: every rank routes its
    n tokens alike, so the counts, the queues and what capacity drops follow from n, W, k, E —
    nothing is read from a tensor (a shapes-only run has no values). Same queue order as
    `RoutingPlan`: slot, then rank, then local token."""

    def __init__(self, n: int, world: int, rank: int, cfg):
        E, k = cfg.n_experts, cfg.top_k
        self.n, self.world, self.rank, self.E, self.k = n, world, rank, E, k
        self.counts = even_counts(n, cfg)  # (k, E), the same on every rank
        self.cap = capacity(world * n * k, cfg)
        self.kept_by = [[[self._kept(r, j, e) for e in range(E)] for j in range(k)]
                        for r in range(world)]  # (W, k, E)

    def _kept(self, r: int, j: int, e: int) -> int:
        c = self.counts[j][e]
        if self.cap is None:
            return c
        start = sum(self.world * self.counts[i][e] for i in range(j)) + r * c  # queue position
        return min(c, max(0, self.cap - start))

    def kept(self) -> list[list[int]]:
        """(W, E): assignments of each rank that each expert keeps."""
        return [[sum(self.kept_by[r][j][e] for j in range(self.k)) for e in range(self.E)]
                for r in range(self.world)]

    def load(self) -> torch.Tensor:
        """(E,): assignments routed to each expert, before dropping."""
        return torch.tensor([self.world * sum(self.counts[j][e] for j in range(self.k))
                             for e in range(self.E)])

    def keep_mask(self, experts: torch.Tensor) -> torch.Tensor:
        """(N, k) bool: a token's assignment to (slot j, expert e) is the (i // E)-th of this rank's
        there, kept when below what that queue keeps of this rank's."""
        kept = torch.tensor(self.kept_by[self.rank])  # (k, E)
        threshold = kept[torch.arange(self.k).unsqueeze(0), experts]  # (N, k)
        return (torch.arange(self.n) // self.E).unsqueeze(1) < threshold  # (N, k)

    def assignments(self, keep=None):
        """(token, slot) of this rank's kept assignments, token-major: a token's m-th assignment
        to (slot j, expert e) in local order is i // E, kept when below what the queue keeps."""
        stride, kept = self.E // self.k, self.kept_by[self.rank]
        pairs = [(i, j) for i in range(self.n) for j in range(self.k)
                 if i // self.E < kept[j][(i + j * stride) % self.E]]
        return torch.tensor([i for i, _ in pairs], dtype=torch.long), \
            torch.tensor([j for _, j in pairs], dtype=torch.long)  # (A,), (A,)

    def expert_sizes(self) -> list[int]:
        return self.kept()[self.rank]

    def group_assignments(self, group: list[int], first: int, per: int):
        """(token, slot, expert), (A,) each, of the kept assignments to experts [first, first +
        per) among the ep group's tokens gathered in group order (member m's token i is m·n + i),
        token-major: what `nonzero` of the gathered expert ids would give, from integers alone."""
        stride, rows = self.E // self.k, []
        for m, src in enumerate(group):
            kept = self.kept_by[src]
            rows += [(m * self.n + i, j, e) for i in range(self.n) for j in range(self.k)
                     for e in [(i + j * stride) % self.E]
                     if first <= e < first + per and i // self.E < kept[j][e]]
        return tuple(torch.tensor([r[c] for r in rows], dtype=torch.long) for c in range(3))

    def expert_sizes_from(self, group: list[int], first: int, per: int) -> list[int]:
        """Rows the experts [first, first + per) receive from the ep group."""
        kept = self.kept()
        return [sum(kept[src][e] for src in group) for e in range(first, first + per)]

    def splits(self, group: list[int], first: int, per: int):
        kept = self.kept()
        send = [sum(kept[self.rank][first_j:first_j + per])
                for first_j in range(0, len(group) * per, per)]
        mine = [kept[src][first:first + per] for src in group]  # (ep, E/ep)
        received = [first + e for row in mine for e, rows in enumerate(row) for _ in range(rows)]
        return send, [sum(row) for row in mine], torch.tensor(received, dtype=torch.long)

    def log_entry(self, load: torch.Tensor) -> dict:
        load_list = [self.world * sum(self.counts[j][e] for j in range(self.k))
                     for e in range(self.E)]
        dropped = 0 if self.cap is None else sum(max(0, x - self.cap) for x in load_list)
        return {"load": load_list, "capacity": self.cap, "dropped": dropped, "kept": self.kept(),
                "routing": "even"}
