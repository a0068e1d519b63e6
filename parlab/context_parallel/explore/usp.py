"""USP, Ulysses × ring (Fang & Zhao, "USP: A Unified Sequence Parallelism Approach for Long
Context Generative AI", 2024, arXiv 2405.07719), priced from the closed form: the sequence split
over u·r GPUs, an all-to-all inside each Ulysses group of u (head split), a ring of r across the
groups. Placed on nodes of 8 (Ulysses groups inside a node when u ≤ 8, so the all-to-all rides
NVLink; a ring whose members span nodes is held to its InfiniBand hops, one block per step),
each (u, r) gets its forward bytes per GPU and layer (`cost.usp_bytes`) and their link time,
beside a layer's causal attention FLOPs at the accelerator's sustained rate: the ring's part can
hide behind attention, the all-to-all's cannot (Ulysses waits for it before attending).
Priced, not run: a closed form on real link and accelerator numbers (`parlab.core.link`).
"""

from __future__ import annotations

from parlab.context_parallel.cost import usp_bytes
from parlab.core.link import ACCELERATORS, REAL
from parlab.models.presets import PRESETS


def usp_table(preset: str = "megatron-7.5b", seq_len: int = 131072, gpus: int = 16,
              per_node: int = 8, accelerator: str = "A100") -> list[dict]:
    """One row per split u × r = `gpus` (u dividing the heads): bytes per GPU and layer over
    NVLink and over InfiniBand, their seconds (α ignored: a handful of µs per layer), the
    all-to-all's time (exposed: Ulysses cannot attend before it) and the ring's (hidden when the
    attention outlasts it), and one layer's causal attention time from its FLOPs."""
    cfg, acc = PRESETS[preset], ACCELERATORS[accelerator]
    nh, C = cfg["n_head"], cfg["n_embd"]
    nvlink, ib = REAL[acc.nvlink][1], REAL[acc.inter][1]
    attention_s = 4 * seq_len ** 2 * C / 2 / gpus / acc.flops  # causal: half the T² scores
    rows = []
    u = 1
    while u <= gpus:
        r = gpus // u
        if nh % u == 0:
            b = usp_bytes(1, nh, seq_len, C // nh, u, r)  # bf16
            a2a_s = b["ulysses"] / (nvlink if u <= per_node else ib)
            ring_link = ib if r > 1 and u * r > per_node else nvlink
            ring_s = b["ring"] / ring_link
            exposed = a2a_s + max(0.0, ring_s - attention_s)
            rows.append({"ulysses u": u, "ring r": r,
                         "all-to-all MB": round(b["ulysses"] / 1e6, 1),
                         "all-to-all link": "NVLink" if u <= per_node else "IB",
                         "ring MB": round(b["ring"] / 1e6, 1),
                         "ring link": "IB" if ring_link == ib else "NVLink",
                         "all-to-all ms": round(a2a_s * 1e3, 2), "ring ms": round(ring_s * 1e3, 2),
                         "attention ms": round(attention_s * 1e3, 2),
                         "exposed ms": round(exposed * 1e3, 2)})
        u *= 2
    return rows


def explain_usp(rows: list[dict], preset: str = "megatron-7.5b", seq_len: int = 131072,
                accelerator: str = "A100") -> dict:
    """Print the split with the least exposed communication per layer and the pure ring's and
    pure Ulysses' beside it, computed from the rows."""
    best = min(rows, key=lambda r: r["exposed ms"])
    ring = next(r for r in rows if r["ulysses u"] == 1)
    uly = max(rows, key=lambda r: r["ulysses u"])
    print(f"{preset} shapes, T = {seq_len:,}, bf16, {accelerator}s in nodes of 8 (NVLink inside, "
          f"{ACCELERATORS[accelerator].inter} across), per GPU and layer, forward:")
    print(f"least exposed: u = {best['ulysses u']} × r = {best['ring r']} ({best['exposed ms']} ms "
          f"exposed of a {best['attention ms']} ms attention); pure ring (u = 1): "
          f"{ring['exposed ms']} ms; u = {uly['ulysses u']}, r = {uly['ring r']}: "
          f"{uly['exposed ms']} ms")
    return best
