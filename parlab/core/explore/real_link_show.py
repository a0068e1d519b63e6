"""What chapter 00's real-link section prints: ring vs tree vs naive on paced A100s over NVLink 3
and HDR InfiniBand (`real_link`), the crossover where the ring overtakes the tree with verdicts
computed from the run, and the next steps (two-level, NCCL's pipelined double tree) priced.
The formulas and their sources: `parlab.core.explore.real_link`.
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


def run_paced(world_sizes=(4, 8), sizes=(4 << 10, 64 << 10, 1 << 20, 4 << 20),
              link: str = rl.INTRA) -> list[dict]:
    """Run every algorithm at every size on each world size (paced A100 over `link`); each row
    holds the op's time (its slowest rank), the clock's price from `cost`'s bytes, Thakur's."""
    rows = []
    for n in world_sizes:
        ranks = launch(rl.paced_worker, n, list(sizes), link, timeout=600.0)
        for nbytes in sizes:
            for algo in rl.ALGOS:
                measured = max(r[(algo, nbytes)][0] for r in ranks)
                rows.append({"n": n, "bytes": nbytes, "algo": algo, "measured_s": measured,
                             "priced_s": rl.priced(algo, n, nbytes, link),
                             "thakur_s": rl.thakur(algo, n, nbytes, link), "link": link})
    return rows


def show_run(rows: list[dict]) -> dict:
    """Print the run beside both prices and the crossover verdicts; returns the verdict counts."""
    print(f"clock: {rl.CLOCK_LINE}; all-reduce of float32 run for real by the hand-written "
          "algorithms (the clock prices bytes, so small tensors suffice)")
    print(f"{'N':>2} {'size':>8} {'algo':<5} {'paced run':>11} {'clock price':>12} {'Thakur':>11}")
    for r in rows:
        print(f"{r['n']:>2} {_size(r['bytes']):>8} {r['algo']:<5} {r['measured_s'] * 1e6:>8.2f} µs "
              f"{r['priced_s'] * 1e6:>9.2f} µs {r['thakur_s'] * 1e6:>8.2f} µs")
    equal = sum(abs(r["measured_s"] - r["priced_s"]) <= 1e-12 for r in rows)
    print(f"paced run = the clock's price from parlab.core.cost's bytes: {equal} of {len(rows)} "
          f"(tolerance 1 ps) — {'holds' if equal == len(rows) else 'does NOT hold'}")
    held = total = 0
    for n in sorted({r["n"] for r in rows}):
        link = rows[0]["link"]
        star = rl.crossover(n, link)
        print(f"N = {n}: the ring beats the tree above {_size(star)} on the clock's price "
              f"(Thakur's sequential tree: above {_size(rl.thakur_crossover(n, link))})")
        for nbytes in sorted({r["bytes"] for r in rows if r["n"] == n}):
            t = {r["algo"]: r["measured_s"] for r in rows if r["n"] == n and r["bytes"] == nbytes}
            winner = "ring" if t["ring"] < t["tree"] else "tree"
            expected = "ring" if nbytes > star else "tree"
            ok = winner == expected
            held, total = held + ok, total + 1
            print(f"  {_size(nbytes):>8}: run's faster of ring/tree = {winner} "
                  f"(ring {t['ring'] * 1e6:.2f} µs, tree {t['tree'] * 1e6:.2f} µs, naive "
                  f"{t['naive'] * 1e6:.2f} µs); crossover predicts {expected}: "
                  f"{'holds' if ok else 'does NOT hold'}")
    print(f"crossover verdicts: {held} of {total} hold")
    return {"equal": equal, "rows": len(rows), "held": held, "total": total}


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
    print(f"{nodes} DGX A100 nodes ({n} GPUs): flat ring on {rl.INTER} vs two-level "
          f"(reduce-scatter on {rl.INTRA}, ring across on 8 rails, all-gather on {rl.INTRA}):")
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


def when_line(crossovers: list[dict], verdict: dict) -> str:
    """The summary's line on ring vs tree at scale, from section 10's crossovers and verdicts."""
    parts = ", ".join(f"{_size(r['paced'])} at N = {r['n']} over {r['link']}" for r in crossovers)
    line = (f"- ring or tree on A100s (section 10, paced A100 time): the tree below, the ring above "
            f"{parts}; the run's own order agreed at {verdict['held']} of {verdict['total']} sizes")
    print(line)
    return line


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} µs"
