"""What notebook 09's asynchronous-iterations part runs: block-Jacobi, synchronous, totally
asynchronous and flexible, the last rank a straggler, on the solver's virtual clock (a paced
chapter clock) or this CPU's raw clock; residual vs macroiterations and vs time; the contraction
condition.

Asynchronous iterations after Chazan & Miranker (1969), Baudet (1978) and Bertsekas & Tsitsiklis
(1989); the solver is `parlab.asynchrony.jacobi_solver`, the closed forms `parlab.asynchrony.cost`.
"""

from __future__ import annotations

import math

import torch

from parlab.asynchrony import cost, jacobi, jacobi_solver


# ----------------------------------------------------------------------------- 6. asynchronous iterations
def jacobi_clock(clock: str) -> str:
    """Jacobi's clock for a chapter clock: "wall" stays raw; a paced clock ("A100", ...) means the
    solver's virtual clock, a sweep priced on that accelerator (`priced_sweep_ms`)."""
    return "wall" if clock == "wall" else "virtual"


def jacobi_runs(ranks: int, sweeps: int = 200, straggler: float = 3.0, delay_ms: float = 1.0,
                n: int = 16, sigma_h2: float = 0.4, inner: int = 4, clock: str = "A100") -> dict:
    """Synchronous, asynchronous (also with injected delays) and flexible communication, the last
    rank slow; every update `inner` relaxations with frozen halos."""
    ranks = max(ranks, 2)
    base = dict(n=n, sweeps=sweeps, straggler=straggler, sigma_h2=sigma_h2, inner=inner,
                clock=jacobi_clock(clock))
    if clock != "wall":  # a sweep priced on the accelerator, a halo on its NVLink; delays ×2 a sweep
        work_ms, link_ms = priced_sweep_ms(n, ranks, clock)
        base.update(work_ms=work_ms, link_ms=link_ms, priced=clock)
        delay_ms = 2 * work_ms
    return {"sync": jacobi_solver.solve(ranks, jacobi.JacobiConfig(mode="sync", **base)),
            "async": jacobi_solver.solve(ranks, jacobi.JacobiConfig(mode="async", **base)),
            "async + delays": jacobi_solver.solve(ranks, jacobi.JacobiConfig(mode="async", delay_ms=delay_ms,
                                                                      **base)),
            "flexible": jacobi_solver.solve(ranks, jacobi.JacobiConfig(mode="flexible", **base))}


