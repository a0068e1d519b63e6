"""Notebook 06's "When to use it (from this run)": which context-parallel method pays, and where,
printed from the results the chapter already holds — the ring-vs-Ulysses link runs
(`explore.link_comparison`), the ring's overlap regime (`explore.regime.overlap_regime`), the
attention memory table (`explore.memory_table`) and the video serving trade-off
(`explore.video_tradeoff`) — each threshold measured in the run or derived from `cost.py`'s closed
forms with the run's parameters.

Papers: Ring Attention (Liu, Zaharia & Abbeel, ICLR 2024, §3: the transfer hides once a block's
compute outlasts it), DeepSpeed-Ulysses (Jacobs et al. 2023, §3.1: cp ≤ n_h), Latent Parallelism
(Wu et al. 2025, arXiv 2512.07350).
"""

from __future__ import annotations

from parlab.context_parallel import cost
from parlab.context_parallel.explore.regime import FULLY_HIDDEN


def ulysses_fewer_bytes_from(cfg) -> int | None:
    """The smallest cp ≤ n_h at which Ulysses' attention bytes per rank fall below the ring's, by
    the closed forms (`cost.ulysses_bytes`, `cost.ring_bytes`) at `cfg`'s batch, heads, sequence
    and head size; None when no cp up to n_h does (Ulysses cannot split more ranks than heads)."""
    g = cfg.model_config
    for cp in range(2, g.n_head + 1):
        args = (cfg.batch_size, g.n_head, g.block_size, g.head_dim, cp, g.n_layer)
        if cost.ulysses_bytes(*args)["cp-forward"] < cost.ring_bytes(*args)["cp-forward"]:
            return cp
    return None


def ring_vs_ulysses(links: list[dict], cfg) -> str:
    """The bullet on ring vs Ulysses: their measured attention bytes and step times on the link
    (`explore.link_comparison` rows), which was faster, and from which cp Ulysses' closed form
    sends fewer bytes (`ulysses_fewer_bytes_from`), bounded by cp ≤ n_h."""
    ring, uly = links[0], links[1]
    n_head, cp = cfg.model_config.n_head, cfg.options.get("cp", cfg.world_size)
    byte_ratio = uly["attention bytes sent/step"] / max(ring["attention bytes sent/step"], 1)
    time_ratio = uly["measured step s"] / ring["measured step s"]
    faster = "the ring" if time_ratio > 1 else "Ulysses"
    ops = uly["attention ops/step"] / max(ring["attention ops/step"], 1)
    start = ulysses_fewer_bytes_from(cfg)
    where = (f"its closed form sends fewer bytes than the ring's from cp = {start} to cp = n_h = {n_head}"
             if start else f"its closed form never sends fewer bytes than the ring's up to n_h = {n_head}")
    comm = [r.get("predicted all comm s", r["measured step s"]) / r["measured step s"]
            for r in (ring, uly)]
    why = (f" — not by its link: the predicted communication is {comm[0]:.0%} of the ring's step and "
           f"{comm[1]:.0%} of Ulysses', so the gap is compute (the ring attends block by block, more "
           "operators per layer, and a small block's attention costs far more than its FLOPs: the "
           "regime table of section 8)" if max(comm) < 0.1 and abs(time_ratio - 1) > 0.1 else "")
    return (f"- ring vs Ulysses at cp = {cp}: Ulysses sent {byte_ratio:.2f}× the ring's attention bytes "
            f"in {ops:.1f}× the ops and took {time_ratio:.2f}× its step on the link ({ring['clock']}): "
            f"{faster} was faster here{why}. Ulysses can pay only where {where}; beyond n_h only the "
            "ring splits")


