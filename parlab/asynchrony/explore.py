"""What notebooks/09_asynchrony.ipynb runs: the server's schedule drawn with versions, closed
forms, exactness, staleness properties, BSP / SSP / ASP with a straggler, asynchronous Jacobi,
and the widget callback (the exercises' checks: `explore_exercises`).

Parameter servers after Dean et al. (Downpour SGD, 2012) and Li et al. (OSDI 2014); bounded
staleness after Ho et al. (SSP, NeurIPS 2013); asynchronous iterations after Chazan & Miranker
(1969), Baudet (1978) and Bertsekas & Tsitsiklis (1989). Everything drives `parlab.run` or
`parlab.asynchrony.jacobi.solve`; the closed forms are `parlab.asynchrony.cost`.
"""

from __future__ import annotations

import math

import torch

import parlab
from parlab import models
from parlab.asynchrony import cost, jacobi
from parlab.asynchrony.delays import DelaySchedule, VirtualClock
from parlab.asynchrony.versions import Book, simulate
from parlab.models.data import global_batch

SCHEMES = ["ps-sync", "ps-ssp", "ps-async"]
COLORS = {"ps-sync": "tab:blue", "ps-ssp": "tab:green", "ps-async": "tab:red", "single": "black"}


def param_count(model: str = "gpt") -> int:
    net = models.build_model(model, models.model_config(model), 0)
    return sum(p.numel() for p in net.parameters())


# ----------------------------------------------------------------------------- 1. intuition
class RecordingClock(VirtualClock):
    """A virtual clock that remembers every computation: (worker, start, arrival)."""

    def __init__(self, schedule):
        super().__init__(schedule)
        self.started, self.spans = {}, []

    def dispatch(self, worker):
        self.started[worker] = self.now
        super().dispatch(worker)

    def next(self):
        worker = super().next()
        self.spans.append((worker, self.started[worker], self.now))
        return worker


def schedule(mode: str, workers: int, steps: int, staleness: int = 0, straggler: float = 3.0,
             jitter: float = 0.0, seed: int = 0):
    """The seeded schedule of a run without processes: (book, [(worker, start, end)])."""
    clock = RecordingClock(DelaySchedule(workers, seed, straggler, jitter))
    book = simulate(Book(workers, steps, mode, staleness), clock)
    return book, clock.spans


def draw_schedules(workers: int = 3, steps: int = 9, straggler: float = 3.0):
    """Worker lanes on the virtual clock for BSP, SSP (s=1) and ASP: each box one gradient,
    labelled job / version it was computed on; red: stale."""
    import matplotlib.pyplot as plt

    cases = [("ps-sync (BSP)", "ssp", 0), ("ps-ssp, s=1", "ssp", 1), ("ps-async (ASP)", "asp", 0)]
    fig, axes = plt.subplots(len(cases), 1, figsize=(11, 1.2 + 0.9 * workers * len(cases) / 2),
                             sharex=True)
    for ax, (title, mode, s) in zip(axes, cases):
        book, spans = schedule(mode, max(workers, 1), steps, s, straggler)
        for g, (worker, start, end) in zip(book.log, spans):
            color = "tab:red" if g.staleness else "tab:blue"
            ax.barh(worker, end - start, left=start, color=color, alpha=0.35 + 0.15 * min(g.staleness, 4),
                    edgecolor="black")
            ax.text((start + end) / 2, worker, f"j{g.job}/v{g.version}", ha="center", va="center", fontsize=7)
        ax.set_yticks(range(1, workers + 1), [f"rank {w}" for w in range(1, workers + 1)])
        ax.invert_yaxis()
        ax.set_title(f"{title}: {steps} updates by virtual time {max(e for _, _, e in spans):.1f}",
                     fontsize=9, loc="left")
    axes[-1].set_xlabel(f"virtual time (one gradient = 1; the last worker {straggler:g}× slower)")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- 2. the math
def bytes_table(world_size: int, model: str = "gpt", steps: int = 6) -> None:
    """Closed forms: message size, server bytes per update, bytes per rank over the run."""
    numel, workers = param_count(model), max(world_size - 1, 1)
    m = cost.message_bytes(numel)
    print(f"Ψ = {numel:,} parameters; one message M = 16 + 4Ψ = {m:,} bytes; W = {workers} worker(s)")
    print(f"{'mode':<10} {'server in/update':>17} {'server out/update':>18}")
    for mode, name in (("ssp", "sync, ssp"), ("asp", "async")):
        into, out = cost.server_bytes_per_update(numel, workers, mode)
        print(f"{name:<10} {into:>17,} {out:>18,}")
    print(f"over {steps} updates, sync/ssp: server sends {cost.ssp_bytes(numel, workers, steps)[0]:,}, "
          f"each worker {cost.ssp_bytes(numel, workers, steps)[1]:,}")


