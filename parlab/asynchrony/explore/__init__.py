"""What notebooks/09_asynchrony.ipynb runs: the server's schedule drawn with versions, closed
forms, exactness, staleness properties, BSP / SSP / ASP with a straggler, asynchronous Jacobi,
and the widget callback (the exercises: `exercises`).

Parameter servers after Dean et al. (Downpour SGD, 2012) and Li et al. (OSDI 2014); bounded
staleness after Ho et al. (SSP, NeurIPS 2013); asynchronous iterations after Chazan & Miranker
(1969), Baudet (1978) and Bertsekas & Tsitsiklis (1989). Everything drives `parlab.run` or
`parlab.asynchrony.jacobi_solver.solve`; the closed forms are `parlab.asynchrony.cost`.
"""

from __future__ import annotations

import torch

import parlab
from parlab import models
from parlab.asynchrony import cost
from parlab.asynchrony.delays import DelaySchedule, VirtualClock
from parlab.asynchrony.explore.jacobi import (  # noqa: F401
    check_contraction,
    draw_jacobi,
    jacobi_clock,
    jacobi_runs,
    jacobi_table,
)
from parlab.asynchrony.versions import Book, simulate
from parlab.core.progress import progress
from parlab.models.data import global_batch

SCHEMES = ["ps-sync", "ps-ssp", "ps-async"]
COLORS = ("tab:blue", "tab:green", "tab:red")  # of SCHEMES, in order (the reference: black)


def param_count(model: str = "gpt") -> int:
    net = models.build_model(model, models.model_config(model), 0)
    return sum(p.numel() for p in net.parameters())


# ------------------------------------------- the appendix: the server's book replayed in batch units
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
             jitter: float = 0.0, seed: int = 0, equal_work: bool = False):
    """The seeded schedule of a run without processes: (book, [(worker, start, end)]). One unit is
    one whole batch's gradient; `equal_work`: a BSP/SSP shard (1/W of the batch) costs 1/W unit."""
    ratios = (1.0 / workers,) * workers if equal_work and mode == "ssp" else None
    clock = RecordingClock(DelaySchedule(workers, seed, straggler, jitter, ratios))
    book = simulate(Book(workers, steps, mode, staleness), clock)
    return book, clock.spans


