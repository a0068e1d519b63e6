"""Notebook 10 at real scale, in closed form (no run): subnetwork data parallelism (Singh, Khalid,
Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data Parallelism", 2025) of a Llama 3 8B-
shaped model (`parlab.models.presets`: 32 blocks; embeddings, final norm and the untied head
shared) on 8 H100s, block level: model states per GPU (16Ψ_r forward masking, 4Ψ + 12Ψ_r backward,
fp32 with AdamW) against the H100's 80 GB and DDP's 16Ψ, and a step's gradient bytes per rank
(`parlab.subnet.cost.step_bytes`) on NVLink 4 and on NDR InfiniBand, against DDP's ring all-reduce
2(N−1)/N·4Ψ (Patarasuk & Yuan 2009).
"""

from __future__ import annotations

from parlab.core.link import ACCELERATORS, REAL
from parlab.models import presets
from parlab.models.gpt import GPTConfig, param_count
from parlab.subnet import cost as subnet_cost
from parlab.subnet.exercises import block_ownership


def model_split(model: str = "llama3-8b") -> tuple[int, int, int]:
    """(blocks, parameters per block, shared parameters) of a preset GPT-family model."""
    cfg = presets.PRESETS[model]
    total, shared = param_count(GPTConfig(**cfg)), param_count(GPTConfig(**{**cfg, "n_layer": 0}))
    return cfg["n_layer"], (total - shared) // cfg["n_layer"], shared


def sdp_at_scale(model: str = "llama3-8b", world_size: int = 8, accelerator: str = "H100",
                 owners=(1, 2, 4, 8)) -> list[dict]:
    """Print and return, per k: the worst rank's model states (both maskings) and its forward-
    masking bytes per step with their time on the accelerator's NVLink and on NDR InfiniBand."""
    blocks, block, shared = model_split(model)
    psi = blocks * block + shared
    acc = ACCELERATORS[accelerator]
    links = (acc.nvlink, acc.inter)
    print(f"closed form (no run): {model} (Ψ = {psi:,}: {blocks} blocks of {block:,}, {shared:,} "
          f"shared), N = {world_size} {accelerator}s ({acc.memory_bytes / 1e9:.0f} GB each), fp32 + AdamW, "
          "block level")
    print(f"{'k':>3} {'fwd states GB':>14} {'bwd states GB':>14} {'fwd GB sent':>12} "
          + " ".join(f"{name + ' s':>12}" for name in links))
    rows = []
    for k in list(owners):
        own = block_ownership(world_size, k, blocks=blocks, block=block, shared=shared)

        fwd, bwd = (max(sum(subnet_cost.memory_formula(own, mask, r).values()) for r in range(world_size))
                    for mask in ("forward", "backward"))
        sent = max(sum(subnet_cost.step_bytes(own, "forward", r).values()) for r in range(world_size))
        times = [sent / REAL[name][1] for name in links]  # bytes/β per step, seconds
        rows.append({"k": k, "forward_states": fwd, "backward_states": bwd, "sent": sent,
                     **{name: t for name, t in zip(links, times)}})
        print(f"{k:>3} {fwd / 1e9:>14.1f} {bwd / 1e9:>14.1f} {sent / 1e9:>12.1f} "
              + " ".join(f"{t:>12.3f}" for t in times))
    ddp_states, ddp_sent = 16 * psi, 2 * (world_size - 1) / world_size * 4 * psi
    print(f"DDP: {ddp_states / 1e9:.1f} GB of states per GPU, {ddp_sent / 1e9:.1f} GB sent per step")
    fit = [r["k"] for r in rows if r["forward_states"] <= acc.memory_bytes]
    print(f"verdict: DDP's states {'fit' if ddp_states <= acc.memory_bytes else 'do NOT fit'} an "
          f"{accelerator}'s {acc.memory_bytes / 1e9:.0f} GB; forward masking fits at k = "
          f"{', '.join(map(str, fit)) or 'none'} (before activations); k = N is DDP")
    return rows
