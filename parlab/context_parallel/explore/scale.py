"""Ring attention past t*, at a real model's shapes: does the ring hide its transfers there?

Liu, Zaharia & Abbeel, "Ring Attention with Blockwise Transformers" (ICLR 2024, §3): a ring step
posts the next K/V block's transfer, then computes attention on the current one; once a block's
compute outlasts its transfer, the ring costs no time. A full block of t tokens per rank computes
4·B·t²·C flops and sends 2·B·t·C values; in bf16 (2 bytes a value, the accelerator's sustained
bf16 rate F) compute wins from t* = F/β tokens on (`regime.crossover_tokens`). A causal zig-zag
step computes half a block (two of its four chunk pairs), so it hides from 2·t* on.

The runs: `cp-ring` on `cp` ranks, shapes-only (`parlab.core.shapes`), bf16, paced on the
accelerator (`clock=`) over its own NVLink, undilated; the model is a real preset's shapes
(default GPT-2 XL, C = 1,600, 25 heads) cut to `n_layer` of its layers — the ring's exposure is a
property of one layer, each layer repeats it. Measured per step of rank 0 (the last step): the
link time of the ring's sends (`Link.cost` of each, from the ledger's bytes), the time the rank
was blocked on them (the timeline's waits: the exposed communication) and its forward + backward.
"""

from __future__ import annotations

import parlab
from parlab.context_parallel.explore.regime import crossover_tokens, real_link
from parlab.core.link import ACCELERATORS

EXPOSED_OK = 0.05  # exposed ÷ transfer at or below this: hidden


def ring_at_scale(seq_lens=(32768, 65536), cp: int = 2, preset: str = "gpt2-xl",
                  accelerator: str = "A100", n_layer: int = 1, steps: int = 2) -> list[dict]:
    """One row per sequence length: tokens per rank beside t*, the ring's transfer time per step,
    the exposed (blocked) time, its share of the transfer, the step's forward + backward, and the
    block's compute ÷ transfer predicted from FLOPs alone (a causal step: half a block)."""
    link = real_link("NVLink", accelerator)
    t_star = crossover_tokens("NVLink", accelerator)
    rows = []
    for T in seq_lens:
        if T % (2 * cp):
            raise ValueError(f"seq_len={T} is not divisible by 2·cp={2 * cp}")
        r = parlab.run("cp-ring", world_size=cp, cp=cp, steps=steps, model=preset, batch_size=1,
                       model_config={"block_size": T, "n_layer": n_layer}, shapes_only=True,
                       clock=accelerator, link=link, precision="bf16-mixed", timeout=900.0)
        g, last = r.config.model_config, steps - 1
        mine = [e for e in r.timeline if e["rank"] == 0]
        spans = [e for e in mine if e["kind"] == "compute" and e["name"] in ("forward", "backward")
                 and e["args"].get("step") == last]
        lo, hi = min(e["t0"] for e in spans), max(e["t1"] for e in spans)
        blocked = sum(e["t1"] - e["t0"] for e in mine if e["kind"] == "wait"
                      and e["name"] in ("wait send", "wait recv") and lo <= e["t0"] < hi)
        sends = [x for x in r.ledger if x["rank"] == 0 and x["op"] == "send"
                 and str(x["phase"]).startswith("cp-")]
        transfer = sum(link.cost(x["bytes_sent"], x["rounds"]) for x in sends) / steps
        t = T // cp
        flops_s = 4 * t * t * g.n_embd / 2 / ACCELERATORS[accelerator].flops  # causal: half a block
        rows.append({"T": T, "tokens/rank": t, "t/t*": round(t / t_star, 1),
                     "K/V MB per send": round(2 * t * g.n_embd * 2 / 1e6, 1),
                     "transfer ms/step": round(transfer * 1e3, 3),
                     "exposed ms/step": round(blocked * 1e3, 3),
                     "exposed share": round(blocked / transfer, 3) if transfer else 0.0,
                     "fwd+bwd ms/step": round((hi - lo) * 1e3, 1),
                     "FLOP-only compute/transfer": round(flops_s / link.cost(2 * t * g.n_embd * 2, 1), 1),
                     "clock": r.clock.label, "link": str(r.config.link)})
    return rows


