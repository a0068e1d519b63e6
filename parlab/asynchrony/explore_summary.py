"""Notebook 09's measured summary: every figure printed from this run's results, each with its
verdict computed from the same run (never typed into markdown). It reads the runs the chapter's
sections made: the parameter-server race (`explore.race`), block-Jacobi (`explore_jacobi.jacobi_runs`)
and dual-batch (`explore_dualbatch.measure`)."""

from __future__ import annotations

import math

from parlab.asynchrony import explore as ex
from parlab.asynchrony import explore_dualbatch as ex_dualbatch
from parlab.asynchrony.explore_jacobi import jacobi_speedups


def summary(runs: dict, jruns: dict, dual: dict, tol: float = 1e-6) -> dict:
    """Print the headline numbers of this run and their verdicts; return them."""
    base = ex.last_update(runs["ps-sync"])
    asp, ssp = base / ex.last_update(runs["ps-async"]), base / ex.last_update(runs["ps-ssp"])
    single = ex.eval_loss(runs["single"].state)
    loss = {n: ex.eval_loss(runs[n].state) / single - 1 for n in ex.SCHEMES}
    stale = {n: ex.staleness_stats(runs[n])["max"] for n in ex.SCHEMES}
    workers = runs["ps-sync"].config.world_size - 1
    print(f"parameter server ({runs['ps-sync'].config.clock.label}, {workers} worker(s), the last "
          f"{runs['ps-sync'].config.options['straggler']:g}× slower): ASP reached its last update "
          f"{asp:.2f}× and SSP {ssp:.2f}× as soon as BSP; held-out loss vs single: "
          f"BSP {loss['ps-sync']:+.1%}, SSP {loss['ps-ssp']:+.1%}, ASP {loss['ps-async']:+.1%}; "
          f"max staleness ASP {stale['ps-async']}, "
          f"SSP {stale['ps-ssp']}")
    if workers < 2:
        print("  verdict: one worker, nothing to wait for: the three coincide (as expected)")
    else:
        ok = asp > max(ssp, 1) and ssp >= 0.9
        print(f"  verdict: {'agrees' if ok else 'does NOT agree'} with the model (ASP soonest; SSP ≈ BSP to "
              "the last update: a constant straggler still owes its shard of every clock)")
    speed = jacobi_speedups(jruns, tol)
    cfg = jruns["sync"].cfg
    print(f"block-Jacobi ({cfg.label}; {jruns['sync'].ranks} ranks): to a {tol:.0e} residual asynchronous "
          f"{speed['async']['speedup']:.2f}×, with injected delays "
          f"{speed['async + delays']['speedup']:.2f}×, "
          f"flexible {speed['flexible']['speedup']:.2f}× as soon as synchronous; macroiterations sync "
          f"{len(jruns['sync'].macro_times())}, async {len(jruns['async'].macro_times())}")
    for name in ("async", "flexible"):
        s = speed[name]["speedup"]
        verdict = "agrees (never waiting for the straggler pays)" if s > 1 else \
            "does NOT agree: see the diagnosis printed under the Jacobi table"
        print(f"  verdict, {name} sooner than sync: {verdict}")
    rows = dual["rows"]
    change = rows["hybrid"]["seconds_to_target"] / rows["one batch size"]["seconds_to_target"] - 1
    alone = rows["dual-batch"]["seconds_to_target"] / rows["one batch size"]["seconds_to_target"] - 1
    print(f"dual-batch ({dual.get('clock', 'this CPU, raw')}): time to a common held-out loss {change:+.1%} "
          f"for the hybrid, {alone:+.1%} for dual-batch alone, vs one batch size (the paper: "
          f"{ex_dualbatch.CLAIM:+.1%}, ResNet-18 on CIFAR-100)")
    verdict = "agrees with the paper's direction" if change <= ex_dualbatch.CLAIM / 2 else \
        "does NOT reproduce it: see the diagnosis under the dual-batch table"
    print(f"  verdict: {verdict}")
    return {"asp_speedup": asp, "ssp_speedup": ssp, "jacobi": {k: v["speedup"] for k, v in speed.items()},
            "hybrid_change": change if math.isfinite(change) else math.nan}