# ----------------------------------------------------------------------------- 4. correctness
def check_exact(world_size: int, steps: int = 3) -> None:
    """ps-sync = single; ps-async with one worker = single; ps-ssp with s = 0 = ps-sync."""
    ref = parlab.run("single", steps=steps)
    sync = parlab.run("ps-sync", world_size=world_size, steps=steps)
    # match only (deterministic); the float differences behind it are summation-order noise
    print(f"ps-sync on {world_size} ranks vs single:  match: {sync.compare(ref).match}")
    one = parlab.run("ps-async", world_size=2, steps=steps)
    print(f"ps-async, 1 worker vs single:     match: {one.compare(ref).match}")
    ssp = parlab.run("ps-ssp", world_size=world_size, steps=steps, staleness=0, delays="seeded",
                     straggler=3.0)
    print(f"ps-ssp s=0 vs ps-sync:            match: {ssp.compare(sync).match}; same bytes: "
          f"{ssp.bytes_per_rank() == sync.bytes_per_rank()}")


def staleness_stats(result) -> dict:
    log = result.outputs[0].extras["log"]
    jobs = sorted((g["job"], g["worker"]) for g in log)
    return {"max": max(g["staleness"] for g in log),
            "histogram": dict(sorted(_count(g["staleness"] for g in log).items())),
            "every gradient once": len(jobs) == len(set(jobs))
            and {j for j, _ in jobs} == set(range(result.config.steps))}


def _count(values) -> dict:
    out: dict = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def check_staleness(world_size: int, steps: int = 8) -> None:
    """Seeded runs (a 3× straggler, jitter): SSP's bound holds and is reached; ASP's is not bounded."""
    for scheme, extra in (("ps-ssp", {"staleness": 2}), ("ps-async", {})):
        result = parlab.run(scheme, world_size=world_size, steps=steps, delays="seeded", straggler=3.0,
                            jitter=0.5, **extra)
        stats = staleness_stats(result)
        bound = f" (bound s={extra['staleness']}: {stats['max'] <= extra['staleness']})" if extra else ""
        print(f"{scheme:<9} staleness histogram {stats['histogram']}, max {stats['max']}{bound}; "
              f"every gradient applied exactly once: {stats['every gradient once']}")


# ----------------------------------------------------------------------------- 5. measurement
def ledger_table(world_size: int, steps: int = 4) -> None:
    """Bytes each rank sent (ledger) against the closed form, for each scheme (seeded async)."""
    print(f"{'scheme':<9} {'rank':>4} {'ledger bytes':>13} {'closed form':>12}  equal")
    for scheme in SCHEMES:
        options = {"delays": "seeded", "straggler": 3.0}
        result = parlab.run(scheme, world_size=world_size, steps=steps, **options)
        predicted = parlab.schemes()[scheme].cost(result.config).bytes_sent
        for rank, (measured, expect) in enumerate(zip(result.bytes_per_rank(), predicted)):
            print(f"{scheme:<9} {rank:>4} {measured:>13,} {expect:>12,}  {measured == expect}")


def eval_loss(state: dict, model: str = "gpt", batch_size: int = 48) -> float:
    """The loss of final parameters on a held-out batch (step 10**6 of the data stream)."""
    cfg = models.model_config(model)
    net = models.build_model(model, cfg, 0)
    net.load_state_dict(state, strict=False)
    x, y = global_batch(model, 10**6, batch_size, 0, getattr(cfg, "block_size", 0))
    with torch.no_grad():
        return net.loss(x, y).item()


def race(world_size: int, steps: int, straggler: float = 3.0, staleness: int = 2,
         model: str = "gpt") -> dict:
    """BSP, SSP and ASP with the last worker `straggler`× slower, real arrival order."""
    runs = {"single": parlab.run("single", steps=steps, model=model)}
    for scheme in SCHEMES:
        extra = {"staleness": staleness} if scheme == "ps-ssp" else {}
        runs[scheme] = parlab.run(scheme, world_size=world_size, steps=steps, model=model,
                                  straggler=straggler, **extra)
    return runs


