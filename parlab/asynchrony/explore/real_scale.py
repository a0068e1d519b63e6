"""Notebook 09's parameter server at real scale, in closed form (no run): a GPT-2 XL-shaped model
(`parlab.models.presets`) on A100s, a fixed global batch split over W workers (equal work: the same
tokens per update whatever W). Per synchronous update a worker computes 6·Ψ·tokens/W FLOPs (the
6ΨT training rule, Kaplan et al. 2020) while each of k servers receives W messages of 16 + 4Ψ/k
bytes through its own link (Li et al., "Scaling Distributed Machine Learning with the Parameter
Server", OSDI 2014: the server group's key ranges). Compute per worker falls as 1/W and a server's
bytes grow as W/k, so a server's receive time over a worker's compute grows as W², and the servers
needed to keep the link off the critical path with it.
"""

from __future__ import annotations

from parlab.asynchrony import cost
from parlab.core.link import ACCELERATORS, REAL
from parlab.models import presets
from parlab.models.gpt import GPTConfig, param_count


def model_params(model: str = "gpt2-xl") -> int:
    return param_count(GPTConfig(**presets.PRESETS[model]))


def servers_for(numel: int, workers: int, compute_s: float, link: str) -> int:
    """Smallest k whose busiest server receives an update's W pushes (α + bytes/β) within compute_s."""
    alpha, beta = REAL[link]
    return next(k for k in range(1, 10**6)
                if alpha + cost.busiest_server_in(numel, workers, k) / beta <= compute_s)


def server_at_scale(model: str = "gpt2-xl", accelerator: str = "A100", link: str = "HDR-IB",
                    sequences: int = 512, workers=(7, 15, 31, 63)) -> list[dict]:
    """Print and return, per W: compute per worker per update, one server's receive time, and the
    smallest k that keeps the servers' links within the compute (closed forms, no run)."""
    numel = model_params(model)
    seq = presets.PRESETS[model]["block_size"]
    flops = ACCELERATORS[accelerator].flops
    alpha, beta = REAL[link]
    print(f"closed form (no run): {model} (Ψ = {numel:,}), {accelerator} at {flops / 1e12:.0f} TFLOP/s "
          f"sustained, {link} ({beta / 1e9:.0f} GB/s per GPU), a global batch of {sequences} × {seq} "
          "tokens per update split over W workers (equal work)")
    print(f"{'W':>4} {'compute s/update':>17} {'1 server: receive s':>20} {'ratio':>7} "
          f"{'servers k needed':>17}")
    rows = []
    for w in workers:
        compute = 6 * numel * sequences * seq / w / flops
        one = alpha + cost.busiest_server_in(numel, w) / beta
        k = servers_for(numel, w, compute, link)
        rows.append({"workers": w, "compute_s": compute, "one_server_s": one, "servers": k})
        print(f"{w:>4} {compute:>17.3f} {one:>20.3f} {one / compute:>6.1f}× {k:>17}")
    first, last = rows[0], rows[-1]
    grow = (last["one_server_s"] / last["compute_s"]) / (first["one_server_s"] / first["compute_s"])
    span = last["workers"] / first["workers"]
    holds = abs(grow / span ** 2 - 1) <= 0.05
    print(f"verdict: from W = {first['workers']} to {last['workers']} ({span:.1f}× the workers) one server's "
          f"receive time ÷ a worker's compute grew {grow:.1f}× (W² predicts {span ** 2:.1f}×): "
          f"{'holds' if holds else 'does not hold'} within 5%; the servers needed (≈ that ratio, rounded "
          f"up) went {first['servers']} → {last['servers']} — why a parameter server is sharded over many "
          "machines")
    return rows