def ring_overlap(overlap: list[dict], crossover: float) -> str:
    """The bullet on when the ring hides its transfers: the crossover t* = F/β (bf16; closed form,
    `explore.regime.crossover_tokens`) beside the hidden share this run measured at its smallest
    and largest block, and whether the share rose with the block."""
    ordered = sorted(overlap, key=lambda r: r["tokens/rank"])
    small, large = ordered[0], ordered[-1]
    shares = [r["hidden share"] for r in ordered]
    rising = all(b >= a - 0.05 for a, b in zip(shares, shares[1:]))  # explain_regime's tolerance
    trend = ("hidden at every size, below t* too: a block's launch-bound attention (its operators' "
             "fixed cost, not its FLOPs) outlasted its transfer on this link (section 8's diagnosis)"
             if all(share >= FULLY_HIDDEN for share in shares) else
             "rising with the block, as the paper argues" if rising else
             "higher at the largest block, though not rising at every size (section 8's diagnosis)"
             if shares[-1] > shares[0] else "NOT rising with the block in this run (section 8's diagnosis)")
    side = "below" if large["tokens/rank"] < crossover else "at or above"
    return (f"- ring attention's transfers are free once each rank holds t* = F/β = {crossover:,.0f} "
            f"tokens (bf16 on an A100, NVLink 3); this run's largest block, {large['tokens/rank']} "
            f"tokens/rank, is {side} t*: "
            f"hidden share {small['hidden share']:.0%} at {small['tokens/rank']} → "
            f"{large['hidden share']:.0%} at {large['tokens/rank']} tokens/rank, {trend}. By the closed form "
            f"a sequence of T tokens hides the ring on up to T/t* ranks; more ranks cut memory, not time")


def memory_threshold(mem, cp: int) -> str | None:
    """The bullet on memory: the smallest T of the table (`explore.memory_table`) from which the
    plain ring's busiest rank saves less for backward than one process, and what the recomputing
    ring saved at the largest T; None when the table has no cp > 1 column."""
    column = f"cp={cp}"
    if cp < 2 or column not in mem.columns:
        return None
    ring = mem[mem["method"] == "ring"].sort_values("T").to_dict("records")
    smaller = [r[column] < r["cp=1"] for r in ring]
    first = next((r["T"] for i, r in enumerate(ring) if all(smaller[i:])), None)
    recompute = mem[mem["method"] == "ring-recompute"].sort_values("T").iloc[-1]
    saved = recompute["cp=1"] / recompute[column]
    low = ring[0]
    where = (f"from T = {first} on (at T = {low['T']} it held {low[column] / low['cp=1']:.2f}× one "
             f"process)" if first and first > low["T"] else
             f"at every T measured (from T = {first})" if first else "at no T measured")
    return (f"- for memory, context parallelism pays once the scores outweigh the K/V blocks it receives: "
            f"the plain ring's busiest rank held less than one process {where}; the recomputing ring "
            f"held {saved:.0f}× less at T = {int(recompute['T'])}, paying cp − 1 more K/V passes per layer")


def latent_threshold(video) -> str | None:
    """The bullet on latent vs sequence parallelism for video serving (`explore.video_tradeoff`):
    the smallest and the largest halo that still split the compute (compute/rank < 1), their
    bytes against SP's cheapest and their error; None when no LP row splits the compute."""
    sp = video[video["mode"].str.startswith("sp")]["bytes/step"].min()
    split = video[(video["mode"] == "lp") & (video["compute/rank"] < 1)]
    if not len(split):
        return None
    rows = split.sort_values("compute/rank")
    first, last = rows.iloc[0], rows.iloc[-1]
    full = video[(video["mode"] == "lp") & (video["compute/rank"] >= 1)]
    cover = (f"; from halo {full['halo'].min()} every rank computes the whole latent and the ranks gain "
             "nothing" if len(full) else "")
    return (f"- latent over sequence parallelism for video serving when an approximate latent is "
            f"acceptable: halo {first['halo']} sent {first['bytes/step'] / sp:.1%} of SP's bytes at relative "
            f"error {first['error']:.1e}, halo {last['halo']} {last['bytes/step'] / sp:.1%} at "
            f"{last['error']:.1e} (computing {last['compute/rank']:.0%} of the latent per rank){cover}; "
            f"an exact result needs SP")


def when_to_use(links: list[dict], overlap: list[dict], crossover: float, mem, video, cfg) -> None:
    """Print "When to use it (from this run):" — 2–4 bullets, each with a threshold measured in
    this run or derived from the chapter's closed forms with its parameters (`cfg`: the cp run's
    configuration)."""
    print("When to use it (from this run):")
    cp = cfg.options.get("cp", cfg.world_size)
    for line in (ring_vs_ulysses(links, cfg), ring_overlap(overlap, crossover),
                 memory_threshold(mem, cp), latent_threshold(video) if video is not None else None):
        if line:
            print(line)