def priced_sweep_ms(n: int, ranks: int, clock: str = "A100") -> tuple[float, float]:
    """(ms of one sweep of an n/ranks × n strip, its operators priced on `clock`'s accelerator as a
    paced compute span is; ms of one halo message, (4 + n) float64, on its real NVLink: α + bytes/β)."""
    from parlab.core import clock as clocks
    from parlab.core.link import real
    from parlab.core.pacer import count_work

    cfg = jacobi.JacobiConfig(n=n)
    block, row = torch.zeros(max(n // ranks, 1), n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    paced = clocks.resolve(clock, 1)
    link = real("NVLink", clock)
    work = count_work(lambda: jacobi.sweep(block, row, row, cfg))
    return 1e3 * paced.price(work), 1e3 * (link.latency_s + (jacobi.META + n) * 8 / link.bandwidth_Bps)


def jacobi_speedups(runs: dict, tol: float = 1e-6) -> dict:
    """Time to `tol` of each mode and its speed-up over synchronous sweeps (same run set)."""
    base = runs["sync"].time_to(tol)
    out = {}
    for name, r in runs.items():
        t = r.time_to(tol)
        out[name] = {"time": t, "speedup": base / t if math.isfinite(t) and math.isfinite(base) else math.nan}
    return out


def jacobi_table(runs: dict, tol: float = 1e-6) -> dict:
    """Sweeps, macroiterations, time to `tol` and speed-up over sync; the verdict (asynchronous and
    flexible sooner than synchronous under the straggler) with the diagnosis where it fails."""
    cfg = runs["sync"].cfg
    speed = jacobi_speedups(runs, tol)
    reach = f"ms to {tol:.0e}"
    print(f"clock: {cfg.label}")
    if "async + delays" in runs:
        print(f"async + delays: every message also waits a seeded exponential delay (unbounded), mean "
              f"{runs['async + delays'].cfg.delay_ms * 1e3:.3g} µs (injected, like the straggler)")
    print(f"{'mode':<15} {'sweeps per rank':<22} {'macroiterations':>16} {reach:>11} {'speedup':>8}")
    for name, r in runs.items():
        t = speed[name]["time"]
        reached = f"{t * 1e3:>11.1f} {speed[name]['speedup']:>7.2f}×" if math.isfinite(t) else \
            f"{'not reached':>11} {'':>8}"
        print(f"{name:<15} {str(r.sweeps()):<22} {len(r.macro_times()):>16} {reached}")
    for name in ("async", "flexible"):
        s = speed[name]["speedup"]
        if s > 1:
            print(f"verdict: {name} reached {tol:.0e} {s:.2f}× sooner than synchronous sweeps: the fast "
                  f"ranks never wait for the {cfg.straggler:g}× straggler, as the theory expects")
        else:
            r = runs[name]
            print(f"verdict: {name} was NOT sooner ({s:.2f}×). Diagnosis: its ranks did {r.sweeps()} sweeps "
                  f"in {len(r.macro_times())} macroiterations (sync {len(runs['sync'].macro_times())}): "
                  f"the straggler's strip, updated at its own pace either way, set the time")
    return speed


def draw_jacobi(runs: dict):
    """Residual vs macroiterations (with the γ^m bound on the error) and vs time."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.4))
    for name, r in runs.items():
        res = r.residual_by_macroiteration()
        a.semilogy(range(1, len(res) + 1), res, label=name)
        times, values = r.residual_by_time()
        b.semilogy([t * 1e3 for t in times], values, label=name)
    cfg = next(iter(runs.values())).cfg
    m = max(len(r.macro_times()) for r in runs.values())
    a.semilogy(range(1, m + 1), [cfg.gamma ** k for k in range(1, m + 1)], "k:", label="γ^m (error bound)")
    a.set(xlabel="macroiteration", ylabel="residual ‖f − Au‖∞", title="residual vs macroiterations")
    b.set(xlabel=f"ms ({cfg.label})", ylabel="residual ‖f − Au‖∞", title="residual vs time")
    a.legend(fontsize=8)
    b.legend(fontsize=8)
    speed = jacobi_speedups(runs)
    ratios = ", ".join(f"{name} {speed[name]['speedup']:.2f}×" for name in runs if name != "sync")
    fig.suptitle(f"to 1e-6: {ratios}" + f" as soon as synchronous (the last rank {cfg.straggler:g}× slower)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def check_contraction() -> None:
    """Poisson's Jacobi matrix is ≥ 0 (ρ(|M|) = ρ(M) < 1); a rotation-like M is not."""
    cfg = jacobi.JacobiConfig(n=6)
    n = cfg.n
    eye = torch.eye(n * n, dtype=torch.float64)
    zero = torch.zeros(n, dtype=torch.float64)
    # the iteration matrix column by column: M e_i = sweep(e_i) − sweep(0)
    columns = [(jacobi.sweep(e.reshape(n, n), zero, zero, cfg) - jacobi.sweep(0 * e.reshape(n, n), zero, zero,
                                                                               cfg)).reshape(-1) for e in eye]
    poisson = torch.stack(columns, 1)  # (n², n²)
    for name, m in (("Jacobi, −Δ + σ, n=6", poisson), ("M = [[.6, .6], [−.6, .6]]",
                                                        torch.tensor([[0.6, 0.6], [-0.6, 0.6]]))):
        rho, rho_abs = cost.contraction(m)
        print(f"{name:<26} ρ(M) = {rho:.3f}  ρ(|M|) = {rho_abs:.3f}  synchronous converges: {rho < 1}; "
              f"asynchronous for every delay pattern: {rho_abs < 1}")
