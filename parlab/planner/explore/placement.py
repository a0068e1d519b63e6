"""Operator-level placement in the notebook: solve under a memory cap, decompose, draw, run, and
ask the paper's question of DualPipe.

She et al. (2025, arXiv 2503.09357) pose planning as a scheduling MIP under memory, solve it
bi-level (operators merged, then the MIP) and report about half of DualPipe's bubble at equal
memory. Here: one small branchy graph placed exactly (`placement.milp.solve`), by the
decomposition (`placement.bilevel`) and as a 1F1B pipeline, each predicted and run for real
(`parlab.run("placed", plan=...)`) against `parlab.run("single", model="op-graph")`; the paper's
comparison on chapter 04's schedules (`placement.compare`); the same on gpt2-xl's layers
(`placement.real_layers`). The notebook's API (`demo_graph`, `solve`, `draw`, `memory_table`,
`placement_report`, `dualpipe_comparison`, `layers_comparison`, `show`): docs/planner.md,
`parlab.planner.explore.placement`.
"""

from __future__ import annotations

import os
import statistics

from parlab.core.link import Link, resolve
from parlab.pipeline.cost import theory_bubble
from parlab.planner.explore.placement_run import (
    bubble,
    later,
    makespans,
    reference,
    run_plan,
    sent_bytes,
    step_memory,
    task_seconds,
    tasks_of,
)
from parlab.planner.placement.bilevel import bilevel
from parlab.planner.placement.compare import compare, verdicts
from parlab.planner.placement.measured_graph import Graph, demo_graph
from parlab.planner.placement.milp import solve
from parlab.planner.placement.op_costs import measure_memory, peak_memory
from parlab.planner.placement.pipeline_1f1b import pipeline_plan
from parlab.planner.placement.placed_cost import message_bytes
from parlab.planner.placement.real_layers import compare_layers, verdict
from parlab.planner.placement.schedule_mip import Units
from parlab.planner.placement.tasks import PlacementPlan, evaluate

__all__ = ["demo_graph", "solve", "draw", "draw_run", "placement_report", "print_report",
           "run_both", "pipeline_cap", "memory_table", "print_memory_table",
           "dualpipe_comparison", "print_dualpipe", "layers_comparison", "print_layers", "show"]


SHORT = {"stem": "st", "mlp_up": "up", "mlp_down": "dn", "attn": "at", "conv": "cv", "merge": "mg",
         "head": "hd"}


def _gantt(ax, bars, ranks, title, comm=()):
    """`parlab.viz.timeline` of the bars (rank, t0, t1, task), each labelled with its op and
    micro-batch; `comm`: the run's communication and wait events, drawn above and below."""
    from parlab.viz import timeline
    events = [{"rank": r, "kind": "compute", "name": "forward" if task[0] == "F" else "backward",
               "t0": t0, "t1": t1, "args": {}} for r, t0, t1, task in bars] + list(comm)
    ax = timeline(events, ax=ax, title=title, step=None)
    span = max((t1 for _, _, t1, _ in bars), default=0.0)
    for rank, t0, t1, task in bars:  # a label only where its bar is wide enough to hold it
        if t1 - t0 >= 0.035 * span:
            ax.text((t0 + t1) / 2 * 1e3, rank, f"{SHORT.get(task[1], task[1])}{task[2]}",
                    ha="center", va="center", fontsize=6, color="white", clip_on=True)
    ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)])
    ax.set_xlabel("time (ms); labels: op and micro-batch ("
                  + ", ".join(f"{v} {k}" for k, v in SHORT.items()) + "); narrow ops unlabelled")
    ax.figure.tight_layout()
    return ax


def draw(graph: Graph, plan: PlacementPlan, link: Link | str | None = None, ax=None):
    """The plan's predicted schedule (α-β messages, measured op times): F blue, B green."""
    import matplotlib.pyplot as plt
    timing = evaluate(graph, plan, resolve(link))
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.6 + 0.6 * plan.ranks))
    place = plan.placement
    bars = [(place[t.op], timing.start[t], timing.end[t], tuple(t)) for t in timing.start]
    bubble = ", ".join(f"{b:.0%}" for b in timing.bubble)
    return _gantt(ax, bars, plan.ranks, f"{plan.name} predicted: {timing.makespan * 1e3:.2f} ms, "
                  f"idle per rank {bubble}")


