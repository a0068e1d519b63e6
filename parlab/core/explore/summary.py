"""Chapter 00's closing verdict, "When to use it (from this run)": which all-reduce algorithm to
pick and what decides a message's time, each threshold computed from this run's sweep, its α-β
fits and its emulated links.

The algorithms' times are Thakur, Rabenseifner & Gropp's (IJHPCA 2005), `parlab.core.cost.
all_reduce_time`; the size α·β at which a message's latency equals its transfer time is Hockney's
half-performance length n½ (Parallel Computing 20, 1994); an emulated link can only slow a message
down (`parlab.core.link`), so it is faithful only where its α-β time exceeds the loopback's own.
"""

from __future__ import annotations

from parlab.core.cost import AlphaBeta, ring_all_reduce, tree_all_reduce


def crossover_bytes(first: AlphaBeta, second: AlphaBeta) -> float | None:
    """The message size in bytes at which two fitted all-reduce times are equal, or None when
    they do not cross at a positive size. Each time is linear in the size S (intercept + slope·S,
    `AlphaBeta.predict`), so the crossover is the difference of intercepts over that of slopes."""
    probe = 1e9  # bytes: a size large enough that the slope is read without round-off
    intercepts = first.predict(0.0), second.predict(0.0)
    slopes = ((first.predict(probe) - intercepts[0]) / probe,
              (second.predict(probe) - intercepts[1]) / probe)
    if slopes[0] == slopes[1]:
        return None
    size = (intercepts[1] - intercepts[0]) / (slopes[0] - slopes[1])
    return size if size > 0 else None


def _fastest(rows: list, world_size: int, nbytes: int, algos) -> str:
    """The algorithm measured fastest at `nbytes` on `world_size` ranks."""
    at = {r["algo"]: r["seconds"] for r in rows
          if r["world_size"] == world_size and r["bytes"] == nbytes and r["algo"] in algos}
    return min(at, key=at.get)


def ring_or_tree(rows: list, fits: dict, world_size: int) -> str:
    """Which of ring and tree the fits favour at which sizes on `world_size` ranks, beside which
    one the sweep measured faster at its smallest and its largest size."""
    ring, tree = fits[(world_size, "ring")], fits[(world_size, "tree")]
    sizes = sorted({r["bytes"] for r in rows if r["world_size"] == world_size})
    small, large = (_fastest(rows, world_size, s, ("ring", "tree")) for s in (sizes[0], sizes[-1]))
    measured = f"measured faster: {small} at {sizes[0]:,} B, {large} at {sizes[-1]:,} B"
    caveat = ("" if ring.reliable and tree.reliable else
              " (a fit is FLAGGED above: read the measured sizes, not the fit)")
    cross = crossover_bytes(tree, ring)
    if cross is None:
        winner = "tree" if tree.predict(sizes[-1]) < ring.predict(sizes[-1]) else "ring"
        text, contradicts = _largest_size_diagnosis(rows, world_size, sizes[-1])
        return (f"- ring or tree on this CPU's loopback, N = {world_size}: by this run's fits the "
                f"{winner} is faster at every size (they do not cross); {measured}"
                + (f"; {text}" if contradicts else "") + caveat)
    below = "tree" if tree.predict(cross / 2) < ring.predict(cross / 2) else "ring"
    above = "ring" if below == "tree" else "tree"
    agrees = small == below and (large == above or sizes[-1] < cross)
    return (f"- ring or tree on this CPU's loopback, N = {world_size}: by this run's fits the "
            f"{below} is faster below {cross:,.0f} B and the {above} above it; {measured} — "
            + ("agrees with the fits" if agrees else "differs from the fits: "
               + _largest_size_diagnosis(rows, world_size, sizes[-1])[0]) + caveat)


def _largest_size_diagnosis(rows: list, world_size: int, nbytes: int) -> tuple[str, bool]:
    """At the largest size: ring's measured time over tree's beside the bytes each sends (the
    closed forms), and whether the time contradicts the bytes (then it is each implementation's
    own work, which the text says)."""
    at = {r["algo"]: r["seconds"] for r in rows if r["world_size"] == world_size and r["bytes"] == nbytes}
    sent = {algo: max(form(nbytes // 4, world_size, rank)[0] for rank in range(world_size)) * 4
            for algo, form in (("ring", ring_all_reduce), ("tree", tree_all_reduce))}
    contradicts = (at["ring"] > at["tree"]) != (sent["ring"] > sent["tree"])
    return (f"at {nbytes:,} B the ring took {at['ring'] / at['tree']:.2f}× the tree's time while its "
            f"busiest rank sends {sent['ring'] / sent['tree']:.2f}× the bytes"
            + (" — per-message software work on this CPU (section 8's last lines), not the network"
               if contradicts else ""), contradicts)


def latency_bound_below(fit: AlphaBeta, link, largest_swept: int | None = None) -> str:
    """The size α·β under which an all-reduce pays more latency than transfer, for the ring's fit
    on this CPU and for `link` (a faithful link keeps the real link's α·β: it scales α up and β
    down by one factor). Past `largest_swept` (the sweep's largest message) the bytes never
    outweighed the rounds in the data, so β, and the fitted α·β, are extrapolated: said so."""
    here = fit.alpha * fit.beta
    there = link.latency_s * link.bandwidth_Bps
    unidentified = largest_swept is not None and here > largest_swept
    return (f"- fuse small messages (bucketing, chapter 01) while each is below α·β, where a round's "
            f"latency outweighs its bytes: {here:,.0f} B for gloo on this CPU's loopback (ring fit, "
            f"N = {fit.world_size}"
            + (f"; beyond the largest message swept, {largest_swept:,} B, so β and this α·β are "
               f"extrapolated, not measured: sweep larger messages (`large_mb`) to identify them"
               if unidentified else "")
            + f"), {there:,.0f} B on {link.name} (a dilation cancels in α·β: the real "
            f"link's); above it the bytes decide, and "
            f"only fewer bytes help (chapter 08)")


def emulation_holds(link_rows: list[dict]) -> str:
    """Whether each emulated link's α-β time exceeded the loopback's own measured time for the same
    all-reduce: emulation can only add delay, so below that it cannot show the link."""
    loopback = next(r for r in link_rows if r["emulated_s"] is None)
    verdicts = []
    for row in (r for r in link_rows if r["emulated_s"] is not None):
        above = row["emulated_s"] > loopback["measured_s"]
        verdicts.append(f"{row['link'].split(' (')[0]} {row['emulated_s'] * 1e3:.2f} ms "
                        + ("above: faithful" if above else "below: it cannot show that link"))
    return (f"- time a lesson on an emulated link only where its α-β time exceeds the loopback's own "
            f"({loopback['measured_s'] * 1e3:.2f} ms for this all-reduce, this CPU, raw): "
            + "; ".join(verdicts))


def when_to_use(rows: list, fits: dict, link_rows: list[dict], link) -> list[str]:
    """Print and return the chapter's "When to use it (from this run)" lines: ring or tree at the
    sweep's largest world size, the latency-bound size α·β, and where an emulated link holds."""
    largest = max(n for n, _ in fits)
    swept = max(r["bytes"] for r in rows if r["world_size"] == largest)
    lines = ["When to use it (from this run):", ring_or_tree(rows, fits, largest),
             latency_bound_below(fits[(largest, "ring")], link, swept), emulation_holds(link_rows)]
    print("\n".join(lines))
    return lines
