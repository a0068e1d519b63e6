"""Notebook 08 at real scale, run: gpt2-xl-width gradient sync shapes-only on 8 paced A100s.

`at_scale.step_table` prices the compressors by α-β alone; this runs them: the chapter's own
`topk` and `powersgd` schemes and chapter 01's `ddp-bucketed` (25 MiB buckets after backward) as
the baseline, at gpt2-xl's shapes (`parlab.models.presets`: width 1600, 25 heads, its
50,257-token tied embedding, sequences of 1,024) with `layers` of its 48 blocks,
`shapes_only=True` on `clock="A100"`. On fake tensors top-k's selection, the decoding of every
rank's message and PowerSGD's QR run their meta kernels inside the compressor's compute span and
are priced like any other operator (`parlab.core.shapes`, `parlab.core.pacer`; both schemes are
tested equal to their real paced runs, tests/test_compression_scale.py), and the bytes, fixed by
the shapes, cross the link at their true size. What shapes-only cannot give is values: no loss
(accuracy comes from the chapter's real runs). The cluster: two nodes of 4 A100s, NVLink 3
inside, the real EDR InfiniBand (100 Gb/s per GPU) between (`parlab.core.topology.nodes`); a ring
collective is charged on the slowest link of its group.

The α-β estimate beside it (Hockney 1994; ring collectives: Thakur, Rabenseifner & Gropp 2005):

    step ≈ 6·Ψ·t / F  +  Σ_collectives (k·α + b/β)       (Kaplan et al. 2020 for 6Ψt)
    ring all-reduce of S bytes: k = 2(N−1), b = 2(N−1)/N·S
    ring all-gather of N messages of P bytes: k = N−1, b = (N−1)·P
    ddp-bucketed: one all-reduce per ⌈4Ψ / bucket⌉ bucket; top-k and PowerSGD: their closed forms
    (`parlab.compression.compressed_reducers.step_messages`)

It leaves out what the run prices beyond the link and 6Ψt: the compressors' own operators,
memory-bound kernels (norms, softmax, the optimizer) and launches.
"""

from __future__ import annotations

import math

PRESET, WORLD, PER_NODE, INTER = "gpt2-xl", 8, 4, "100Gb-IB"
BUCKET_MB = 25.0  # MiB, ddp-bucketed's bucket_mb
# (scheme, its options): the baseline first (pairs, not a table keyed by scheme names)
SCHEMES = (("ddp-bucketed", {"bucket_mb": BUCKET_MB}), ("topk", {"ratio": 0.01}),
           ("powersgd", {"rank": 4}))


def cluster(n: int = WORLD, per_node: int = PER_NODE, inter: str = INTER):
    """Nodes of `per_node` A100s: NVLink inside, the real `inter` link between."""
    from parlab.core.topology import nodes

    return nodes(n, per_node, "NVLink", inter)


def shapes(layers: int, preset: str = PRESET) -> list[tuple]:
    """The preset's parameter shapes with `layers` blocks (meta device: no memory)."""
    import torch

    from parlab import models
    from parlab.models.presets import PRESETS

    with torch.device("meta"):
        net = models.build_model("gpt", models.model_config(
            "gpt", {**PRESETS[preset], "n_layer": layers}), 0)
    return [tuple(p.shape) for p in net.parameters()]