def draw_run(run, step: int | None = None, ax=None):
    """One measured step of a run (default: the last), drawn like `draw`."""
    import matplotlib.pyplot as plt
    step = run.config.steps - 1 if step is None else step
    ranks = run.config.world_size
    events = tasks_of(run, step)
    t0 = min(e["t0"] for e in events)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.6 + 0.6 * ranks))
    bars = [(e["rank"], e["t0"] - t0, e["t1"] - t0, e["args"]["task"]) for e in events]
    t1 = max(e["t1"] for e in events)
    comm = [{**e, "t0": max(e["t0"], t0) - t0, "t1": min(e["t1"], t1) - t0}
            for e in run.timeline if e["kind"] in ("comm", "wait") and e["t1"] > t0 and e["t0"] < t1]
    plan = run.config.options["plan"]
    return _gantt(ax, bars, ranks, f"{plan.name} measured, step {step}: "
                  f"{makespans(run)[step] * 1e3:.2f} ms", comm)


def pipeline_cap(graph: Graph, ranks: int) -> float:
    """1F1B's memory: the most bytes any rank of the 1F1B plan holds (weights + activations)."""
    return max(peak_memory(pipeline_plan(graph, ranks), measure_memory(graph)))


def run_both(graph: Graph, ranks: int, link: Link | str | None = None, steps: int = 3,
             time_limit: float = 30.0) -> dict[str, tuple]:
    """The plan solved at 1F1B's memory (`pipeline_cap`) and the 1F1B plan of the same graph,
    each run for `steps` steps: {name: (plan, RunResult)}."""
    link = resolve(link)
    pipe = pipeline_plan(graph, ranks)
    plans = {"planned (MILP)": solve(graph, ranks, link, time_limit=time_limit,
                                     memory_cap=pipeline_cap(graph, ranks)),
             "1F1B pipeline": pipe}
    return {name: (plan, run_plan(graph, plan, steps=steps, link=link))
            for name, plan in plans.items()}


def placement_report(graph: Graph, ranks: int, link: Link | str | None = None, steps: int = 3,
                     runs: dict | None = None) -> list[dict]:
    """Printable rows, one per plan: makespan and idle fraction per rank predicted (α-β model,
    measured op times) beside measured, the same plan replayed with the run's own task times, the
    ledger's bytes beside the closed form, memory per rank predicted (`peak_memory`) beside
    measured (the run's saved tensors), and whether losses and gradients match `single`."""
    link = resolve(link)
    runs = run_both(graph, ranks, link, steps) if runs is None else runs
    memory = measure_memory(graph)
    rows = []
    for name, (plan, run) in runs.items():
        model = evaluate(graph, plan, link)
        replay = evaluate(graph, plan, link, dur=task_seconds(run))
        check = run.compare(reference(graph, run.config.steps))
        rows.append({"plan": name, "placement": " ".join(f"{op}→{r}" for op, r in plan.place),
                     "predicted_ms": model.makespan * 1e3,
                     "measured_ms": statistics.median(later(makespans(run))) * 1e3,
                     "replay_ms": replay.makespan * 1e3,
                     "predicted_bubble": list(model.bubble), "measured_bubble": bubble(run),
                     "bytes_closed_form": message_bytes(graph, plan),
                     "bytes_ledger": sent_bytes(run, 0), "match": check.match,
                     "predicted_memory": list(peak_memory(plan, memory)),
                     "measured_memory": [max(step[r] for step in step_memory(run))
                                         for r in range(plan.ranks)],
                     "ranks": plan.ranks, "microbatches": graph.microbatches,
                     "max_diff": max(check.max_loss_diff, check.max_param_diff)})
    return rows


def _pct(values) -> str:
    return " ".join(f"{v:4.0%}" for v in values)


def _kb(values) -> str:
    return " ".join(f"{v / 1e3:,.0f}" for v in values)


