"""USP, Ulysses × ring (Fang & Zhao, "USP: A Unified Sequence Parallelism Approach for Long
Context Generative AI", 2024, arXiv 2405.07719), priced from the closed form: the sequence split
over u·r GPUs, an all-to-all inside each Ulysses group of u (head split), a ring of r across the
groups. Placed on nodes of 8 (Ulysses groups inside a node when u ≤ 8, so the all-to-all rides
NVLink; a ring whose members span nodes is held to its InfiniBand hops, one block per step),
each (u, r) gets its forward bytes per GPU and layer (`cost.usp_bytes`) and their link time,
beside a layer's causal attention FLOPs at the accelerator's sustained rate: the ring's part can
hide behind attention, the all-to-all's cannot (Ulysses waits for it before attending).
`usp_table` prices from a closed form on real link and accelerator numbers (`parlab.core.link`);
`usp_measured` runs the splits (shapes-only, paced) and puts each beside its price.
"""

from __future__ import annotations

import parlab
from parlab.context_parallel.cost import usp_bytes
from parlab.core.link import ACCELERATORS, REAL, real
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


TOLERANCE = (0.10, 0.05e-3)  # measured exposed within 10% of the price, or 0.05 ms (α: µs per op)


def usp_measured(preset: str = "megatron-7.5b", seq_len: int = 32768, cp: int = 4,
                 accelerator: str = "A100", splits: tuple = (1, 2, 4)) -> list[dict]:
    """Run USP at each Ulysses degree u of `splits` (ring r = cp/u) on `cp` ranks — u = 1 is
    `cp-ring` itself, the others `cp-usp` (u = cp: the all-to-all alone, Ulysses) — shapes-only,
    bf16, one layer of `preset`, paced on `accelerator` over its own NVLink (one node), and put
    rank 0's forward beside `usp_table`'s price of the same split: bytes per GPU and layer in the
    all-to-alls and round the ring (ledger), and the exposed communication (the time rank 0 was
    blocked on communication inside its forward, from the timeline's waits)."""
    link = real("NVLink", accelerator)
    priced = {row["ulysses u"]: row for row in usp_table(preset, seq_len, gpus=cp, per_node=cp,
                                                         accelerator=accelerator)}
    rows = []
    for u in splits:
        scheme, options = ("cp-ring", {}) if u == 1 else ("cp-usp", {"ulysses": u})
        r = parlab.run(scheme, world_size=cp, cp=cp, steps=1, model=preset, batch_size=1,
                       model_config={"block_size": seq_len, "n_layer": 1}, shapes_only=True,
                       clock=accelerator, link=link, precision="bf16-mixed", timeout=900.0,
                       **options)
        mine = [e for e in r.timeline if e["rank"] == 0]
        fwd = next(e for e in mine if e["kind"] == "compute" and e["name"] == "forward")
        blocked = sum(e["t1"] - e["t0"] for e in mine if e["kind"] == "wait"
                      and fwd["t0"] <= e["t0"] < fwd["t1"])
        ops = [x for x in r.ledger if x["rank"] == 0 and x["phase"] == "cp-forward"]
        a2a = sum(x["bytes_sent"] for x in ops if x["op"] == "all_to_all")
        ring = sum(x["bytes_sent"] for x in ops if x["op"] == "send")
        p = priced[u]
        rows.append({"scheme": scheme, "ulysses u": u, "ring r": cp // u,
                     "all-to-all MB": round(a2a / 1e6, 1), "priced all-to-all MB": p["all-to-all MB"],
                     "ring MB": round(ring / 1e6, 1), "priced ring MB": p["ring MB"],
                     "exposed ms": round(blocked * 1e3, 3), "priced exposed ms": p["exposed ms"],
                     "attention ms (priced)": p["attention ms"], "forward ms": round(
                         (fwd["t1"] - fwd["t0"]) * 1e3, 2), "clock": r.clock.label,
                     "link": str(r.config.link)})
    return rows


def explain_usp_measured(rows: list[dict], preset: str = "megatron-7.5b",
                         seq_len: int = 32768) -> bool:
    """Print, per split, measured against priced — bytes to the 0.1 MB, exposed time within
    `TOLERANCE` — and the split the run found least exposed. Returns whether every row held."""
    rel, floor = TOLERANCE
    ok = True
    print(f"{preset} shapes (1 layer), T = {seq_len:,}, bf16, {len(rows)} splits of cp = "
          f"{rows[0]['ulysses u'] * rows[0]['ring r']}; clock: {rows[0]['clock']}, link: "
          f"{rows[0]['link']}; rank 0's forward:")
    for r in rows:
        same = (r["all-to-all MB"], r["ring MB"]) == (r["priced all-to-all MB"], r["priced ring MB"])
        near = abs(r["exposed ms"] - r["priced exposed ms"]) <= max(rel * r["priced exposed ms"],
                                                                     floor * 1e3)
        ok &= same and near
        print(f"  u = {r['ulysses u']} × r = {r['ring r']} ({r['scheme']}): bytes "
              f"{'= the price' if same else '≠ the price'} ({r['all-to-all MB']} + {r['ring MB']} MB); "
              f"exposed {r['exposed ms']} ms vs priced {r['priced exposed ms']} ms -> "
              + ("within" if near else "OUTSIDE") + f" {rel:.0%} / {floor * 1e3:.2f} ms")
    base = rows[0]
    for r in rows[1:]:
        scores = (2 * r["ring r"] + 1) / (4 * r["ring r"] ** 2 * r["ulysses u"])  # × T²·n_h
        base_scores = (2 * base["ring r"] + 1) / (4 * base["ring r"] ** 2 * base["ulysses u"])
        print(f"  forward u = {r['ulysses u']} × r = {r['ring r']}: {r['forward ms']} ms = "
              f"{r['forward ms'] / base['forward ms']:.2f}× u = {base['ulysses u']} × r = "
              f"{base['ring r']}'s {base['forward ms']} ms; scores computed per rank, "
              f"(2r+1)/(4r²u)·T²·n_h: {scores / base_scores:.2f}× (the exposed time differs by "
              f"{r['exposed ms'] - base['exposed ms']:.2f} ms)")
    best = min(rows, key=lambda r: r["exposed ms"])
    print(f"least exposed here: u = {best['ulysses u']} × r = {best['ring r']} ({best['exposed ms']} "
          f"ms); every split as priced: {ok}")
    return ok
