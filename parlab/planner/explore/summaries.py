"""Notebook 13's per-plan checks as short summaries: every plan of the sweep counted, the worst
rows shown, the full table one argument away (`rows=None`).

The checks themselves are the chapter's (Narayanan et al., SC 2021, compose dp × tp × pp; every
plan must equal one process and send exactly its closed form): each plan of the sweep against
`single` (losses and final parameters, `RunResult.compare`, rtol 1e-4), the time model's message
bytes against the scheme's closed form (`costmodel.message_bytes` vs
`cost.nd_closed_form_bytes`), and the ledger's bytes and measured peak memory against the closed
forms. A summary is computed from *all* rows; `rows` only limits how many are printed below it
(the worst first). The tests keep every row's proof (tests/test_planner_*.py).
"""

from __future__ import annotations

TOLERANCE = 1e-4  # `RunResult.compare`'s default rtol


def _show(table, rows: int | None, what: str) -> None:
    """Print the first `rows` rows of a pandas table (all when None), saying how many are left."""
    shown = table if rows is None else table.head(rows)
    print(shown.to_string(index=False))
    if rows is not None and len(table) > rows:
        print(f"({len(table) - rows} more {what}: rows=None prints them all)")


def closed_form_summary(world_size: int, batch_size: int = 12, rows: int | None = 3):
    """Every candidate plan's bytes per step of its busiest rank, the time model's message list
    against the registered closed form (no run): the count that agree, the range, and the
    `rows` heaviest senders (disagreeing rows first). Returns the full table."""
    from parlab.planner.explore import closed_form_table

    table = closed_form_table(world_size, batch_size)
    n, equal = len(table), int(table["equal"].sum())
    lo, hi = table["busiest rank"].idxmin(), table["busiest rank"].idxmax()
    print(f"{n} plans at world size {world_size}: the time model's bytes per step of the busiest "
          f"rank equal the nd closed form in {equal} of {n}: "
          + ("agrees" if equal == n else "DOES NOT agree"))
    print(f"busiest rank per step: from {table['busiest rank'][lo]:,} B "
          f"({table['plan'][lo]}) to {table['busiest rank'][hi]:,} B ({table['plan'][hi]})")
    order = table.assign(_bad=~table["equal"]).sort_values(["_bad", "busiest rank"],
                                                           ascending=False)
    _show(order.drop(columns="_bad"), rows, "plans")
    return table


def exactness_summary(s, steps: int = 2, batch_size: int = 12, rows: int | None = 3) -> list:
    """Every plan of the sweep against `single`: how many match, the worst |Δloss| and the worst
    relative |Δparameter| over all plans, then the `rows` plans furthest from `single`.
    Returns [(plan, Comparison)] for every plan."""
    import pandas as pd

    from parlab.engine.runner import run

    ref = run("single", steps=steps, batch_size=batch_size)
    out = [(plan.describe(), result.compare(ref)) for plan, result in s.results.items()]
    table = pd.DataFrame([{"plan": p, "match": c.match, "|Δloss|": c.max_loss_diff,
                           "|Δparam| rel.": c.max_param_diff} for p, c in out])
    n, ok = len(out), int(table["match"].sum())
    loss, param = table["|Δloss|"].idxmax(), table["|Δparam| rel."].idxmax()
    print(f"{ok} of {n} plans equal single ({steps} steps, losses and final parameters, "
          f"rtol {TOLERANCE:g}): " + ("every plan is exact" if ok == n else "SOME DIFFER"))
    print(f"worst |Δloss| {table['|Δloss|'][loss]:.1e} ({table['plan'][loss]}); worst relative "
          f"|Δparameter| {table['|Δparam| rel.'][param]:.1e} ({table['plan'][param]}); both "
          f"≤ {TOLERANCE:g}: "
          + ("holds" if max(table["|Δloss|"].max(), table["|Δparam| rel."].max()) <= TOLERANCE
             else "fails"))
    worst = table.assign(_d=table[["|Δloss|", "|Δparam| rel."]].max(axis=1))
    worst = worst.sort_values(["match", "_d"], ascending=[True, False]).drop(columns="_d")
    with pd.option_context("display.float_format", "{:.1e}".format):
        _show(worst, rows, "plans")
    return out


def bytes_summary(s, rows: int | None = 3) -> None:
    """The ledger's bytes per step of the busiest rank and the measured peak memory per rank,
    each against its closed form: counts over every plan, then the `rows` plans that differ most
    (by bytes, then by the heaviest sender when all agree)."""
    import pandas as pd

    table = pd.DataFrame([{"plan": r["plan"], "bytes/step": r["measured_bytes"],
                           "closed form": r["predicted_bytes"], "peak": r["measured_peak"],
                           "peak closed form": r["predicted_peak"]} for r in s.rows])
    n = len(table)
    b_ok = int((table["bytes/step"] == table["closed form"]).sum())
    m_ok = int((table["peak"] == table["peak closed form"]).sum())
    print(f"{n} plans: ledger bytes per step = the closed form in {b_ok} of {n}; measured peak "
          f"memory per rank = the closed form in {m_ok} of {n}: "
          + ("agrees" if b_ok == m_ok == n else "DOES NOT agree"))
    off = (table["bytes/step"] - table["closed form"]).abs() + \
        (table["peak"] - table["peak closed form"]).abs()
    order = table.assign(_off=off).sort_values(["_off", "bytes/step"], ascending=False)
    _show(order.drop(columns="_off"), rows, "plans")