def print_report(rows: list[dict]) -> None:
    """The table of `placement_report`, and what the measurement says where it disagrees. Times
    are this CPU's, raw: the runs are on the wall clock (`clock="wall"`), not paced."""
    print("times: this CPU, raw (wall clock; op times profiled here)")
    print(f"{'plan':<16}{'predicted':>11}{'measured':>10}{'replay':>9}   "
          f"{'idle/rank predicted':<22}{'idle/rank measured':<22}bytes/rank (ledger = closed form)")
    for r in rows:
        same = "=" if r["bytes_ledger"] == r["bytes_closed_form"] else "≠"
        print(f"{r['plan']:<16}{r['predicted_ms']:>9.2f}ms{r['measured_ms']:>8.2f}ms"
              f"{r['replay_ms']:>7.2f}ms   {_pct(r['predicted_bubble']):<22}"
              f"{_pct(r['measured_bubble']):<22}{r['bytes_ledger']} {same} {r['bytes_closed_form']}"
              f"   match: {r['match']}")
    print("predicted: the α-β model with op times profiled once; replay: the same plan timed with "
          "the task times this run measured (compute drift removed, messages still modelled)")
    for r in rows:
        fits = all(m <= p for m, p in zip(r["measured_memory"], r["predicted_memory"]))
        print(f"{r['plan']}: memory per rank (kB) predicted {_kb(r['predicted_memory'])}, measured "
              f"{_kb(r['measured_memory'])}: "
              + ("measured ≤ predicted on every rank (the model counts a buffer two ops save "
                 "twice; the run holds it once)" if fits else "MEASURED ABOVE THE MODEL"))
    if len(rows) > 1 and rows[0]["plan"].startswith("planned"):
        cap = max(rows[1]["predicted_memory"])
        print(f"the planned row was solved at 1F1B's memory, {cap / 1e3:,.0f} kB per rank: its "
              f"predicted peak {max(rows[0]['predicted_memory']) / 1e3:,.0f} kB "
              + ("fits" if max(rows[0]["predicted_memory"]) <= cap * (1 + 1e-9) else "DOES NOT fit"))
    for r in rows:
        if r["plan"].startswith("1F1B") and r["ranks"] > 1:
            p, m = r["ranks"], r["microbatches"]
            mean = sum(r["predicted_bubble"]) / p
            print(f"1F1B closed form for equal stages with F = B: bubble (p−1)/(m+p−1) = "
                  f"{theory_bubble('1f1b', p, m):.0%} of the step, i.e. (p−1)/m = {(p - 1) / m:.0%} "
                  f"of the ideal compute time as Narayanan et al. (SC 2021, §2.2.1) state it; with "
                  f"these unequal stages the model gives {mean:.0%} of the step on average, the run "
                  f"{sum(r['measured_bubble']) / p:.0%}")
    for r in rows:
        off = r["measured_ms"] / r["predicted_ms"]
        if not 0.8 <= off <= 1.25:  # flagged: the model misses by more than a quarter
            print(f"{r['plan']}: the model is off — measured {off:.2f}× its prediction; this run's "
                  f"own task times (replay) account for {r['replay_ms'] / r['predicted_ms']:.2f}× "
                  f"(compute ran at another speed than profiled: a shared, loaded CPU), messages "
                  f"and waits beyond the α-β model for the remaining "
                  f"{r['measured_ms'] / r['replay_ms']:.2f}×")
    if rows and rows[0]["ranks"] > (os.cpu_count() or 1):
        print(f"note: {rows[0]['ranks']} ranks share {os.cpu_count()} cores here, so branches the "
              "plan runs at once cannot all compute at once: measured times exceed the model")
    if len(rows) < 2:
        return
    a, b = rows[0], rows[1]
    for key, what in (("predicted_ms", "the model"), ("measured_ms", "the measurement")):
        faster = a if a[key] <= b[key] else b
        print(f"{what}: {faster['plan']} is faster ({a[key]:.2f} vs {b[key]:.2f} ms)")
    if (a["predicted_ms"] <= b["predicted_ms"]) != (a["measured_ms"] <= b["measured_ms"]):
        agrees = (a["replay_ms"] <= b["replay_ms"]) == (a["predicted_ms"] <= b["predicted_ms"])
        ratio = [r["measured_ms"] / r["replay_ms"] for r in (a, b)]
        print("the measurement disagrees with the model: "
              + ("with this run's own task times the model's order holds, so the tasks ran at "
                 "other speeds than profiled (a shared, loaded machine)" if agrees else
                 "even with this run's own task times the order flips, so the tasks themselves "
                 "ran slower in one plan")
              + f"; measured / replay = {ratio[0]:.2f} and {ratio[1]:.2f} (what messages and "
                "waits cost beyond the α-β model)")


