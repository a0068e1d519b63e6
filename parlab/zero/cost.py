"""Closed forms for chapter 02: ZeRO's model-state memory per rank and bytes per step.

Memory (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC 2020, §5, Fig. 1): of the 4Ψ + 4Ψ + 8Ψ bytes of fp32 parameters, gradients and Adam
moments, ZeRO-1 divides the moments by N, ZeRO-2 the gradients too, ZeRO-3 everything
(`memory_formula`; the paper's mixed-precision setting: `mixed_precision_formula`).

Bytes (§7.2.2): reduce-scatter and all-gather of a padded flat unit P (`parlab.zero.shard`) each
send (N-1)/N·P per rank; ZeRO-1 and -2 reduce-scatter the gradients and all-gather the updated
parameters (what DDP's all-reduce sends), ZeRO-3 all-gathers before forward and again before
backward (1.5 × DDP). `phase_bytes` names each collective's ledger phase, `step_bytes` sums
them, `predict` is the schemes' registered `cost=`.
"""

from __future__ import annotations

from parlab.core.cost import element_bytes, overflow_check_bytes, round_up
from parlab.core.messages import Message, bytes_by
from parlab.engine.loop import build_model
from parlab.engine.prediction import Prediction
from parlab.zero.shard import unit_modules


def memory_formula(stage: int, psi: int, world: int, bytes_per=4, adam_states=2) -> dict:
    """Bytes per rank of model states, ZeRO paper §5 (Fig. 1) with fp32 training and Adam:
    DDP (stage 0) 4Ψ + 4Ψ + 8Ψ; ZeRO-1 4Ψ + 4Ψ + 8Ψ/N; ZeRO-2 4Ψ + (4Ψ + 8Ψ)/N; ZeRO-3 16Ψ/N.
    (The paper's mixed-precision K=12 becomes 8 here: in fp32 the master weights are the weights.)"""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage={stage!r} must be 0 (DDP), 1, 2 or 3")
    full, part = psi * bytes_per, psi * bytes_per / world
    return {"params": part if stage >= 3 else full, "grads": part if stage >= 2 else full,
            "optimizer": adam_states * (part if stage >= 1 else full)}


def mixed_precision_formula(stage: int, psi: float, world: int, param_bytes: int = 2,
                            grad_bytes: int = 2, k: int = 12) -> dict:
    """Bytes per rank of model states in the ZeRO paper's setting (§3.1, Fig. 1): fp16/bf16
    parameters and gradients (2Ψ + 2Ψ) and K = 12 bytes of Adam state per parameter (fp32 master
    weight, momentum, variance: 4 + 4 + 4). DDP 16Ψ; ZeRO-1 4Ψ + 12Ψ/N; ZeRO-2 2Ψ + 14Ψ/N;
    ZeRO-3 16Ψ/N. Our fp32 runs (`memory_formula`) keep no master copy: 4 + 4 + 8 = 16Ψ too, but
    split differently, so the ZeRO-1/2 totals differ (8Ψ + 8Ψ/N and 4Ψ + 12Ψ/N)."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage={stage!r} must be 0 (DDP), 1, 2 or 3")
    return {"params": psi * param_bytes / (world if stage >= 3 else 1),
            "grads": psi * grad_bytes / (world if stage >= 2 else 1),
            "optimizer": k * psi / (world if stage >= 1 else 1)}


def predict(stage: int, cfg) -> Prediction:
    """Bytes each rank sends over the run (`step_bytes` of the model's flat units, every step)."""
    units = [sum(p.numel() for _, p in params if p.requires_grad)
             for _, _, params in unit_modules(build_model(cfg))]
    precision, n = getattr(cfg, "precision", "fp32"), cfg.world_size  # 16 bits: half the bytes
    per_step = [step_bytes(stage, units, n, element_bytes(precision))
                + overflow_check_bytes(precision, n, rank) for rank in range(n)]
    return Prediction([cfg.steps * b for b in per_step],
                      f"parlab.zero.cost.step_bytes(stage={stage}), ZeRO paper §7.2.2")


def zero_messages(stage: int, unit_numels: list[int], world: int, bytes_per=4,
                  dim: str = "dp") -> list[Message]:
    """ZeRO's collectives per step (Rajbhandari et al., SC 2020, §7.2.2), per padded flat unit P
    (`parlab.zero.shard`): a reduce-scatter of its gradients ("grad-reduce-scatter") and the
    parameters' all-gather ("param-all-gather"; stage 3 one before forward, "param-gather-fwd",
    and one before backward, "param-gather-bwd"), each (N-1)/N·P per rank."""
    if stage not in (1, 2, 3):
        raise ValueError(f"stage={stage!r} must be 1, 2 or 3")
    gathers = ("param-gather-fwd", "param-gather-bwd") if stage == 3 else ("param-all-gather",)
    out = []
    for numel in unit_numels:
        if numel:
            padded = round_up(numel, world)
            out += [Message(dim, "reduce_scatter", world, padded, element_bytes=bytes_per,
                            phase="grad-reduce-scatter")]
            out += [Message(dim, "all_gather", world, padded, element_bytes=bytes_per, phase=g)
                    for g in gathers]
    return out


def step_bytes(stage: int, unit_numels: list[int], world: int, bytes_per=4) -> int:
    """Bytes each rank sends per step: `zero_messages` summed — ZeRO-1 and -2 2(N-1)/N·ΣP,
    what DDP's all-reduce sends; ZeRO-3 3(N-1)/N·ΣP = 1.5 × DDP (ZeRO paper §7.2.2)."""
    return sum(phase_bytes(stage, unit_numels, world, bytes_per).values())


def phase_bytes(stage: int, unit_numels: list[int], world: int, bytes_per=4) -> dict[str, int]:
    """{ledger phase: bytes each rank sends per step}: `zero_messages` summed by phase."""
    msgs = zero_messages(stage, unit_numels, world, bytes_per)
    gathers = ("param-gather-fwd", "param-gather-bwd") if stage == 3 else ("param-all-gather",)
    return {**dict.fromkeys(("grad-reduce-scatter", *gathers), 0), **bytes_by(msgs, rank=0)}


def hsdp_step_bytes(psi: int, world: int, shard: int, rank: int = 0, bytes_per=4) -> int:
    """Bytes rank `rank` sends per step under HSDP (Zhao et al., VLDB 2023, §3.2.2) over groups of
    `shard` ranks: two ring all-gathers and a ring reduce-scatter of Ψ among the G ranks of its
    shard group, then a ring all-reduce of its ⌈Ψ/G⌉ shard among the N/G replicas
    (`parlab.zero.torch_hybrid`; nominal, as its ledger records them)."""
    from parlab.core import cost

    if world % shard:
        raise ValueError(f"shard={shard!r} must divide world={world!r}")
    g, r = shard, world // shard
    sent = 2 * cost.ring_all_gather(psi, g, rank % g)[0] + cost.ring_reduce_scatter(psi, g, rank % g)[0]
    sent += cost.ring_all_reduce(-(-psi // g), r, rank // g)[0]
    return sent * bytes_per