def explain_scale(rows: list[dict], accelerator: str = "A100", preset: str = "gpt2-xl") -> bool:
    """Print, per length, the exposed communication against t* and the verdict computed from it:
    past 2·t* (a causal step's crossover) the ring should hide its transfers (exposed share ≤
    `EXPOSED_OK`). Returns whether every length past 2·t* did."""
    t_star = crossover_tokens("NVLink", accelerator)
    print(f"t* = F/β (bf16) = {t_star:,.0f} tokens/rank on the {accelerator}'s NVLink; a causal zig-zag "
          f"step computes half a block, so it hides from 2·t* = {2 * t_star:,.0f}. {preset} shapes, "
          f"clock: {rows[0]['clock']}, link: {rows[0]['link']}")
    ok = True
    for r in rows:
        past = r["tokens/rank"] >= 2 * t_star
        hidden = r["exposed share"] <= EXPOSED_OK
        ok &= hidden or not past
        print(f"T = {r['T']:,} ({r['tokens/rank']:,} tokens/rank = {r['t/t*']}× t*): the ring's "
              f"transfers cost {r['transfer ms/step']} ms/step, {r['exposed ms/step']} ms exposed "
              f"({r['exposed share']:.1%}) in a {r['fwd+bwd ms/step']} ms forward + backward -> "
              + ("hidden, as predicted past 2·t*" if past and hidden else
                 "NOT hidden, though past 2·t*" if past else
                 "below 2·t*: FLOPs alone predict exposure, "
                 + ("and it was exposed" if not hidden else "yet it hid: the unfused block attention "
                    "is priced by its operators' bytes and launches, longer than its FLOPs")))
    print(f"verdict: every length past 2·t* hid its transfers (exposed ≤ {EXPOSED_OK:.0%} of them): {ok}")
    return ok


def allgather_at_scale(seq_len: int = 65536, cp: int = 2, preset: str = "gpt2-xl",
                       accelerator: str = "A100", n_layer: int = 1) -> dict:
    """Llama 3's all-gather context parallelism (`cp-allgather`, Dubey et al. 2024, §3.3.2) as
    `ring_at_scale` runs the ring: shapes-only, bf16, paced, one step. Its all-gather of K/V
    (forward) and reduce-scatter of dK/dV (backward) block the rank — nothing is computed while
    they run — so the time blocked is their link time, however long the sequence."""
    link = real_link("NVLink", accelerator)
    r = parlab.run("cp-allgather", world_size=cp, cp=cp, steps=1, model=preset, batch_size=1,
                   model_config={"block_size": seq_len, "n_layer": n_layer}, shapes_only=True,
                   clock=accelerator, link=link, precision="bf16-mixed", timeout=900.0)
    mine = [e for e in r.timeline if e["rank"] == 0]
    spans = [e for e in mine if e["kind"] == "compute" and e["name"] in ("forward", "backward")]
    lo, hi = min(e["t0"] for e in spans), max(e["t1"] for e in spans)
    blocked = sum(e["t1"] - e["t0"] for e in mine if e["kind"] == "wait" and lo <= e["t0"] < hi)
    ops = [x for x in r.ledger if x["rank"] == 0 and str(x["phase"]).startswith("cp-")]
    transfer = sum(link.cost(max(x["bytes_sent"], x["bytes_recv"]), x["rounds"]) for x in ops)
    return {"T": seq_len, "tokens/rank": seq_len // cp, "collectives/step": len(ops),
            "transfer ms/step": round(transfer * 1e3, 3), "exposed ms/step": round(blocked * 1e3, 3),
            "exposed share": round(blocked / transfer, 3) if transfer else 0.0,
            "fwd+bwd ms/step": round((hi - lo) * 1e3, 1), "clock": r.clock.label}


def explain_allgather(row: dict, ring_rows: list[dict]) -> None:
    """Print the all-gather's exposed time beside the ring's at the same length (from
    `ring_at_scale`'s rows), and the difference as a share of the forward + backward."""
    ring = next((r for r in ring_rows if r["T"] == row["T"]), None)
    print(f"cp-allgather, T = {row['T']:,} ({row['tokens/rank']:,} tokens/rank), "
          f"{row['collectives/step']} collectives/step: they cost {row['transfer ms/step']} ms on "
          f"the link, {row['exposed ms/step']} ms exposed ({row['exposed share']:.0%}) in a "
          f"{row['fwd+bwd ms/step']} ms forward + backward ({row['clock']})")
    beyond = row["exposed ms/step"] - row["transfer ms/step"]
    if beyond > 0:
        print(f"  {beyond:.3f} ms of it beyond the link time: rank 0 reached a collective first and "
              "waited for the other rank (a blocking collective starts when the last rank arrives)")
    if ring is not None:
        extra = row["exposed ms/step"] - ring["exposed ms/step"]
        print(f"  the ring at the same T: {ring['exposed ms/step']} ms exposed of "
              f"{ring['transfer ms/step']} ms -> the all-gather exposes {extra:.3f} ms/step more, "
              f"{extra / row['fwd+bwd ms/step']:.2%} of its step: "
              + ("negligible at this length (< 1%)" if extra < 0.01 * row["fwd+bwd ms/step"]
                 else "not negligible (≥ 1%)"))
