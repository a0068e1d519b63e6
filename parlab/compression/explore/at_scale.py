"""Notebook 08 at real scale: gpt2-xl's gradients (the preset's shapes, `parlab.models.presets`)
synced over 8 and 64 A100s (NVLink 3 inside a node of 8, HDR InfiniBand between:
`parlab.core.link.REAL`) — ddp-bucketed as the baseline (25 MB buckets, each a ring all-reduce),
top-k and PowerSGD by their closed forms (`parlab.compression.cost`, held equal to the ledger by
the tests). An α-β estimate, not a run (the compressors do not run shapes-only):

    time = rounds · α + bytes / β of the slowest link in the ring (InfiniBand once it leaves a node)
    ring all-reduce of a bucket: 2(N−1) rounds; all-gather: N−1; PowerSGD: two all-reduces
    compute per step: 6·Ψ·tokens FLOPs (Kaplan et al. 2020) at the A100's sustained rate
"""

from __future__ import annotations

import math

import torch

from parlab.compression import cost
from parlab.core.link import ACCELERATORS, REAL

PER_NODE = 8


def gpt2xl_shapes() -> list[tuple]:
    """The gpt2-xl preset's parameter shapes (built on the meta device: no memory)."""
    from parlab.models.gpt import GPT, GPTConfig
    from parlab.models.presets import PRESETS

    with torch.device("meta"):
        model = GPT(GPTConfig(**PRESETS["gpt2-xl"]))
    return [tuple(p.shape) for p in model.parameters()]


# (scheme, its options, its collective): the baseline first
SCHEMES = (("ddp-bucketed", {}, "buckets"), ("topk", {"ratio": 0.01}, "all-gather"),
           ("powersgd", {"rank": 4}, "two all-reduces"))
ROUNDS = {"all-gather": lambda n: n - 1, "two all-reduces": lambda n: 2 * 2 * (n - 1)}


def sync_seconds(scheme: str, shapes, n: int, collective: str, bucket_mb: float = 25.0,
                 **options) -> dict:
    """Bytes per rank and α-β seconds of one step's gradient sync over nodes of 8: `collective`
    "buckets" is a ring all-reduce per `bucket_mb` bucket of every fp32 gradient, else the
    scheme's closed form (`cost.bytes_per_step`) in `ROUNDS[collective](n)` rounds."""
    alpha, beta = REAL["NVLink3" if n <= PER_NODE else "HDR-IB"]
    params = sum(math.prod(s) for s in shapes)
    if collective == "buckets":
        nbytes = 2 * (n - 1) / n * 4 * params
        rounds = math.ceil(4 * params / (bucket_mb * 1e6)) * 2 * (n - 1)
    else:
        nbytes = sum(cost.bytes_per_step(scheme, shapes, n, **options).values())
        rounds = ROUNDS[collective](n)
    return {"bytes": nbytes, "latency_s": rounds * alpha, "bytes_s": nbytes / beta,
            "seconds": rounds * alpha + nbytes / beta}


def step_table(world_sizes=(8, 64), tokens: int = 8192, accelerator: str = "A100") -> dict:
    """Per world size: each scheme's sync beside ddp-bucketed's, and the estimated step
    (compute + sync: this package's ddp-bucketed syncs after the backward, nothing overlaps)."""
    shapes = gpt2xl_shapes()
    params = sum(math.prod(s) for s in shapes)
    compute = 6 * params * tokens / ACCELERATORS[accelerator].flops
    print(f"gpt2-xl ({params:,} parameters), {tokens:,} tokens per GPU per step: compute "
          f"6·Ψ·tokens at the A100's sustained {ACCELERATORS[accelerator].flops / 1e12:g} TFLOP/s = "
          f"{compute * 1e3:.0f} ms; α-β estimate (not a run), encode/decode operators left out")
    out = {}
    for n in world_sizes:
        link = "NVLink 3" if n <= PER_NODE else "HDR InfiniBand (between nodes of 8)"
        print(f"\nN = {n}, ring bounded by {link}:")
        print(f"  {'scheme':<13} {'MB sent':>9} {'latency ms':>11} {'bytes/β ms':>11} "
              f"{'step ms':>9} {'vs ddp-bucketed':>16}")
        rows = {name: sync_seconds(name, shapes, n, how, **opts) for name, opts, how in SCHEMES}
        baseline = SCHEMES[0][0]
        base = compute + rows[baseline]["seconds"]
        for name, r in rows.items():
            step = compute + r["seconds"]
            print(f"  {name:<13} {r['bytes'] / 1e6:>9,.1f} {r['latency_s'] * 1e3:>11.2f} "
                  f"{r['bytes_s'] * 1e3:>11.1f} {step * 1e3:>9.0f} {base / step:>15.2f}×")
        b = rows[baseline]
        bound = "bandwidth" if b["bytes_s"] > b["latency_s"] else "latency"
        best = min(rows, key=lambda k: rows[k]["seconds"])
        print(f"  ddp-bucketed is {bound}-bound here (bytes/β {b['bytes_s'] * 1e3:.1f} ms vs "
              f"rounds·α {b['latency_s'] * 1e3:.2f} ms); fewer bytes give the shortest step: {best}, "
              f"{base / (compute + rows[best]['seconds']):.2f}× shorter than ddp-bucketed")
        out[n] = rows
    return out
