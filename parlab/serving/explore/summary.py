"""Notebook 12's measured summaries: one per part — A, sharing the ranks between two training jobs
(Luo et al., "CrossoverScheduler", 2021), and B, one network split over edge devices (Xie et al.'s
ResNeXt groups, 2017; Lin & Wang's transmission-policy search, 2021) — and the chapter's, every
figure printed from this run's results with its verdict computed from the same run (never typed
into markdown). Each part ends in its "When to use it (from this run):" lines; the chapter's
summary keeps its closing verdicts (`explore.print_headlines`, `explore.search.headline`) and collects them.
"""

from __future__ import annotations

import math

from parlab.core.when_to_use import when_to_use
from parlab.serving import cost
from parlab.serving import explore as ex
from parlab.serving.explore import search as ex_search

WORTH = 1.10  # ours: a schedule "worth it" when the model gives it ≥ 10% more job-steps per second


def comm_range(model: dict, worth: float = WORTH) -> tuple[float, float]:
    """The factors (low, high) by which this run's communication times may be scaled before the
    steady-state model (`cost.crossover_speedup`) gives crossover less than `worth`× sequential
    (bisection on a log scale; the jobs' compute fixed)."""
    def gain(scale: float) -> float:
        return cost.crossover_speedup(model["compute"], {j: c * scale for j, c in model["comm"].items()})

    def edge(lo: float, hi: float) -> float:  # gain(lo) ≥ worth > gain(hi), or the reverse
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if (gain(mid) >= worth) == (gain(lo) >= worth) else (lo, mid)
        return math.sqrt(lo * hi)

    if gain(1.0) < worth:
        return math.nan, math.nan
    return edge(1.0, 1e-6), edge(1.0, 1e6)


def part_a(results: dict, model: dict, verdict: dict, ratios: dict, show: bool = True) -> list[str]:
    """Sharing the ranks (CrossoverScheduler): crossover, concurrent, sequential, from this run."""
    compute, comm = sum(model["compute"].values()), sum(model["comm"].values())
    low, high = comm_range(model)
    lines = [f"crossover when two jobs share the ranks and each has communication to hide: here ΣC/ΣP = "
             f"{comm / compute:.2f} (link ÷ compute per round), crossover ran {verdict['measured']:.2f}× "
             f"sequential's job-steps per second (model {verdict['steady']:.2f}× in steady state) — "
             + ("holds" if verdict["holds"] else "does NOT hold on this run")]
    if math.isfinite(low):
        lines.append(f"the model keeps crossover ≥ {WORTH:.2f}× while the link's time per step is between "
                     f"{low:.2f}× and {high:.1f}× this run's (ΣC/ΣP from {low * comm / compute:.2f} to "
                     f"{high * comm / compute:.1f}); outside it one resource is nearly idle anyway: "
                     "run the jobs one after the other")
    else:
        lines.append(f"not on this link: the model gives crossover < {WORTH:.2f}× here")
    c, x = ratios.get("concurrent", math.nan), ratios.get("crossover", math.nan)
    lines.append(f"concurrent (two unscheduled threads) ran {c:.2f}× sequential against crossover's "
                 f"{x:.2f}× — " + ("as much here: the threads happened to take crossover's order; "
                                   "nothing guarantees it" if c >= 0.95 * x else
                                   "schedule the order (crossover) rather than leave it to the threads"))
    memory = {name: sum(cost.job_memory(job.config).values())
              for name, job in results["crossover"].jobs.items()}
    lines.append("sequential (the cluster lent to one job at a time) when the two jobs do not fit one "
                 "device together: sharing holds both jobs' memory on every rank ("
                 + " + ".join(f"{name} {b:,} B" for name, b in memory.items())
                 + f" = {sum(memory.values()):,} B here), whatever the schedule")
    return when_to_use(lines, show)