def memory_table(graph: Graph, ranks: int, link: Link | str | None = None,
                 fractions: tuple = (0.8, 0.6, 0.45), groups: int | None = None,
                 time_limit: float = 30.0) -> list[dict]:
    """The monolithic MILP and the bi-level decomposition side by side under memory caps:
    `fractions` of 1F1B's memory (`pipeline_cap`). Rows per cap: each method's makespan
    (predicted), solve time and peak; "infeasible" where no plan fits."""
    link = resolve(link)
    memory = measure_memory(graph)
    top = pipeline_cap(graph, ranks)
    rows = []
    for f in fractions:
        cap = top * f
        row = {"fraction": f, "cap": cap}
        for key, method in (("milp", "monolithic"), ("bilevel", "bi-level")):
            try:
                if key == "milp":
                    plan = solve(graph, ranks, link, time_limit=time_limit, memory_cap=cap,
                                 memory=memory)
                    solve_s, extra = plan.solve_s, plan.model.splitlines()[0]
                else:
                    b = bilevel(graph, ranks, link, groups, cap, memory, time_limit)
                    plan, solve_s = b.plan, b.solve_s
                    extra = "merged " + ", ".join("+".join(g) for g in b.merged if len(g) > 1)
                row[key] = {"method": method, "makespan": evaluate(graph, plan, link).makespan,
                            "objective": plan.objective, "solve_s": solve_s,
                            "peak": max(peak_memory(plan, memory)), "status": plan.status,
                            "model": extra}
            except ValueError as error:
                row[key] = {"method": method, "infeasible": str(error)}
        rows.append(row)
    return rows


def print_memory_table(rows: list[dict]) -> None:
    """The caps, each method's makespan and solve time, and what the rows say."""
    print("times: this CPU, raw (the graph's op times); memory per rank: weights + activations "
          "held from each forward to its backward")
    print(f"{'cap':>24}  {'monolithic MILP':<34}{'bi-level (merge, place, order)':<34}")
    for r in rows:
        cells = []
        for key in ("milp", "bilevel"):
            c = r[key]
            cells.append("no plan fits" if "infeasible" in c else
                         f"{c['makespan'] * 1e3:6.2f} ms  {c['solve_s']:5.2f} s  "
                         f"peak {c['peak'] / 1e6:5.2f} MB")
        print(f"{r['cap'] / 1e6:6.2f} MB ({r['fraction']:>4.0%} of 1F1B's)  {cells[0]:<34}"
              f"{cells[1]:<34}")
    ok = [r for r in rows if "infeasible" not in r["milp"] and "infeasible" not in r["bilevel"]]
    if ok:
        worse = max(r["bilevel"]["makespan"] / r["milp"]["makespan"] for r in ok)
        faster = sum(r["milp"]["solve_s"] for r in ok) / max(sum(r["bilevel"]["solve_s"]
                                                                 for r in ok), 1e-9)
        print(f"bi-level vs monolithic over these caps: makespan at most {worse:.2f}× the "
              f"optimum, solve time {faster:.1f}× shorter in total ({ok[0]['bilevel']['model']})")
    for r in rows:
        for key in ("milp", "bilevel"):
            c = r[key]
            if "infeasible" not in c and c["peak"] > r["cap"] * (1 + 1e-6):
                print(f"{c['method']} at {r['cap'] / 1e6:.2f} MB: peak {c['peak'] / 1e6:.2f} MB "
                      "ABOVE THE CAP")
    tight = [r for r in ok if r["fraction"] < ok[0]["fraction"]]
    if tight and ok:
        slow = tight[-1]["milp"]["makespan"] / ok[0]["milp"]["makespan"]
        print(f"the tightest cap that fits ({tight[-1]['fraction']:.0%} of 1F1B's memory) costs "
              f"{slow:.2f}× the makespan at 1F1B's memory")


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


def show(ranks: int = 2, microbatches: int = 2, link: Link | str | None = "loopback",
         steps: int = 3, graph: Graph | None = None) -> list[dict]:
    """One setting end to end: the op times, the MILP's size, both plans predicted and drawn, both
    run, the report. Returns the report's rows."""
    import matplotlib.pyplot as plt
    graph = demo_graph(microbatches=microbatches) if graph is None else graph
    fwd, bwd = graph.times()
    print("measured op times (ms, forward / backward, one micro-batch): " + ", ".join(
        f"{n} {fwd[n] * 1e3:.2f}/{bwd[n] * 1e3:.2f}" for n in graph.names))
    print("edges (bytes per micro-batch): " + ", ".join(f"{u}→{v} {b:,}" for u, v, b in graph.edges()))
    runs = run_both(graph, ranks, link, steps)
    plan = runs["planned (MILP)"][0]
    print(f"MILP: {plan.status}, solved in {plan.solve_s:.1f} s")
    print(plan.model.splitlines()[0] if plan.model else "")
    print(plan.text())
    _, axes = plt.subplots(2, 1, figsize=(10, 1.6 + 1.2 * ranks), sharex=True)
    for ax, (plan, _) in zip(axes, runs.values()):
        draw(graph, plan, link, ax=ax)
    plt.tight_layout()
    plt.show()
    rows = placement_report(graph, ranks, link, steps, runs=runs)
    print_report(rows)
    return rows
