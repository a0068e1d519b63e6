"""Operator placement with memory as a constraint: the monolithic MILP beside the bi-level
decomposition as the cap per rank goes down from the 1F1B pipeline's memory.

She et al. (2025, arXiv 2503.09357) solve the placement MIP bi-level — operators merged into
groups, then the MIP over the groups — to trade a little makespan for a much shorter solve. Here
both (`placement.milp.solve`, `placement.bilevel.bilevel`) at fractions of 1F1B's memory
(`placement_demo.pipeline_cap`), each row's makespan predicted (`placement.tasks.evaluate`),
its solve time and its peak (`placement.op_costs.peak_memory`); "no plan fits" where none does.
"""

from __future__ import annotations

from parlab.core.link import Link, resolve
from parlab.planner.explore.placement_demo import pipeline_cap
from parlab.planner.placement.bilevel import bilevel
from parlab.planner.placement.measured_graph import Graph
from parlab.planner.placement.milp import solve
from parlab.planner.placement.op_costs import measure_memory, peak_memory
from parlab.planner.placement.tasks import evaluate


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
