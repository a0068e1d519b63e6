"""Chapter 00's closing verdict, "When to use it (from this run)": which all-reduce algorithm to pick
and what decides a message's time, each threshold computed from this run's paced sweep
(`paced_sweep`), its α-β fits and the crossovers (`real_link_show`).

The algorithms' times are Thakur, Rabenseifner & Gropp's (IJHPCA 2005); the size α·β at which a
message's latency equals its transfer time is Hockney's half-performance length n½ (Parallel
Computing 20, 1994); busbw is NVIDIA nccl-tests' (doc/PERFORMANCE.md).
"""

from __future__ import annotations

from parlab.core.explore import real_link as rl
from parlab.core.explore.real_link_show import _size
from parlab.core.when_to_use import when_to_use as emit


def ring_or_tree(crossovers: list[dict], verdict: dict) -> str:
    """Where the ring overtakes the tree, N × link (the clock's price), and how often the run's
    own order agreed."""
    parts = ", ".join(f"{_size(r['paced'])} at N = {r['n']} over {r['link']}" for r in crossovers)
    return (f"ring or tree (section 9, paced A100 time): the tree below, the ring above {parts}; "
            f"the sweep's own order agreed at {verdict['held']} of {verdict['total']} sizes")


def latency_bound_below(fits: dict, link: str, other: str = rl.INTER) -> str:
    """The size α·β below which a round's latency outweighs its bytes: from the ring fit at the
    largest N (equal to `link`'s own α·β when the fit recovered the link) and for `other`."""
    n = max(k for k, a in fits if a == "ring")
    fit = fits[(n, "ring")]
    here = fit.alpha * fit.beta
    alpha, beta = rl._ab(link)
    there = rl._ab(other)
    return (f"fuse small messages (bucketing, chapter 01) while each is below α·β, where a round's "
            f"latency outweighs its bytes: {here:,.0f} B from the ring fit at N = {n} over {link} "
            f"({'the link' if abs(here / (alpha * beta) - 1) < 1e-6 else 'NOT the link'}'s "
            f"{alpha * beta:,.0f} B), {there[0] * there[1]:,.0f} B over {other}; above it the bytes "
            f"decide, and only fewer bytes help (chapter 08)")


def busbw_line(rows: list[dict]) -> str:
    """busbw at the sweep's largest size, each algorithm's range over N, as a share of β."""
    link = rows[0]["link"]
    beta = rl._ab(link)[1]
    top = max(r["bytes"] for r in rows)
    shares = {a: [r["busbw_GBps"] * 1e9 / beta for r in rows if r["bytes"] == top and r["algo"] == a]
              for a in rl.ALGOS}
    return (f"judge a collective by busbw against the link's β (section 7, {_size(top)} over {link}): "
            + ", ".join(f"{a} {min(v):.1%}–{max(v):.1%}" for a, v in shares.items())
            + " of β over the swept N; only the bandwidth-optimal ring runs the link near its β")


def when_to_use(rows: list[dict], fits: dict, crossovers: list[dict], verdict: dict,
                more: tuple = ()) -> list[str]:
    """Print and return the chapter's "When to use it (from this run)" lines; `more`: section 9's
    (`two_level_run.when_line`, `double_tree_show.when_line`)."""
    return emit([ring_or_tree(crossovers, verdict), latency_bound_below(fits, rows[0]["link"]),
                 busbw_line(rows), *more])