def estimate(scheme: str, options: dict, shape_list, n: int, tokens: int, inter: str = INTER,
             accelerator: str = "A100") -> dict:
    """The α-β estimate of one step: compute 6Ψt/F and each collective's k·α + b/β on `inter`."""
    from parlab.compression.compressed_reducers import compressors, step_messages
    from parlab.core.link import ACCELERATORS, real

    link = real(inter)
    psi = sum(math.prod(s) for s in shape_list)
    compute = 6 * psi * tokens / ACCELERATORS[accelerator].flops
    if scheme in compressors():  # a chapter-08 compressor: its registered closed form
        ops = []
        for op, elements, width in step_messages(scheme, shape_list, n, options):
            if op == "all_gather":  # `elements` is all N messages: each rank forwards N−1 of them
                ops.append((n - 1, (n - 1) * elements // n * width))
            else:  # ring all-reduce
                ops.append((2 * (n - 1), 2 * (n - 1) * elements * width / n))
    else:  # an uncompressed bucketed all-reduce (ddp-bucketed)
        buckets = math.ceil(4 * psi / (options.get("bucket_mb", BUCKET_MB) * 2 ** 20))
        ops = [(2 * (n - 1) * buckets, 2 * (n - 1) / n * 4 * psi)]
    rounds, nbytes = sum(k for k, _ in ops), sum(b for _, b in ops)
    sync = rounds * link.latency_s + nbytes / link.bandwidth_Bps
    return {"compute_s": compute, "rounds": rounds, "bytes": nbytes, "sync_s": sync,
            "step_s": compute + sync, "params": psi}


def measure(scheme: str, options: dict, n: int, layers: int, steps: int = 1) -> dict:
    """One shapes-only paced run of `scheme` at the preset's width: its last step, rank 0's bytes
    and rounds, and its link time (the union of rank 0's collectives' spans in that step)."""
    import parlab

    r = parlab.run(scheme, world_size=n, model=PRESET, model_config={"n_layer": layers},
                   shapes_only=True, clock="A100", link=cluster(n), batch_size=n, steps=steps,
                   timeout=1800.0, **options)
    last = steps - 1
    mine = [x for x in r.ledger if x["rank"] == 0 and x["step"] == last]
    return {"step_s": r.step_times[last], "bytes": sum(x["bytes_sent"] for x in mine),
            "rounds": sum(x["rounds"] for x in mine),
            "link_s": busy([(x["t_start"], x["t_end"]) for x in mine]), "clock": r.clock.label}


def busy(spans) -> float:
    """Seconds covered by the union of (start, end) spans: the link's time in use, queued ops
    counted once."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def sync_at_scale(layers: int = 1, n: int = WORLD, steps: int = 1, tolerance: float = 0.25,
                  schemes=SCHEMES) -> list[dict]:
    """Run every scheme of `schemes` shapes-only (`measure`) beside its α-β estimate; print a row
    each and the verdicts: fewer bytes give a shorter measured step than ddp-bucketed's; the
    run's link time is the closed form's α-β (its bytes and rounds); the whole-step estimate is
    within `tolerance` of the run, and where not, which part it leaves out."""
    from parlab.core.link import real

    shape_list = shapes(layers)
    tokens = 1024  # one sequence of the preset's 1,024 tokens per GPU
    rows = []
    for scheme, options in schemes:
        rows.append({"scheme": scheme, **{f"est_{k}": v for k, v in
                                          estimate(scheme, options, shape_list, n, tokens).items()},
                     **measure(scheme, options, n, layers, steps)})
    for r in rows:
        r["other_s"] = r["step_s"] - r["link_s"]  # the run's compute: everything off the link
    psi = rows[0]["est_params"]
    print(f"clock: {rows[0]['clock']} (paced, shapes-only: fake tensors, no values, no loss); "
          f"{n} A100s in nodes of {PER_NODE}, NVLink 3 inside, {real(INTER)} between; gpt2-xl's width "
          f"with {layers} of its 48 blocks ({psi:,} parameters, the embedding included), one "
          f"sequence of {tokens:,} tokens per GPU, step {steps - 1} of {steps}")
    print("the compressors run shapes-only: top-k's selection and decoding and PowerSGD's QR run on "
          "fake tensors and are priced like any operator; their bytes are fixed by the shapes")
    print(f"{'scheme':<13} {'MB sent':>9} {'α-β MB':>8} {'link ms':>8} {'α-β ms':>7} "
          f"{'compute ms':>10} {'6Ψt/F ms':>9} {'step ms':>8} {'estimate':>9} {'vs ddp-bucketed':>16}")
    base = rows[0]
    for r in rows:
        print(f"{r['scheme']:<13} {r['bytes'] / 1e6:>9,.1f} {r['est_bytes'] / 1e6:>8,.1f} "
              f"{r['link_s'] * 1e3:>8.2f} {r['est_sync_s'] * 1e3:>7.2f} {r['other_s'] * 1e3:>10.2f} "
              f"{r['est_compute_s'] * 1e3:>9.2f} {r['step_s'] * 1e3:>8.2f} "
              f"{r['est_step_s'] * 1e3:>9.2f} {base['step_s'] / r['step_s']:>15.2f}×")
    print(f"ddp-bucketed is bandwidth-bound here: its link time is {base['link_s'] * 1e3:.1f} ms of its "
          f"{base['step_s'] * 1e3:.1f} ms step (α-β: {base['est_sync_s'] * 1e3:.1f} ms, of which "
          f"rounds·α {base['est_rounds'] * real(INTER).latency_s * 1e3:.2f} ms)")
    for r in rows[1:]:
        shorter = r["step_s"] < base["step_s"]
        print(f"measured: {r['scheme']} sends {base['bytes'] / r['bytes']:.0f}× fewer bytes than "
              f"ddp-bucketed and its step is {base['step_s'] / r['step_s']:.2f}× "
              + ("shorter: fewer bytes save time here — holds" if shorter else
                 "LONGER: fewer bytes do not save time here — does NOT hold"))
    worst = max(abs(r["link_s"] / r["est_sync_s"] - 1) for r in rows)
    print(f"link time, run vs α-β: worst {worst:.1%} off — within ±2%: "
          + ("holds" if worst <= 0.02 else "does NOT hold")
          + " (the paced link charges α-β itself, so this checks the bytes and rounds the run sent "
            "against the closed forms, not the link model)")
    print(f"compute, run vs 6Ψt/F: ddp-bucketed's {base['other_s'] * 1e3:.2f} ms vs "
          f"{base['est_compute_s'] * 1e3:.2f} ms — 6Ψt/F leaves out memory-bound kernels, the "
          "optimizer and launches; the compressors' own operators add "
          + ", ".join(f"{r['scheme']} {1e3 * (r['other_s'] - base['other_s']):+.2f} ms"
                      for r in rows[1:]) + " to it")
    for r in rows:
        error = r["step_s"] / r["est_step_s"] - 1
        print(f"α-β estimate of {r['scheme']}'s step: {r['est_step_s'] * 1e3:.2f} ms vs the run's "
              f"{r['step_s'] * 1e3:.2f} ms ({error:+.0%}): within ±{tolerance:.0%} "
              + ("— holds" if abs(error) <= tolerance else
                 f"— does NOT hold: {1e3 * (r['other_s'] - r['est_compute_s']):.2f} ms of compute "
                 "the estimate leaves out weighs more once the link time has shrunk"))
    ranked_run = sorted(rows, key=lambda r: r["step_s"])
    ranked_est = sorted(rows, key=lambda r: r["est_step_s"])
    same = [r["scheme"] for r in ranked_run] == [r["scheme"] for r in ranked_est]
    print("the estimate orders the schemes as the run does: "
          + ("holds" if same else "does NOT hold")
          + f" (run, shortest first: {' < '.join(r['scheme'] for r in ranked_run)})")
    return rows
