"""Where ring attention starts hiding its communication: the overlap measured against the
compute-to-communication ratio, on a link that keeps a real accelerator's ratio.

Liu, Zaharia, Abbeel, "Ring Attention with Blockwise Transformers for Near-Infinite Context"
(ICLR 2024, §3): each ring step posts the next key/value block's transfer before it computes
attention on the current one, so the transfer is free once a block's compute outlasts it. A
block's compute grows as (T/cp)² (scores of T/cp queries against T/cp keys), its transfer as T/cp
(the keys and values themselves): the longer the sequence, the more of the ring is hidden. The
paper's condition is a block size above the accelerator's FLOP/s ÷ link bandwidth ratio. One dtype
throughout: bf16 — the FLOP rate is the accelerator's sustained bf16 rate and the runs send K/V
at 2 bytes a value (`precision="bf16-mixed"`), so t* = F/β.

Measured per rank and step (steps after the first): the link time the ring's transfers cost
(`Link.cost` of each send; a send and its receive share the full-duplex link), the time the rank
was blocked on them (the timeline's waits), and its compute (forward + backward spans less those
waits). Hidden share = 1 − blocked ÷ link time.
"""

from __future__ import annotations

import statistics

import parlab
from parlab.core.link import ACCELERATORS, Link, achieved_flops, dilation, real


def real_link(link="NVLink", accelerator: str = "A100") -> Link:
    """The undilated link `accelerator` has (`parlab.core.link.real`: "NVLink" is the accelerator's
    own generation, an A100's NVLink 3 at 300 GB/s per direction); a Link is kept as it is."""
    return link if isinstance(link, Link) else real(link, accelerator)


def regime_link(link: str = "NVLink", accelerator: str = "A100", seq_len: int = 64):
    """`link` as `accelerator` sees it: dilated by this machine's compute rate, measured on a
    `single` run of the tiny GPT at `seq_len` (α·N, β/N as `parlab.core.link.faithful` does). The
    dilation keeps the crossover block size where it is on the real hardware: a block of t tokens
    computes 4·B·t²·C flops and sends 2·B·t·C values of s bytes, so compute outlasts the transfer
    from t* = s·F/(2β) tokens on, and F/β is the same here as on the accelerator."""
    probe = parlab.run("single", steps=3, model_config={"block_size": seq_len})
    real, n = real_link(link, accelerator), dilation(achieved_flops(probe), accelerator)
    return Link(real.latency_s * n, real.bandwidth_Bps / n,
                f"{real.name} as an {accelerator} sees it, time ×{n:,.0f}", n)


def crossover_tokens(link: str = "NVLink", accelerator: str = "A100", itemsize: int = 2) -> float:
    """t* = s·F/(2β): the per-rank block (tokens) above which a block's attention (4·B·t²·C flops
    at the accelerator's sustained bf16 rate F) outlasts the transfer of its keys and values
    (2·B·t·C values of s bytes) on the real `link` and `accelerator` (`real_link`: an A100's
    NVLink is 300 GB/s per direction) — and, by construction, on `regime_link(link, accelerator)`.
    s = 2 (bf16, the default, consistent with F): t* = F/β; s = 4 (fp32 values): 2F/β."""
    return itemsize * ACCELERATORS[accelerator].flops / (2 * real_link(link, accelerator).bandwidth_Bps)


def block_ratio(link, tokens: int, rows: int, n_embd: int, accelerator: str = "A100",
                itemsize: int = 2) -> float:
    """Predicted compute ÷ transfer of one ring step on `link` (a faithful link of `accelerator`):
    4·B·t²·C flops at the accelerator's rate ÷ (α + 2·s·B·t·C bytes / β), s bytes a value, both
    on the real hardware's clock (the dilation cancels)."""
    flops = 4 * rows * tokens ** 2 * n_embd
    compute_s = flops / ACCELERATORS[accelerator].flops * link.dilation
    return compute_s / link.cost(2 * itemsize * rows * tokens * n_embd, 1)


def block_seconds(tokens: int, rows: int, n_head: int, head_dim: int, repeats: int = 5) -> float:
    """Measured seconds of one ring step's compute here: `BlockAttention` forward of t queries
    over t keys (B rows, all heads; one intra-op thread, as a rank runs), the fastest repeat."""
    import time

    import torch

    from parlab.context_parallel.ring_attention import BlockAttention

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(rows, n_head, tokens, head_dim, generator=gen) for _ in range(3))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            BlockAttention.apply(q, k, v, None, None)  # (B, nh, t, hs), (B, nh, t)
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return min(times)


def block_paced_seconds(clock, tokens: int, rows: int, n_head: int, head_dim: int) -> float:
    """Paced seconds of one ring step's compute on `clock` (`parlab.core.clock`): the operators
    and FLOPs of a `BlockAttention` forward of t queries over t keys, priced as a paced compute
    span prices them — deterministic, whatever this CPU is doing."""
    import torch

    from parlab.context_parallel.ring_attention import BlockAttention
    from parlab.core.pacer import work_meter

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(rows, n_head, tokens, head_dim, generator=gen) for _ in range(3))
    with work_meter() as meter:
        BlockAttention.apply(q, k, v, None, None)  # (B, nh, t, hs), (B, nh, t)
    return clock.price(meter.take())