def race_table(runs: dict) -> None:
    base = runs["ps-sync"].outputs[0].extras["update_times"][-1]
    print(f"{'scheme':<9} {'wall to last update':>20} {'speedup':>8} {'max staleness':>14} "
          f"{'held-out loss':>14}")
    for name, r in runs.items():
        if name == "single":
            continue
        t = r.outputs[0].extras["update_times"][-1]
        print(f"{name:<9} {t:>19.2f}s {base / t:>7.2f}× {staleness_stats(r)['max']:>14} "
              f"{eval_loss(r.state, r.config.model):>14.4f}")
    single = runs["single"]
    print(f"{'single':<9} {'':>20} {'':>8} {'':>14} {eval_loss(single.state, single.config.model):>14.4f}")


def draw_race(runs: dict):
    """Loss of each step's batch vs update index and vs the wall time its update was applied;
    staleness histograms."""
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 3.4))
    for name, r in runs.items():
        if name == "single":
            a.plot(r.losses, color="black", ls=":", label="single")
            continue
        extras = r.outputs[0].extras
        a.plot(r.losses, color=COLORS[name], label=name)
        b.plot(extras["update_times"], [r.losses[j] for j in extras["update_jobs"]], ".-",
               color=COLORS[name], label=name)
        hist = staleness_stats(r)["histogram"]
        c.bar([k + 0.25 * SCHEMES.index(name) for k in hist], list(hist.values()), width=0.25,
              color=COLORS[name], label=name)
    a.set(xlabel="update (step)", ylabel="loss of the step's batch", title="loss vs updates")
    b.set(xlabel="seconds since the server started", title="loss vs wall time")
    c.set(xlabel="staleness (versions behind)", ylabel="gradients", title="staleness")
    a.legend(fontsize=8)
    c.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- 6. asynchronous iterations
def jacobi_clock(clock: str) -> str:
    """Jacobi's clock for a chapter clock: "wall" stays raw; a paced clock ("A100", ...) means the
    solver's virtual clock (a sweep lasts `work_ms`, no accelerator's FLOPs enter)."""
    return "wall" if clock == "wall" else "virtual"


def jacobi_runs(ranks: int, sweeps: int = 200, straggler: float = 3.0, delay_ms: float = 1.0,
                n: int = 16, sigma_h2: float = 0.4, inner: int = 4, clock: str = "A100") -> dict:
    """Synchronous, asynchronous (also with injected delays) and flexible communication, the last
    rank slow; every update `inner` relaxations with frozen halos."""
    ranks = max(ranks, 2)
    base = dict(n=n, sweeps=sweeps, straggler=straggler, sigma_h2=sigma_h2, inner=inner,
                clock=jacobi_clock(clock))
    return {"sync": jacobi.solve(ranks, jacobi.JacobiConfig(mode="sync", **base)),
            "async": jacobi.solve(ranks, jacobi.JacobiConfig(mode="async", **base)),
            "async + delays": jacobi.solve(ranks, jacobi.JacobiConfig(mode="async", delay_ms=delay_ms,
                                                                      **base)),
            "flexible": jacobi.solve(ranks, jacobi.JacobiConfig(mode="flexible", **base))}


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
    b.set(xlabel=f"ms ({cfg.label})", title="residual vs time")
    a.legend(fontsize=8)
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


# ----------------------------------------------------------------------------- widget
def panel(world_size: int, scheme: str, straggler: float, steps: int = 8) -> None:
    """Widget callback: one parameter-server scheme, a straggler, against single."""
    extra = {"staleness": 2} if scheme == "ps-ssp" else {}
    result = parlab.run(scheme, world_size=world_size, steps=steps, straggler=straggler, **extra)
    ref = parlab.run("single", steps=steps)
    stats = staleness_stats(result)
    t = result.outputs[0].extras["update_times"][-1]
    print(f"{scheme} {extra} with {world_size - 1} worker(s), the last {straggler:g}× slower")
    print(f"{steps} updates in {t:.2f} s ({steps / t:.1f} updates/s); staleness {stats['histogram']}")
    print(f"final step's loss {result.losses[-1]:.4f} (single {ref.losses[-1]:.4f}); held-out "
          f"{eval_loss(result.state):.4f} (single {eval_loss(ref.state):.4f})")
