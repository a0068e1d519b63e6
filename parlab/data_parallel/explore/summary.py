"""Chapter 01's closing verdict, "When to use it (from this run)": bucketing, the bucket size,
overlap (WFBP) and DeAR, each with the threshold this run measured on the accelerator's link.

Bucketing (tensor fusion: Sergeev & Del Balso, Horovod, 2018) pays while a gradient message is
below the link's α·β, where a round's latency outweighs its bytes (Hockney's half-performance
length, Parallel Computing 20, 1994); a bucket pays 2(N−1)α per ring all-reduce (Thakur et al.,
IJHPCA 2005). WFBP (Zhang et al., Poseidon, ATC 2017) hides communication behind backward, so it
pays while communication is comparable to compute; DeAR (Zhang et al., ICDCS 2023) also hides the
all-gather behind the next forward.
"""

from __future__ import annotations

import statistics

from parlab.core.cost import element_bytes
from parlab.data_parallel.bench import exposed_fraction

DEAR_GAIN = 1.02  # DeAR "worth it" above a 2% faster step (virtual time is exact: a gain worth its code)


def bucketing_line(step: dict, numels: list[int], element_size: int, link) -> str:
    """Fuse while tensors are below α·β: how many are here, and per-tensor naive against
    bucketed, the direction computed from the measured steps."""
    threshold = link.latency_s * link.bandwidth_Bps
    sizes = [n * element_size for n in numels]
    below = sum(size < threshold for size in sizes)
    ratio = step["ddp-naive"] / step["ddp-bucketed"]
    verdict = ("fusing paid" if ratio > 1 else
               "fusing did not pay here: " + ("most tensors are above α·β, so their bytes, not their "
                                              "rounds, decide" if 2 * below < len(sizes) else
                                              "the copies into and out of the flat bucket cost what "
                                              "the fewer rounds saved"))
    return (f"- bucket gradients while a tensor's all-reduce is below the link's α·β = "
            f"{threshold:,.0f} B: {below} of the model's {len(sizes)} gradient tensors are (median "
            f"{statistics.median(sizes):,.0f} B), and per-tensor ddp-naive's step took {ratio:.2f}× "
            f"ddp-bucketed's — {verdict}")


def _buckets(row: dict) -> str:
    """'1 bucket', '9 buckets'."""
    return f"{row['buckets']} bucket" + ("" if row["buckets"] == 1 else "s")


def bucket_size_line(buckets: list[dict], world_size: int) -> str:
    """The best bucket size of the sweep against the slowest, beside the α-β model's pick and the
    latency 2(N−1)α each bucket pays."""
    best = min(buckets, key=lambda r: r["step_s"])
    worst = max(buckets, key=lambda r: r["step_s"])
    model = min(buckets, key=lambda r: r["predicted_s"])
    link = best["link"]
    latency = 2 * (world_size - 1) * link.latency_s if link is not None else 0.0
    if best is worst:
        head = f"every bucket size swept took the same step ({best['step_s'] * 1e3:.3g} ms)"
    else:
        head = (f"the best bucket here was {best['bucket_mb']:g} MiB ({_buckets(best)}), "
                f"{worst['step_s'] / best['step_s']:.2f}× faster than {worst['bucket_mb']:g} MiB "
                f"({_buckets(worst)})")
    return (f"- bucket size: {head}; the α-β model picked {model['bucket_mb']:g} MiB — "
            + ("agree" if model is best else "differ (the sweep's lines say by how much)")
            + f"; a finer bucket pays only while the backward it overlaps outlasts its "
            f"2(N−1)α = {latency * 1e3:.3g} ms")


def overlap_line(step: dict, exposed: dict) -> str:
    """WFBP pays while communication is comparable to compute: ddp-naive hides nothing, so its
    exposed share e gives communication ÷ compute = e / (1 − e)."""
    share = exposed["ddp-naive"]
    ratio = f"{share / (1 - share):.2f}" if share < 1 else "unbounded"
    gain = step["ddp-naive"] / step["ddp-overlap"]
    return (f"- overlap (WFBP) while communication is comparable to compute (the sweep of section 5: "
            f"near 1 it hides most): ddp-naive, which hides nothing, sat blocked {share:.0%} of its "
            f"step, communication ÷ compute = {ratio} (its blocked time ÷ the rest: every message's α, "
            f"bytes and waits, not bandwidth only); WFBP ran {gain:.2f}× ddp-naive's speed, "
            f"leaving {exposed['ddp-overlap']:.0%} exposed — "
            + ("overlap paid" if gain > 1 else "no gain here: there was too little to hide"))


def dear_line(step: dict, exposed: dict, model_gain: float | None = None) -> str:
    """DeAR over WFBP: worth it only when it ran measurably faster; when it did not, why — the
    model expected no gain either, or the measured steps wait where the model idealizes."""
    gain = step["ddp-overlap"] / step["dear"]
    model = f" (α-β model {model_gain:.2f}×)" if model_gain is not None else ""
    if gain > DEAR_GAIN:
        verdict = "worth it"
    elif model_gain is not None and model_gain > DEAR_GAIN:
        verdict = "below the model's gain: the measured steps wait where the model idealizes (section 5)"
    else:
        verdict = (f"no gain in this regime (under {DEAR_GAIN:.2f}×, the model agrees): it sends the "
                   f"same bytes in the same rounds, and its exposed share ({exposed['dear']:.0%}) is "
                   + ("WFBP's or more" if exposed["dear"] >= exposed["ddp-overlap"] else
                      "below WFBP's, yet not its step"))
    return (f"- DeAR when WFBP still leaves communication exposed after backward and the next forward "
            f"can cover the all-gathers: WFBP left {exposed['ddp-overlap']:.0%} exposed, and DeAR ran "
            f"at {gain:.2f}× WFBP's speed{model} — {verdict}")


def when_to_use(runs: dict, buckets: list[dict], predicted: dict | None = None,
                warmup: int = 1) -> list[str]:
    """Print and return the chapter's "When to use it (from this run)" lines from the variants
    run on the accelerator's link (`measure_regime(...)["faithful"]`), the bucket sweep's rows
    (`sweep_buckets`) and, when given, the α-β predictions (`predicted_vs_measured`)."""
    step = {v: r.step_time(warmup) for v, r in runs.items()}
    exposed = {v: exposed_fraction(r, warmup) for v, r in runs.items()}
    naive = runs["ddp-naive"]
    numels = [t.numel() for t in naive.state.values()]  # the state keeps parameter order
    model_gain = predicted["ddp-overlap"][1] / predicted["dear"][1] if predicted else None
    lines = [f"When to use it (from this run, on {naive.config.link.name}):",
             bucketing_line(step, numels, element_bytes(naive.config.precision), naive.config.link),
             bucket_size_line(buckets, naive.config.world_size),
             overlap_line(step, exposed), dear_line(step, exposed, model_gain)]
    print("\n".join(lines))
    return lines