def draw_schedules(workers: int = 3, steps: int = 9, straggler: float = 3.0):
    """Worker lanes on the virtual clock for BSP, SSP (s=1) and ASP at equal work (every scheme
    computes `steps` whole batches; a BSP/SSP box is one shard, 1/W of a batch, an ASP box a whole
    batch): each box one gradient, labelled job / version it was computed on; red: stale."""
    import matplotlib.pyplot as plt

    cases = [("ps-sync (BSP)", "ssp", 0), ("ps-ssp, s=1", "ssp", 1), ("ps-async (ASP)", "asp", 0)]
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(len(cases), 1, figsize=(11, 1.6 + 0.9 * workers * len(cases) / 2),
                             sharex=True)
    ends, stale = {}, {}
    for ax, (title, mode, s) in zip(axes, cases):
        book, spans = schedule(mode, max(workers, 1), steps, s, straggler, equal_work=True)
        ends[title], stale[title] = max(e for _, _, e in spans), max(g.staleness for g in book.log)
        for g, (worker, start, end) in zip(book.log, spans):
            color = "tab:red" if g.staleness else "tab:blue"
            ax.barh(worker, end - start, left=start, color=color, alpha=0.35 + 0.15 * min(g.staleness, 4),
                    edgecolor="black")
            ax.text((start + end) / 2, worker, f"j{g.job}/v{g.version}", ha="center", va="center",
                    fontsize=7 if mode == "asp" else 5)
        ax.set_yticks(range(1, workers + 1), [f"rank {w}" for w in range(1, workers + 1)])
        ax.invert_yaxis()
        ax.set_title(f"{title}: {steps} updates by virtual time {max(e for _, _, e in spans):.2f}",
                     fontsize=9, loc="left")
    axes[-1].set_xlabel(f"virtual time (one unit = one whole batch's gradient; a BSP/SSP shard = "
                        f"1/{workers}; the last worker {straggler:g}× slower)")
    fig.legend(handles=[Patch(color="tab:blue", alpha=0.35, label="fresh (staleness 0)"),
                        Patch(color="tab:red", alpha=0.6, label="stale (darker: more versions behind)")],
                        fontsize=8, loc="lower center", ncol=2)
    bsp, asp = ends[cases[0][0]], ends[cases[-1][0]]
    fig.suptitle(f"equal work ({steps} batches each): ASP finishes {bsp / asp:.2f}× as soon as BSP (virtual "
                 f"time {asp:.2f} vs {bsp:.2f}), paying staleness up to {stale[cases[-1][0]]} versions; SSP "
                 f"(s=1) ends at {ends[cases[1][0]]:.2f}", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    print(f"bookkeeping, not a timed run: the server's book on the seeded virtual clock of "
          f"parlab.asynchrony.delays (not the paced A100); one unit = one worker computing one whole batch, "
          f"a BSP/SSP shard 1/{workers} unit — equal work, {steps} batches per scheme, compute-bound "
          f"(no fixed cost per gradient, no communication)")
    print(f"who finishes first: {'ASP' if asp < bsp else 'BSP'} — ASP at {asp:.2f}, BSP at {bsp:.2f}, "
          f"SSP (s=1) at {ends[cases[1][0]]:.2f} units")
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


def paced_link(clock: str):
    """The link a chapter run emulates: NVLink on a paced clock (the accelerator's real NVLink:
    every pull and push takes its α-β in virtual time), none on the raw wall clock."""
    return None if clock == "wall" else "NVLink"


def race(world_size: int, steps: int, straggler: float = 3.0, staleness: int = 2,
         model: str = "gpt", clock: str = "A100") -> dict:
    """BSP, SSP and ASP with the last worker `straggler`× slower (its injected delay paced too),
    real arrival order, on `clock` (paced: "A100", ...; raw: "wall")."""
    runs = {"single": parlab.run("single", steps=steps, model=model)}
    for scheme in progress(SCHEMES, desc="race"):
        extra = {"staleness": staleness} if "staleness" in parlab.schemes()[scheme].options else {}
        runs[scheme] = parlab.run(scheme, world_size=world_size, steps=steps, model=model,
                                  straggler=straggler, clock=clock, link=paced_link(clock), **extra)
    return runs


def last_update(result) -> float:
    """Seconds (the run's clock) from the server's start to its last update."""
    return result.outputs[0].extras["update_times"][-1]


def race_table(runs: dict) -> dict:
    """Time to the last update, speed-up over BSP, staleness and held-out loss; the verdict (ASP
    soonest, SSP between) computed from these runs. Returns the speed-ups."""
    base = last_update(runs["ps-sync"])
    clock = runs["ps-sync"].config.clock
    print(f"clock: {clock.label}" + (f", link {runs['ps-sync'].config.link.name}"
                                     if runs["ps-sync"].config.link is not None else ""))
    print(f"{'scheme':<9} {'ms to last update':>17} {'speedup':>8} {'max staleness':>14} "
          f"{'held-out loss':>14}")
    speedups, losses = {}, {}
    for name, r in runs.items():
        if name == "single":
            continue
        t = last_update(r)
        speedups[name], losses[name] = base / t, eval_loss(r.state, r.config.model)
        print(f"{name:<9} {t * 1e3:>15.4g}ms {base / t:>7.2f}× {staleness_stats(r)['max']:>14} "
              f"{losses[name]:>14.4f}")
    single = runs["single"]
    losses["single"] = eval_loss(single.state, single.config.model)
    print(f"{'single':<9} {'':>17} {'':>8} {'':>14} {losses['single']:>14.4f}")
    asp, ssp = speedups["ps-async"], speedups["ps-ssp"]
    workers = runs["ps-sync"].config.world_size - 1
    if workers < 2:
        print("verdict: one worker: nothing to wait for, the three coincide (speed-ups ≈ 1)")
    elif asp > max(ssp, 1) and ssp >= 0.9:
        model, flops = race_model(runs), race_model(runs, equal_work=True)
        print(f"verdict: in the model's order, ASP {asp:.2f}× as soon as BSP (model "
              f"{model['ps-async']:.2f}×: jobs go to whoever is free) and SSP {ssp:.2f}× (model "
              f"{model['ps-ssp']:.2f}×; ≈ BSP: a constant straggler still owes its shard of every "
              "clock; SSP only spares the fast workers s clocks of waiting); measured ÷ model: "
              f"ASP {asp / model['ps-async']:.2f}, SSP {ssp / model['ps-ssp']:.2f} — the model is "
              "the server's book on the seeded virtual clock with a BSP shard costing what a whole "
              "ASP batch does (launch-bound: this tiny GPT's step on an A100 is operator launches)")
        print(f"at equal work with compute-bound steps (a shard costs 1/{workers} of a batch, as at "
              f"real scale) the same book gives ASP {flops['ps-async']:.2f}× and SSP "
              f"{flops['ps-ssp']:.2f}×: ASP's lead here is {asp / flops['ps-async']:.2f}× that, "
              "because a BSP worker's 1/W shard costs it about as much as ASP's whole batch")
    else:
        print(f"verdict: NOT the expected order (ASP {asp:.2f}×, SSP {ssp:.2f}× vs BSP). Diagnosis: "
              f"max staleness ASP {staleness_stats(runs['ps-async'])['max']}, SSP "
              f"{staleness_stats(runs['ps-ssp'])['max']}")
    return speedups


def race_model(runs: dict, equal_work: bool = False) -> dict:
    """The race's speed-ups over BSP as the server's book predicts them (`schedule`, the seeded
    virtual clock without processes, the last worker `straggler`× slower, no communication), for
    the runs' workers, steps, straggler and SSP staleness. `equal_work=False`: a BSP shard costs what
    a whole ASP batch does (launch-bound); True: 1/W of it (compute-bound)."""
    cfg = runs["ps-sync"].config
    workers, straggler = cfg.world_size - cfg.options.get("servers", 1), cfg.options["straggler"]

    def end(mode: str, s: int = 0) -> float:
        spans = schedule(mode, workers, cfg.steps, s, straggler, equal_work=equal_work)[1]
        return max(e for _, _, e in spans)
    bsp = end("ssp")
    return {"ps-sync": 1.0, "ps-async": bsp / end("asp"),
            "ps-ssp": bsp / end("ssp", runs["ps-ssp"].config.options["staleness"])}


def draw_race(runs: dict):
    """Loss of each step's batch vs update index and vs the time its update was applied;
    staleness histograms."""
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 3.4))
    for name, r in runs.items():
        if name == "single":
            a.plot(r.losses, color="black", ls=":", label="single")
            continue
        extras = r.outputs[0].extras
        index = SCHEMES.index(name)
        a.plot(r.losses, color=COLORS[index], label=name)
        b.plot(extras["update_times"], [r.losses[j] for j in extras["update_jobs"]], ".-",
               color=COLORS[index], label=name)
        hist = staleness_stats(r)["histogram"]
        c.bar([k + 0.25 * index for k in hist], list(hist.values()), width=0.25,
              color=COLORS[index], label=name)
    a.set(xlabel="update (step)", ylabel="loss of the step's batch (nats)", title="loss vs updates")
    b.set(xlabel=f"seconds since the server started ({runs['ps-sync'].config.clock.label})",
          ylabel="loss of the step's batch (nats)", title="loss vs time")
    c.set(xlabel="staleness (versions behind)", ylabel="gradients (count)", title="staleness")
    for ax in (a, b, c):
        ax.legend(fontsize=8)
    base = last_update(runs["ps-sync"])
    fig.suptitle(f"ASP reached its last update {base / last_update(runs['ps-async']):.2f}× and SSP "
                 f"{base / last_update(runs['ps-ssp']):.2f}× as soon as BSP; ASP's gradients up to "
                 f"{staleness_stats(runs['ps-async'])['max']} versions stale", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- widget
def panel(world_size: int, scheme: str, straggler: float, clock: str = "A100", steps: int = 8) -> None:
    """Widget callback: one parameter-server scheme, a straggler, against single."""
    extra = {"staleness": 2} if "staleness" in parlab.schemes()[scheme].options else {}
    result = parlab.run(scheme, world_size=world_size, steps=steps, straggler=straggler, clock=clock,
                        link=paced_link(clock), **extra)
    ref = parlab.run("single", steps=steps)
    stats = staleness_stats(result)
    t = last_update(result)
    print(f"{scheme} {extra} with {world_size - 1} worker(s), the last {straggler:g}× slower "
          f"({result.config.clock.label})")
    print(f"{steps} updates in {t:.2f} s ({steps / t:.1f} updates/s); staleness {stats['histogram']}")
    print(f"final step's loss {result.losses[-1]:.4f} (single {ref.losses[-1]:.4f}); held-out "
          f"{eval_loss(result.state):.4f} (single {eval_loss(ref.state):.4f})")
