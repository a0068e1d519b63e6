"""Notebook 09's measured summaries: one per part (A parameter servers, B dual-batch, C asynchronous
iterations, D flexible communication) and the chapter's, every figure printed from this run's
results with its verdict computed from the same run (never typed into markdown), each part ending
in its "When to use it (from this run)" lines; the chapter's summary collects them. It reads the
runs the parts made, all on the chapter's paced clock: the race (`explore.race`), the sharded servers
(`explore.sharded`), dual-batch (`explore.dualbatch.measure`) and block-Jacobi
(`explore.jacobi.jacobi_runs`). SSP under jitter (`explore.ssp`) is the appendix's: the server's
book in batch units, not a clock, so it prints its own verdict and is not collected here.
"""

from __future__ import annotations

import math

import torch

from parlab.asynchrony import cost
from parlab.asynchrony import explore as ex
from parlab.asynchrony.explore import dualbatch as ex_dualbatch
from parlab.asynchrony.explore.jacobi import jacobi_speedups
from parlab.core.when_to_use import when_to_use

_HELDOUT: dict = {}


def _heldout(result) -> float:
    """`explore.eval_loss` of a run's final parameters, once per run object (the parts share it)."""
    if id(result) not in _HELDOUT:
        _HELDOUT[id(result)] = (result, ex.eval_loss(result.state))  # keep result alive: ids stay unique
    return _HELDOUT[id(result)][1]


def part_a(runs: dict, sharded: dict, show: bool = True) -> list[str]:
    """Parameter servers (Dean et al. 2012; Ho et al. 2013; Li et al. 2014): BSP, SSP, ASP, sharding."""
    base = ex.last_update(runs["ps-sync"])
    asp, ssp = base / ex.last_update(runs["ps-async"]), base / ex.last_update(runs["ps-ssp"])
    loss = _heldout(runs["ps-async"]) / _heldout(runs["single"]) - 1
    stale = ex.staleness_stats(runs["ps-async"])["max"]
    straggler = runs["ps-sync"].config.options["straggler"]
    s = runs["ps-ssp"].config.options.get("staleness")
    lines = [f"BSP (ps-sync) when the workers are equally fast: it is `single` exactly (match on this run: "
             f"{sharded.get('match')}); with a {straggler:g}× straggler every update waited for "
             f"it ({1e3 * base:.4g} ms to the last update)"]
    lines.append(f"ASP (ps-async) when one worker is persistently slow and stale gradients are tolerable: "
                 f"{asp:.2f}× as soon as BSP here, at max staleness {stale} and held-out loss {loss:+.1%} vs "
                 f"single" + ("" if asp > 1.05 else " — no gain on this run, so BSP"))
    lines.append(f"SSP (ps-ssp, s = {s}) " + (
        f"behind this persistent {straggler:g}× straggler: {ssp:.2f}× as soon as BSP here" if ssp > 1.05 else
        f"not for a persistent straggler: {ssp:.2f}× as soon as BSP behind this {straggler:g}× one (it still "
        "owes its shard of every clock): use ASP or rebalance the work there")
        + "; for step times that jitter, the appendix's replay (batch units, not a clock)")
    eff = sharded.get("effects")
    if eff:
        lines.append(f"shard the server (servers = k) when its link is the bottleneck: k = 2 cut the busiest "
                     f"server's bytes {eff['shard']:.2f}× at equal W; the other {eff['role']:.2f}× of the "
                     f"{eff['total']:.2f}× came from a worker becoming a server (fewer gradients, not "
                     "sharding)")
    return when_to_use(lines, show)


def part_b(dual: dict, show: bool = True) -> list[str]:
    """Dual-batch and cyclic progressive learning (Lu et al. 2025)."""
    rows = dual["rows"]
    base = rows["one batch size"]["seconds_to_target"]
    change = rows["hybrid"]["seconds_to_target"] / base - 1 if math.isfinite(base) else math.nan
    alone = rows["dual-batch"]["seconds_to_target"] / base - 1 if math.isfinite(base) else math.nan
    if math.isfinite(change) and change <= ex_dualbatch.CLAIM / 2:
        line = (f"the hybrid (dual-batch + cyclic sequence length) when one worker is slow and its batch can "
                f"shrink: {change:+.1%} time to target here (the paper: {ex_dualbatch.CLAIM:+.1%})")
    elif not math.isfinite(base):
        line = "no verdict at this length: one batch size never reached the target (raise dual_steps)"
    else:
        def said(x):
            return ("never reached it" if not math.isfinite(x) else
                    f"reached it {-x:.1%} sooner" if x < 0 else f"reached it {x:.1%} later" if x > 0 else
                    "reached it at the same time")
        line = (f"not at this scale: to the same held-out loss (a target set by the single process), the "
                f"hybrid {said(change)} than one batch size, dual-batch alone {said(alone)} — short of the "
                f"paper's {-ex_dualbatch.CLAIM:.1%} sooner; keep one batch size")
    return when_to_use([line], show)