def overlap_regime(world_size: int = 2, tokens_per_rank=(64, 128, 256, 512), link=None,
                   steps: int = 3, accelerator: str = "A100", clock: str | None = None,
                   precision: str = "bf16-mixed") -> list:
    """cp-ring with T = tokens_per_rank × world_size on `link`: per step of rank 0 (medians over
    the steps after the first), the link time of the ring's transfers, the time the rank was
    blocked on them, and the hidden share, beside the block's compute-to-transfer ratio predicted
    from the flops and bytes. `clock` (default: `accelerator`) paced: virtual time on the real
    `link` (a name, default "NVLink"), undilated, every compute span priced on the accelerator
    (`parlab.core.clock`: launches and FLOPs), and the measured block compute is that price;
    "wall": this CPU, raw, on `link` (default
    `regime_link()`, dilated by this CPU's measured rate), the block compute timed here. A link
    already dilated (a `Link` with dilation ≠ 1) and no `clock` means "wall": its caller chose the
    dilation. `precision`: bf16 by default (K/V at 2 bytes a value, as the FLOP rate assumes)."""
    if clock is None:
        clock = "wall" if getattr(link, "dilation", 1.0) != 1.0 else accelerator
    if clock == "wall":
        link = link or regime_link(accelerator=accelerator)
    else:
        link = real_link(link or "NVLink", accelerator)  # the accelerator's own NVLink generation
    rows = []
    for t in tokens_per_rank:
        seq_len = t * world_size
        result = parlab.run("cp-ring", world_size=world_size, cp=world_size, steps=steps,
                            model_config={"block_size": seq_len}, link=link, clock=clock,
                            precision=precision)
        paced = result.clock.paced
        if t == tokens_per_rank[0]:
            print(f"link: {result.config.link}; clock: {result.clock.label}")
        link_obj = result.config.link
        mine = [e for e in result.timeline if e["rank"] == 0]
        windows = {}
        for e in mine:  # a step's window: its forward's start to its backward's end
            if e["kind"] == "compute" and e["name"] in ("forward", "backward"):
                lo, hi = windows.get(e["args"]["step"], (e["t0"], e["t1"]))
                windows[e["args"]["step"]] = (min(lo, e["t0"]), max(hi, e["t1"]))
        waits = [e for e in mine if e["kind"] == "wait" and e["name"] in ("wait send", "wait recv")]
        blocked = [sum(e["t1"] - e["t0"] for e in waits if lo <= e["t0"] < hi)
                   for step, (lo, hi) in sorted(windows.items()) if step >= 1]
        busy = [hi - lo for step, (lo, hi) in sorted(windows.items()) if step >= 1]
        sends = [x for x in result.ledger if x["rank"] == 0 and x["op"] == "send"
                 and str(x["phase"]).startswith("cp-")]
        link_s = sum(link_obj.cost(x["bytes_sent"], x["rounds"]) for x in sends) / steps
        blocked_s, busy_s = statistics.median(blocked), statistics.median(busy)
        cfg, g = result.config, result.config.model_config
        itemsize = 4 if precision == "fp32" else 2
        transfer_s = link_obj.cost(2 * itemsize * cfg.batch_size * t * g.n_embd, 1)
        block_s = (block_paced_seconds(result.clock, t, cfg.batch_size, g.n_head, g.head_dim)
                   if paced else block_seconds(t, cfg.batch_size, g.n_head, g.head_dim))
        rows.append({"tokens/rank": t, "T": seq_len,
                     "predicted block compute/transfer": round(block_ratio(
                         link_obj, t, cfg.batch_size, g.n_embd, accelerator, itemsize), 2),
                     "measured block compute/transfer": round(block_s / transfer_s, 2),
                     "ring link ms/step": float(f"{link_s * 1e3:.3g}"),
                     "blocked ms/step": float(f"{blocked_s * 1e3:.3g}"),
                     "fwd+bwd ms/step": float(f"{busy_s * 1e3:.3g}"),
                     "hidden share": round(max(0.0, min(1.0, 1 - blocked_s / link_s)), 2)})
    return rows


FULLY_HIDDEN = 0.95  # a hidden share at or above this is all of it: no trend left to show


