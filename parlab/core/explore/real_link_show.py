"""What chapter 00 prints about ring vs tree at scale: from the paced sweep of section 7
(`paced_sweep`), where the ring overtakes the tree on the clock's price and on Thakur's, with
verdicts computed from the run; the crossovers at N = 4–16 on NVLink 3 and HDR InfiniBand; the next
steps priced (two-level, NCCL's pipelined double tree); the predict-then-run exercise's run. The
formulas and their sources: `parlab.core.explore.real_link`.
"""

from __future__ import annotations

from parlab.core.explore import real_link as rl
from parlab.core.launch import launch

GB = 1 << 30


def _size(nbytes: float) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def _span(sizes: list[int]) -> str:
    return "none" if not sizes else (_size(sizes[0]) if len(sizes) == 1
                                     else f"{_size(sizes[0])}–{_size(sizes[-1])}")


def show_run(rows: list[dict]) -> dict:
    """Ring vs tree on the paced sweep (`paced_sweep.sweep` rows): per N the sizes where the run
    found each faster, the clock's crossover and whether it predicts that order, and the sizes
    where Thakur's sequential tree would pick the other one. Returns the verdict counts."""
    link = rows[0]["link"]
    print(f"clock: paced {rl.ACCELERATOR} time over {rl.real(link, rl.ACCELERATOR).name}: "
          "section 7's sweep")
    held = total = 0
    for n in sorted({r["world_size"] for r in rows}):
        t = {(r["algo"], r["bytes"]): r["seconds"] for r in rows if r["world_size"] == n}
        sizes = sorted({s for _, s in t})
        star, star_t = rl.crossover(n, link), rl.thakur_crossover(n, link)
        winner = {s: "ring" if t[("ring", s)] < t[("tree", s)] else "tree" for s in sizes}
        ok = sum(winner[s] == ("ring" if s > star else "tree") for s in sizes)
        held, total = held + ok, total + len(sizes)
        naive = sum(t[("naive", s)] < min(t[("ring", s)], t[("tree", s)]) for s in sizes)
        print(f"N = {n:>2}: faster of ring and tree in the run: tree at "
              f"{_span([s for s in sizes if winner[s] == 'tree'])}, ring at "
              f"{_span([s for s in sizes if winner[s] == 'ring'])}; the clock's prices cross at "
              f"{_size(star)}, which predicts that at {ok} of {len(sizes)} sizes "
              f"({'holds' if ok == len(sizes) else 'does NOT hold'}); naive fastest at {naive}")
        between = [s for s in sizes if min(star, star_t) < s <= max(star, star_t)]
        thakur_pick = "ring" if star_t < star else "tree"
        agree = sum(winner[s] == thakur_pick for s in between)
        print(f"        Thakur's sequential tree crosses at {_size(star_t)}"
              + (f" and picks the {thakur_pick} at {', '.join(_size(s) for s in between)}; the run "
                 f"agrees at {agree} of {len(between)} (the clock prices the tree per edge, as if "
                 "pipelined, not level after level)" if between
                 else ": no swept size lies between the two crossovers"))
    print(f"crossover verdicts: {held} of {total} hold")
    return {"held": held, "total": total}


def crossover_table(world_sizes=(4, 8, 16), links=(rl.INTRA, rl.INTER)) -> list[dict]:
    """Where the ring overtakes the tree, N × link, under both prices; printed."""
    out = []
    print("where the ring overtakes the tree (bytes of the all-reduce):")
    for link in links:
        for n in world_sizes:
            row = {"link": link, "n": n, "paced": rl.crossover(n, link),
                   "thakur": rl.thakur_crossover(n, link)}
            out.append(row)
            print(f"  {link:<8} N = {n:>2}: {_size(row['paced']):>9} on the clock's price, "
                  f"{_size(row['thakur']):>9} with Thakur's sequential tree")
    return out


def price_sweep(n: int = 16, link: str = rl.INTER, max_bytes: int = GB) -> list[dict]:
    """Ring, tree, naive (Thakur's closed forms: a tree's levels in sequence) and NCCL's pipelined
    double tree from 1 KB to `max_bytes` (×16 steps) on N ranks, priced shapes-only (no tensor is
    made); printed with the fastest named."""
    rows, s = [], 1 << 10
    print(f"N = {n} A100s over {link}, priced shapes-only (closed forms, A100 time: Thakur et al. "
          "2005 for ring/tree/naive, Sanders et al. 2009 for the double tree):")
    while s <= max_bytes:
        row = {a: rl.thakur(a, n, s, link) for a in rl.ALGOS}
        row["double tree"], k = rl.double_tree(s, n, link)
        best = min(row, key=row.get)
        rows.append({"bytes": s, **row, "best": best})
        print(f"  {_size(s):>7}: " + ", ".join(f"{a} {_ms(v)}" for a, v in row.items() if a != "k")
              + f" (k = {k}) → fastest: {best}")
        s *= 16
    return rows


def two_level_table(sizes=(1 << 20, 64 << 20, GB), nodes: int = 2) -> list[dict]:
    """Flat ring over every GPU of `nodes` DGX A100s (its rounds wait for InfiniBand) vs the
    two-level all-reduce (NVLink inside, InfiniBand across on 8 rails); printed with a verdict."""
    n = nodes * rl.GPUS_PER_NODE
    out = []
    print(f"{nodes} DGX A100 nodes ({n} GPUs), priced in A100 time: flat ring on {rl.INTER} vs "
          f"two-level (reduce-scatter on {rl.INTRA}, ring across on 8 rails, all-gather on {rl.INTRA}):")
    for s in sizes:
        flat, two = rl.flat_ring(s, n), rl.two_level(s, nodes)
        out.append({"bytes": s, "flat": flat, "two_level": two, "speedup": flat / two})
        print(f"  {_size(s):>7}: flat {_ms(flat)}, two-level {_ms(two)}: "
              f"{flat / two:.2f}× faster two-level ({'two-level wins' if two < flat else 'flat wins'})")
    return out


def measure_prediction(prediction, n: int = 8, nbytes: int = 24 << 20, link: str = rl.INTRA) -> float:
    """Chapter 00's predict-then-run: one ring all-reduce of `nbytes` on `n` paced A100s over
    `link`, its time printed beside the reader's `prediction` (µs) and the closed form."""
    ranks = launch(rl.paced_worker, n, [nbytes], link, ("ring",), timeout=600.0)
    measured = max(r[("ring", nbytes)][0] for r in ranks) * 1e6
    closed = rl.thakur("ring", n, nbytes, link) * 1e6
    print(f"clock: {rl.CLOCK_LINE}")
    print(f"ring all-reduce of {_size(nbytes)} on {n} A100s over {link}: measured {measured:.1f} µs; "
          f"closed form 2(N−1)α + 2(N−1)/N·S/β = {closed:.1f} µs; your answer: {prediction}")
    if isinstance(prediction, (int, float)) and not isinstance(prediction, bool):
        err = abs(prediction - measured) / measured
        print(f"your prediction is {err:.1%} off the run: {'within' if err <= 0.03 else 'outside'} "
              "the check's 3%")
    return measured


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} µs"
