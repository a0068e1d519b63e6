"""The paper's question: does operator placement halve DualPipe's bubble at equal memory?

She et al. (2025, arXiv 2503.09357, abstract) report about half of DeepSeek-V3's DualPipe bubble
under the same memory. Asked twice here: on the pipeline chapter's own action lists in ticks
(`placement.compare`: the planner at DualPipe's memory against DualPipe, at 1F1B's against 1F1B,
one simulator; `dualpipe_comparison`), and on real layers (`placement.real_layers`: gpt2-xl's
attention and MLP ops priced on an accelerator, placed by the operator MILP and the
decomposition at DualPipe's peak; `layers_comparison`). The verdict lines are computed from the
rows, and say where a stopped solve leaves the claim unshown.
"""

from __future__ import annotations

from parlab.planner.placement.compare import compare, verdicts
from parlab.planner.placement.real_layers import compare_layers, verdict
from parlab.planner.placement.schedule_mip import Units


def dualpipe_comparison(p: int = 4, m: int = 8, latencies: tuple = (0, 1),
                        with_1f1b: tuple = (0,), units: Units | None = None,
                        show: bool = True) -> list[list[dict]]:
    """The paper's comparison (`schedule_mip.compare`) at each message latency (ticks):
    DualPipe and the planner at its memory at every latency, 1F1B and the planner at its memory
    at the latencies in `with_1f1b`; printed with the verdicts. Returns the rows per latency."""
    units = Units() if units is None else units
    out = []
    for latency in latencies:
        u = Units(units.forward, units.backward, units.weight, latency)
        names = ("1F1B", "DualPipe") if latency in with_1f1b else ("DualPipe",)
        out.append(compare(p, m, u, schedules=names))
        if show:
            print_dualpipe(out[-1])
    return out


def print_dualpipe(rows: list[dict]) -> None:
    """One comparison's rows and its verdicts."""
    print(f"{'schedule':<30}{'placement':<28}{'makespan':>9}{'bubble':>8}{'act.':>6}"
          f"{'weights':>8}{'solve':>8}")
    for r in rows:
        solve_s = f"{r['solve_s']:.1f} s" if r["solve_s"] is not None else ""
        print(f"{r['schedule']:<30}{r['placement']:<28}{r['makespan']:>7.0f} t{r['bubble']:>8.1%}"
              f"{r['peak_chunks']:>6}{r['weight_chunks']:>8}{solve_s:>8}")
    for line in verdicts(rows):
        print("  " + line)
    print()


def layers_comparison(preset: str = "gpt2-xl", layers: int = 2, settings: tuple = ((2, 4), (4, 8)),
                      accelerator: str = "H100", time_limit: float = 10.0,
                      show: bool = True) -> list[list[dict]]:
    """She et al.'s question on real layers (`real_layers.compare_layers`) for each (p, m)
    of `settings`: 1F1B, DualPipe, the MILP and the decomposition at DualPipe's memory, printed
    with the verdict. Returns the rows per setting."""
    out = []
    for p, m in settings:
        out.append(compare_layers(preset, layers, p, m, accelerator=accelerator,
                                  time_limit=time_limit))
        if show:
            print_layers(out[-1])
    return out


def print_layers(rows: list[dict]) -> None:
    """One real-layer comparison: per plan its makespan, bubble, peak bytes, solve time; verdict."""
    acc = rows[0]["accelerator"]
    print(f"{'plan':<10}{'placement':<32}{'makespan':>14}{'bubble':>8}{'peak/rank':>11}"
          f"{'solve':>8}  status")
    for r in rows:
        solve_s = f"{r['solve_s']:.1f} s" if r["solve_s"] is not None else ""
        print(f"{r['plan']:<10}{r['what']:<32}{r['makespan'] * 1e3:>7.3f} {acc} ms"
              f"{r['bubble']:>8.1%}{r['peak'] / 1e9:>8.2f} GB{solve_s:>8}  {r['status'][:60]}")
    for line in verdict(rows):
        print("  " + line)
    print()