def part_b(rows: list, density: float, world_size: int, latency: dict, search_rows: list,
           kept_follows_link: bool, show: bool = True) -> list[str]:
    """One network over edge devices: the split, our saliency masks, the search, from this run.
    `rows`: `explore.edge.accuracy_vs_bytes`; `latency`: `explore.edge.latency_curve`'s numbers;
    `search_rows`: `explore.search.front`."""
    lines = []
    dense = latency["break_even"].get(1.0, math.inf)
    shown = [f"{d}: {_bandwidth(b)}" for d, b in latency["break_even"].items()]
    wifi = latency["measured"].get((min(latency["break_even"]), "Wi-Fi"))
    than = "" if wifi is None else "faster" if wifi < latency["alone"] else "slower"
    where = latency.get("curve", "the link")
    clock = latency.get("clock", "")
    lines.append(f"split a request over {world_size} devices only on a link faster than the break-even "
                 f"bandwidth β* (at {where}'s α, by density of transfers kept, {'; '.join(shown)}): one "
                 f"device computed a request in {latency['alone'] * 1e3:.1f} ms"
                 + (f" ({clock})" if clock else "") + ", so "
                 + ("the split never pays here — the rounds' latency α alone exceeds the compute saved"
                    if not math.isfinite(dense) else
                    f"every feature needs ≥ {_bandwidth(dense)}")
                 + ("" if wifi is None else f"; on Wi-Fi 802.11n the sparsest split took "
                    f"{wifi * 1e3:.1f} ms ({than} than one device)")
                 + _real_links_line(latency))
    full = next((r for r in rows if r[0] == 1.0), rows[0])
    row = min(rows, key=lambda r: abs(r[0] - density))
    fewer = 1 - row[1] / full[1] if full[1] else math.nan
    lost = 100 * (full[2] - row[2])
    lines.append(f"our saliency masks when every device sees the whole input (one camera): density "
                 f"{row[0]} sent {fewer:.0%} fewer bytes, losing {lost:.1f} points of accuracy — "
                 + ("worth it" if fewer >= 0.8 and lost <= 2.0 else
                    "not at this density (the goal: ≥ 80% fewer at ≤ 2 points)"))
    every, best, _ = ex_search.best_and_rival(search_rows)  # as `explore.search.headline`
    ours = ex_search.saliency_at(search_rows, best["bytes"])["accuracy"]
    lines.append(f"the search with the link's time in its loss when each device sees a different input: "
                 f"{best['setting']} sent {best['fewer']:.0%} fewer bytes, losing "
                 f"{100 * (every['accuracy'] - best['accuracy']):.1f} points of accuracy, where our saliency "
                 f"ranking at the same {best['bytes']:,} B (interpolated) would lose "
                 f"{100 * (every['accuracy'] - ours):.1f}; on a slower link it keeps fewer transfers: "
                 f"{'holds' if kept_follows_link else 'does NOT hold'}")
    return when_to_use(lines, show)


def _real_links_line(latency: dict) -> str:
    """Whether any real link (loopback aside) let the split beat one device in this run."""
    real = {key: t for key, t in latency["measured"].items() if key[1] != "loopback"}
    if not real:
        return ""
    won = sorted(f"{name} at density {d}" for (d, name), t in real.items() if t < latency["alone"])
    return ("; the split beat one device over " + ", ".join(won) if won else
            f"; over none of the {len({k[1] for k in real})} real links measured did the split beat "
            "one device (each link's β is below β*, or its α alone exceeds the compute saved): "
            "one device answers faster")


def _bandwidth(beta: float) -> str:
    return f"{beta / 1e6:.2f} MB/s" if math.isfinite(beta) else "never"


def summary(verdict: dict, rows: list, density: float, world_size: int, search_rows: list,
            lines_a: list[str], lines_b: list[str]) -> None:
    """The chapter's closing verdicts (both parts' headlines) and its "when to use it" lines."""
    ex.print_headlines(verdict, rows, density, world_size)
    ex_search.headline(search_rows)
    print("When to use it (from this run):")
    for part, lines in (("A", lines_a), ("B", lines_b)):
        for line in lines:
            print(f"  {part}. {line}")
