"""What notebooks/02_zero.ipynb runs at a real model's size (`parlab.zero.real_scale`, closed forms,
no tensor made): what fits on an 80 GB A100 per ZeRO stage and N for `gpt2-xl` and `llama3-8b`,
HSDP against FSDP across nodes of 8 A100s, ZeRO-Offload's PCIe traffic, and one step's memory over
time for ZeRO-1/2/3. Every verdict is computed from the printed numbers.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from parlab.core.link import ACCELERATORS
from parlab.zero import real_scale as rs

PRESETS = ("gpt2-xl", "llama3-8b")
STAGES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}


def fit_table(presets=PRESETS, worlds=(1, 8, 64), recompute: str = "selective") -> list[dict]:
    """Per preset, stage and N: GB per rank of parameters, gradients, optimizer states and
    activations (one sequence of the preset's block per rank), and whether it fits in 80 GB."""
    memory = ACCELERATORS["A100"].memory_bytes
    rows = []
    for preset in presets:
        cfg = rs._config(preset)
        print(f"{preset}: Ψ = {rs.psi(preset):,} parameters; activations: 1 sequence of "
              f"{cfg.block_size:,} tokens per rank, {recompute} recomputation (Korthikanti et al. "
              f"2023): {rs.activation_bytes(preset, recompute=recompute) / 1e9:.2f} GB")
        print(f"{'stage':>7} {'N':>3} {'params':>7} {'grads':>7} {'optim':>7} {'activ':>7} "
              f"{'total GB':>8}  fits {memory / 1e9:.0f} GB A100")
        for r in rs.stage_rows(preset, worlds, memory, recompute=recompute):
            print(f"{STAGES[r['stage']]:>7} {r['N']:>3} {r['params'] / 1e9:>7.2f} "
                  f"{r['grads'] / 1e9:>7.2f} {r['optimizer'] / 1e9:>7.2f} "
                  f"{r['activations'] / 1e9:>7.2f} {r['total'] / 1e9:>8.2f}  "
                  f"{'yes' if r['fits'] else 'no'}")
            rows.append(r)
        lowest = {n: next((STAGES[r["stage"]] for r in rows if r["preset"] == preset
                           and r["N"] == n and r["fits"]), "none") for n in worlds}
        print("  lowest stage that fits, by N: " + ", ".join(f"N={n}: {s}" for n, s in lowest.items()))
    return rows


def hsdp_table(preset: str = "llama3-8b", nodes=(1, 2, 8), acc: str = "A100") -> list[dict]:
    """FSDP over every GPU against HSDP (shard inside a node of 8, replicate across): bytes and
    α-β seconds of one step's collectives, and the model states each rank holds."""
    rows = [rs.hsdp_price(preset, r, acc=acc) for r in nodes]
    first = rows[0]
    print(f"{preset} on nodes of 8 {acc}s: {first['intra']} inside a node, {first['inter']} across "
          f"(16-bit parameters and gradients; Zhao et al. 2023 §3.2.2)")
    print(f"{'nodes':>5} {'N':>4} | {'FSDP GB sent':>12} {'FSDP ms':>8} {'states GB':>9} | "
          f"{'HSDP in-node GB':>15} {'across GB':>9} {'HSDP ms':>8} {'states GB':>9} | faster")
    for r in rows:
        faster = "HSDP" if r["hsdp_s"] < r["fsdp_s"] else "FSDP" if r["fsdp_s"] < r["hsdp_s"] else "tie"
        print(f"{r['nodes']:>5} {r['N']:>4} | {r['fsdp_bytes'] / 1e9:>12.2f} "
              f"{1e3 * r['fsdp_s']:>8.1f} {r['fsdp_states'] / 1e9:>9.2f} | "
              f"{r['hsdp_intra_bytes'] / 1e9:>15.2f} {r['hsdp_inter_bytes'] / 1e9:>9.3f} "
              f"{1e3 * r['hsdp_s']:>8.1f} {r['hsdp_states'] / 1e9:>9.2f} | {faster}")
    many = [r for r in rows if r["nodes"] > 1]
    if many:
        ok = all(r["hsdp_s"] < r["fsdp_s"] and r["hsdp_states"] > r["fsdp_states"] for r in many)
        print(f"across nodes HSDP sends less over InfiniBand and holds more per rank "
              f"(16Ψ/8 vs 16Ψ/N): {'holds' if ok else 'fails'}")
    return rows


def offload_table(presets=PRESETS, worlds=(1, 8), acc: str = "A100") -> list[dict]:
    """ZeRO-Offload on ZeRO-2: GPU bytes per rank (with one sequence's selective-recompute
    activations, and whether that fits) beside plain ZeRO-2's states, host bytes, PCIe bytes and
    seconds per step beside the step's compute (one sequence of the block per GPU) on `acc`."""
    print(f"ZeRO-Offload (Ren et al. 2021) on ZeRO-2, PCIe 4.0 ×16 at {rs.PCIE_BPS / 1e9:.0f} GB/s "
          f"each way, compute 6Ψ·tokens at {acc}'s {ACCELERATORS[acc].flops / 1e12:.0f} TFLOP/s")
    memory = ACCELERATORS[acc].memory_bytes
    print(f"{'preset':>10} {'N':>3} {'GPU GB':>7} {'+activ':>7} {'fits':>4} {'(ZeRO-2)':>8} "
          f"{'host GB':>8} {'PCIe GB':>8} {'PCIe ms':>8} {'compute ms':>10}  PCIe hidden by compute")
    rows = []
    for preset in presets:
        for n in worlds:
            r = rs.offload_price(preset, n, acc=acc)
            gpu = r["gpu_states"] + rs.activation_bytes(preset)
            print(f"{preset:>10} {n:>3} {r['gpu_states'] / 1e9:>7.2f} {gpu / 1e9:>7.2f} "
                  f"{'yes' if gpu <= memory else 'no':>4} {r['zero2_states'] / 1e9:>8.2f} "
                  f"{r['host_states'] / 1e9:>8.2f} {r['pcie_bytes'] / 1e9:>8.2f} "
                  f"{1e3 * r['pcie_s']:>8.1f} {1e3 * r['compute_s']:>10.1f}  "
                  f"{'yes' if r['pcie_s'] <= r['compute_s'] else 'no'}")
            rows.append(r)
    return rows


def plot_profile(preset: str = "gpt2-xl", world: int = 8, stages=(1, 2, 3), ax=None) -> dict:
    """One step's memory over time per stage (`real_scale.memory_profile`), with each peak."""
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 3.6))
    peaks = {}
    for stage in stages:
        prof = rs.memory_profile(preset, stage, world)
        ax.plot(range(len(prof)), [b / 1e9 for _, b in prof], label=STAGES[stage])
        peak = max(prof, key=lambda e: e[1])
        peaks[stage] = peak
    layers = len(rs.units(preset)[1])  # phases: rest, L forwards, L backwards, step
    ax.set_xticks([0, (layers + 1) / 2, layers + (layers + 1) / 2, 2 * layers + 1],
                  ["rest", f"forward (blocks 0 … {layers - 1})",
                   f"backward (blocks {layers - 1} … 0)", "step"], fontsize=8)
    ax.axvline(layers + 0.5, color="grey", lw=0.6, ls=":")
    ax.set_ylabel("GB held by one rank")
    ax.set_title(f"{preset}, N = {world}, one step: forward, backward, optimizer (closed forms)")
    ax.legend()
    for stage, (phase, b) in peaks.items():
        print(f"{STAGES[stage]}: peak {b / 1e9:.2f} GB at {phase!r}; at rest "
              f"{rs.memory_profile(preset, stage, world)[0][1] / 1e9:.2f} GB")
    return peaks
