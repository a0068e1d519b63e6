"""What notebook 09's flexible-communication part prints: per mode, the messages each rank sent,
sweeps per macroiteration, and time to a residual, and the ordering the theory leads one to
expect (flexible ≤ async ≤ sync in time, with a straggler) checked against the measurement.

Flexible communication after Miellou, El Baz & Spiteri, "A new class of asynchronous iterative
algorithms with order intervals" (Math. Comp. 1998); macroiterations after Bertsekas & Tsitsiklis
(1989). The runs come from `parlab.asynchrony.explore.jacobi_runs`.
"""

from __future__ import annotations

import math


def messages(run) -> list[int]:
    """Halo messages each rank sent (ledger)."""
    counts = [0] * run.ranks
    for r in run.ledger:
        if r["op"] in ("send", "isend"):
            counts[r["rank"]] += 1
    return counts


def flexible_summary(runs: dict, tol: float = 1e-6) -> None:
    """Messages, relaxations per macroiteration, time to `tol`; the diagnosis where flexible is
    not sooner than async (computed from the same runs)."""
    reach = f"ms to {tol:.0e}"
    print(f"{'mode':<15} {'messages per rank':<24} {'relax./macroit.':>16} {reach:>11}  "
          f"({next(iter(runs.values())).cfg.label})")
    times = {}
    for name, r in runs.items():
        macro = len(r.macro_times())
        times[name] = r.time_to(tol)
        ratio = max(r.sweeps()) / macro if macro else math.inf
        print(f"{name:<15} {str(messages(r)):<24} {ratio:>16.2f} {times[name] * 1e3:>11.1f}")
    flexible, plain = times.get("flexible"), times.get("async")
    if flexible is None or plain is None:
        return
    print(f"flexible / async time to {tol:.0e}: {flexible / plain:.2f}")
    if flexible < plain:
        print(f"verdict: flexible communication was sooner than async ({plain / flexible:.2f}×): its "
              "neighbours read the straggler's partial values instead of waiting for its whole update")
    else:
        last = runs["flexible"].ranks - 1
        sent = messages(runs["flexible"])[last], messages(runs["async"])[last]
        why = ("its partial values did not get through more often (the outbox keeps only the newest: "
               "a busy link drops the partial ones)" if sent[0] <= sent[1] else
               "they got through, but its neighbours freeze their halos for a whole update, so a "
               "partial value waits for their next update to be read")
        print(f"diagnosis: flexible was not sooner. The straggler sent {sent[0]} messages "
              f"(async {sent[1]}): {why}")