def explain_regime(rows: list, crossover: float) -> None:
    """Each size's measured hidden share beside its predicted compute-to-transfer ratio, then the
    verdicts the run supports, computed from it: how much longer a block's attention measured
    than its FLOPs say, whether the hidden share rose with the ratio (the paper's argument), and
    whether its level stayed within what the forward block's measured ratio allows."""
    for r in rows:
        print(f"{r['tokens/rank']:>5} tokens/rank: block compute/transfer predicted "
              f"{r['predicted block compute/transfer']:>5.2f}, measured "
              f"{r['measured block compute/transfer']:>5.2f}; hidden share "
              f"{r['hidden share']:.0%} (blocked {r['blocked ms/step']} of {r['ring link ms/step']} "
              "ms the transfers cost)")
    ordered = sorted(rows, key=lambda r: r["tokens/rank"])
    shares = [r["hidden share"] for r in ordered]
    side = "all below" if ordered[-1]["tokens/rank"] < crossover else "reaching"
    print(f"The bandwidth crossover t* = F/β (bf16) = {crossover:,.0f} tokens per rank: these sizes are "
          f"{side} it.")
    slow = [(r["tokens/rank"], r["measured block compute/transfer"]
             / max(r["predicted block compute/transfer"], 1e-9)) for r in ordered]
    print("A block's attention measured ÷ its FLOPs' price: "
          + ", ".join(f"{t} tokens/rank {x:.1f}×" for t, x in slow))
    if any(x > 1.5 for _, x in slow):
        print("  (more than 1.5× at the small blocks: the softmax, masking and exp operators each "
              "cost a fixed time the FLOP count does not see — on an accelerator a kernel launch, "
              "~4 µs — so a small block computes, and hides, more than its FLOPs predict; while "
              "those launches outweigh the FLOPs, a bigger block adds transfer faster than compute "
              "and hides less)")
    if all(share >= FULLY_HIDDEN for share in shares):
        ratios = [r["measured block compute/transfer"] for r in ordered]
        low = min(ordered, key=lambda r: r["measured block compute/transfer"])
        falling = all(b < a for a, b in zip(ratios, ratios[1:])) and len(ratios) > 1
        print(f"Every size hid its transfers (≥ {FULLY_HIDDEN:.0%}): nothing left for a bigger block "
              "to hide, so the hidden share cannot rise here"
              + (f". A block's measured compute ÷ transfer stayed above 1 at every size (lowest "
                 f"{low['measured block compute/transfer']:.2f}, at {low['tokens/rank']} "
                 "tokens/rank) where its FLOPs alone predict less: its operators' fixed costs, "
                 "not its FLOPs, make it outlast its transfer on this link, below t* too"
                 if low["measured block compute/transfer"] > 1 else "")
              + (". The measured ratio fell as the blocks grew (the transfer grows with t, the "
                 "launch-bound compute more slowly): on a slower link the largest block is the "
                 "first whose transfer would show" if falling else "") + ".")
        return
    rising = all(b >= a - 0.05 for a, b in zip(shares, shares[1:]))
    above = [r for r in ordered  # a backward block: about twice the forward's matmul FLOPs
             if r["hidden share"] > min(1.0, 2 * r["measured block compute/transfer"]) + 0.1]
    level = ("" if not above else
             " At " + ", ".join(f"{r['tokens/rank']} ({r['hidden share']:.0%} hidden vs a measured "
                                f"forward ratio {r['measured block compute/transfer']:.2f})"
                                for r in above)
             + " tokens/rank more is hidden than one block's compute ÷ transfer accounts for, even "
             "doubled for backward's blocks (about twice the forward's matmul FLOPs per transfer "
             "of the same size): the transfers overlap more of the step than the one block each "
             "ring step computes, and this measurement does not split out what. The block ratio "
             "speaks to the trend, not to the level.")
    if rising and not above:
        print("As predicted: the more tokens per rank, the more of the ring hides behind "
              "attention, and no more than the measured block ratios account for.")
        return
    if rising:
        print(f"The trend is the paper's: the hidden share rose from {shares[0]:.0%} to "
              f"{shares[-1]:.0%} as the blocks grew. The level is not this prediction's." + level)
        return
    drops = [(a, b, sa, sb) for (a, b), (sa, sb) in zip(zip(ordered, ordered[1:]),
                                                        zip(slow, slow[1:]))
             if b["hidden share"] < a["hidden share"] - 0.05]
    late = [r for r in rows if r["blocked ms/step"] > r["ring link ms/step"]]
    if late:
        why = ("At " + ", ".join(str(r["tokens/rank"]) for r in late) + " tokens/rank the rank was "
               "blocked longer than its transfers cost on the link: that wait is the peer "
               "arriving late, not the transfer, so the hidden share understates the overlap "
               "there.")
    elif all(sa[1] > sb[1] * 1.2 for _, _, sa, sb in drops):
        why = ("Where it fell (" + ", ".join(
            f"{a['tokens/rank']}→{b['tokens/rank']} tokens/rank: {a['hidden share']:.0%}→"
            f"{b['hidden share']:.0%}, the block's attention {sa[1]:.1f}×→{sb[1]:.1f}× its FLOPs' "
            "price" for a, b, sa, sb in drops)
               + ") the smaller block ran further over its FLOP price, so it hid relatively more "
               "than the FLOP-based ratio says.")
    else:
        why = ("The blocked time varied more between steps than between sizes: the ratio did "
               "not decide it at these sizes.")
    print(f"Not as predicted: the hidden share did not rise monotonically with the block "
          f"({', '.join(f'{x:.0%}' for x in shares)}). " + why + level)