def part_c(jruns: dict, tol: float = 1e-6, show: bool = True) -> list[str]:
    """Asynchronous iterations (Chazan & Miranker 1969; Baudet 1978; Bertsekas & Tsitsiklis 1989)."""
    speed = jacobi_speedups(jruns, tol)["async"]["speedup"]
    cfg = jruns["sync"].cfg
    rho, rho_abs = cost.contraction(torch.tensor([[0.6, 0.6], [-0.6, 0.6]]))
    lines = [(f"asynchronous iterations when ρ(|M|) < 1 and the ranks run at different speeds: "
              f"{speed:.2f}× sooner to {tol:.0e} than synchronous sweeps with a {cfg.straggler:g}× straggler"
              if speed > 1 else f"asynchronous iterations: not sooner on this run ({speed:.2f}×): sweep "
              "synchronously"),
             f"synchronous only when ρ(M) < 1 ≤ ρ(|M|) (e.g. ρ(M) = {rho:.2f}, ρ(|M|) = {rho_abs:.2f} "
             "above): some delay pattern diverges"]
    return when_to_use(lines, show)


def part_d(jruns: dict, tol: float = 1e-6, show: bool = True) -> list[str]:
    """Flexible communication (Miellou, El Baz & Spiteri 1998)."""
    flexible, plain = jruns["flexible"].time_to(tol), jruns["async"].time_to(tol)
    inner = jruns["flexible"].cfg.inner
    ratio = flexible / plain if math.isfinite(flexible) and math.isfinite(plain) else math.nan
    line = (f"flexible communication when an update is long ({inner} relaxations here) and a neighbour is "
            f"slow: {1 / ratio:.2f}× sooner than plain asynchronous" if ratio < 1 else
            f"flexible communication: not sooner on this run ({ratio:.2f}× async's time to {tol:.0e}): "
            "partial values pay only when the updates are long and the links idle")
    return when_to_use([line], show)


def summary(runs: dict, jruns: dict, dual: dict, sharded: dict, tol: float = 1e-6) -> dict:
    """Print the headline numbers of this run and their verdicts, then every part's "when to use
    it" lines; return the numbers."""
    base = ex.last_update(runs["ps-sync"])
    asp, ssp_speed = base / ex.last_update(runs["ps-async"]), base / ex.last_update(runs["ps-ssp"])
    loss = {n: _heldout(runs[n]) / _heldout(runs["single"]) - 1 for n in ex.SCHEMES}
    workers, model = runs["ps-sync"].config.world_size - 1, ex.race_model(runs)
    print(f"A. parameter server ({runs['ps-sync'].config.clock.label}, {workers} worker(s), the last "
          f"{runs['ps-sync'].config.options['straggler']:g}× slower): ASP reached its last update {asp:.2f}× "
          f"and SSP {ssp_speed:.2f}× as soon as BSP (the server's book: {model['ps-async']:.2f}× and "
          f"{model['ps-ssp']:.2f}×); held-out loss vs single: BSP {loss['ps-sync']:+.1%}, "
          f"SSP {loss['ps-ssp']:+.1%}, ASP {loss['ps-async']:+.1%}")
    speed = jacobi_speedups(jruns, tol)
    print(f"C/D. block-Jacobi ({jruns['sync'].cfg.label}; {jruns['sync'].ranks} ranks): to a {tol:.0e} "
          f"residual asynchronous {speed['async']['speedup']:.2f}×, with injected delays "
          f"{speed['async + delays']['speedup']:.2f}×, flexible {speed['flexible']['speedup']:.2f}× as soon "
          f"as synchronous; macroiterations sync {len(jruns['sync'].macro_times())}, async "
          f"{len(jruns['async'].macro_times())}")
    rows = dual["rows"]
    one, hybrid = rows["one batch size"]["seconds_to_target"], rows["hybrid"]["seconds_to_target"]
    change = hybrid / one - 1 if math.isfinite(one) and math.isfinite(hybrid) else math.nan
    said = f"{change:+.1%}" if math.isfinite(change) else (
        "never reached by the hybrid" if math.isfinite(one) else "never reached by one batch size")
    print(f"B. dual-batch ({dual.get('clock', 'this CPU, raw')}): time to a fixed held-out loss (the "
          f"single process's, {dual.get('target_source', '')}) {said} for the hybrid vs one batch size "
          f"(the paper: {ex_dualbatch.CLAIM:+.1%}, ResNet-18 on CIFAR-100)")
    lines = (part_a(runs, sharded, show=False) + part_b(dual, show=False)
             + part_c(jruns, tol, show=False) + part_d(jruns, tol, show=False))
    when_to_use(lines, True)
    return {"asp_speedup": asp, "ssp_speedup": ssp_speed,
            "jacobi": {k: v["speedup"] for k, v in speed.items()},
            "hybrid_change": change if math.isfinite(change) else math.nan, "when": lines}
