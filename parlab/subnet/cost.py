"""Closed forms for chapter 10: memory per rank and bytes per rank of Subnetwork Data Parallelism.

Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data Parallelism" (2025).

Memory (fp32, bytes). Let Ψ be the model's parameters and Ψ_r what rank r owns (its units plus
the shared parameters). With AdamW's two moments (SGD: none):

    forward masking:   params 4Ψ_r   grads 4Ψ_r   optimizer 8Ψ_r   = 16Ψ_r
    backward masking:  params 4Ψ     grads 4Ψ_r   optimizer 8Ψ_r   = 4Ψ + 12Ψ_r
    DDP:               16Ψ

With B interchangeable blocks of b parameters each, s shared parameters and k of N owners per
block, Ψ_r ≈ s + k·B·b/N: forward masking divides the blocks' memory by N/k.

Bytes sent per rank per step. The units owned by exactly the set S are all-reduced in one flat
buffer among S (ring: 2(|S|-1)/|S| of its elements, exactly `parlab.core.cost.ring_all_reduce`), so

    sent_r = Σ_{S ∋ r, |S| > 1} ring_all_reduce(P_S, |S|, position of r in S) · 4

and with backward masking the refresh all-gather adds (N-1)·max_r(published_r)·4 (gloo's gather
pads every rank's part to the largest). One-owner units (k = 1) move nothing at all.
"""

from __future__ import annotations

from parlab.core import cost
from parlab.core.cost import FP32_BYTES
from parlab.engine.loop import build_model
from parlab.engine.prediction import Prediction
from parlab.subnet.ownership import Ownership, assign


def default_owners(world_size: int) -> int:
    """owners=None: each parameter on half the ranks (all of them on one rank)."""
    return max(1, world_size // 2)


def ownership_of(cfg) -> Ownership:
    """The run's ownership, computed from its config as every rank computes it."""
    o = cfg.options
    owners = o["owners"] if o["owners"] is not None else default_owners(cfg.world_size)
    return assign(build_model(cfg), cfg.world_size, owners, o["granularity"])


def memory_formula(ownership: Ownership, mask: str, rank: int, optimizer: str = "adamw") -> dict:
    """{params, grads, optimizer}: bytes rank `rank` holds (see the module docstring)."""
    owned = ownership.owned_numel(rank)
    held = ownership.numel if mask == "backward" else owned
    adam = 2 if optimizer == "adamw" else 0
    return {"params": FP32_BYTES * held, "grads": FP32_BYTES * owned,
            "optimizer": adam * FP32_BYTES * owned}


def ddp_memory(psi: int, optimizer: str = "adamw") -> dict:
    adam = 2 if optimizer == "adamw" else 0
    return {"params": FP32_BYTES * psi, "grads": FP32_BYTES * psi, "optimizer": adam * FP32_BYTES * psi}


def refreshes(ownership: Ownership, mask: str) -> bool:
    """Backward masking with some unit not owned by every rank: the refresh all-gather runs."""
    return mask == "backward" and any(len(u.owners) < ownership.world_size
                                      for u in ownership.units if u.numel)


def step_bytes(ownership: Ownership, mask: str, rank: int) -> dict[str, int]:
    """{phase: bytes} rank `rank` sends in one step: 'grad-sync' and 'param-refresh'."""
    sync = 0
    for owners in ownership.owner_sets():
        if len(owners) > 1 and rank in owners:
            sync += cost.ring_all_reduce(ownership.set_numel(owners), len(owners),
                                         owners.index(rank))[0]
    refresh = 0
    if refreshes(ownership, mask):
        n = ownership.world_size
        width = max(ownership.published_numel(r) for r in range(n))
        refresh = cost.ring_all_gather(width * n, n, rank)[0]  # = (N-1)·width
    return {"grad-sync": FP32_BYTES * sync, "param-refresh": FP32_BYTES * refresh}


def ddp_step_bytes(numels: list[int], n: int, rank: int) -> int:
    """ddp-naive: one ring all-reduce per parameter tensor, over all N ranks."""
    return FP32_BYTES * sum(cost.ring_all_reduce(s, n, rank)[0] for s in numels)


def sdp_prediction(cfg) -> Prediction:
    """What the ledger of `sdp` must hold: steps × bytes per step, per rank."""
    own = ownership_of(cfg)
    mask = cfg.options["mask"]
    per_rank = [sum(step_bytes(own, mask, r).values()) * cfg.steps for r in range(cfg.world_size)]
    return Prediction(per_rank, "parlab.subnet.cost.step_bytes: owner-set ring all-reduces"
                      + (" + the refresh all-gather" if refreshes(own, mask) else ""))
