"""What notebooks/12_serving.ipynb runs, part 1: two training jobs on the same ranks (Luo et al.,
"CrossoverScheduler: Overlapping Multiple Distributed Training Applications in a Crossover
Manner", 2021) — the idle gaps on a timeline, each job equal to its single run, ledgers against
the closed forms, throughput of the three schedules beside the model; the widget (the exercises: `exercises`).
Part 2, the edge split, is `explore.edge`.
"""

from __future__ import annotations

import statistics

import parlab
from parlab.serving import cost
from parlab.serving.explore import edge as ex_edge
from parlab.serving.jobs import JobSpec
from parlab.serving.schedules import SCHEDULES
from parlab.serving.sharing import run_jobs

COLORS = {"A": ("#4C72B0", "#A8C0E0"), "B": ("#55A868", "#B5DCC0")}  # (compute, communication)
GPT_TINY = {"n_embd": 16, "n_layer": 2, "n_head": 2}


def jobs(world_size: int = 2, rows_a: int = 128, rows_b: int = 8192) -> list[JobSpec]:
    """The chapter's two jobs, `rows_*` rows per rank (weak scaling): A a tiny GPT, B the MLP.
    In A100 time on the real 1 GbE (`clock="A100"`, `link="1GbE"`, the notebook's defaults) each
    one's compute and its gradients' link time are of the same order (the notebook prints both,
    `model_table`): crossover's case. On 100Gb-IB the gradients take microseconds against
    milliseconds of compute (the tiny models are launch-bound on an A100): nothing to hide."""
    return [JobSpec("A", model="gpt", model_config=GPT_TINY, batch_size=rows_a * world_size),
            JobSpec("B", model="mlp", batch_size=rows_b * world_size)]


def _link(link):
    return None if link in (None, "loopback") else link


# ----------------------------------------------------------------------------- runs
def run_schedules(world_size: int, steps: int, link: str = "1GbE", specs=None,
                  clock: str = "A100") -> dict:
    """Every schedule once, same jobs, same link, same clock (paced A100 time by default; "wall":
    this CPU, raw): {schedule: JobsResult}."""
    specs = specs or jobs(world_size)
    return {s: run_jobs(specs, world_size, s, steps, _link(link), clock=clock) for s in SCHEDULES}


def singles(specs: list[JobSpec], steps: int) -> dict:
    return {s.name: parlab.run("single", steps=steps, **s.single_options()) for s in specs}


# ----------------------------------------------------------------------------- 1. intuition
def on_the_link(result, rank: int = 0) -> list[tuple[str, float, float]]:
    """(job, start, end) of every message rank `rank` put on the emulated link, in seconds from
    the run's start: the link's own queue replayed from the ledgers (`Comm` sends in issue order,
    each k·α + bytes/β after the link is free; the jobs share one link)."""
    link = result.link
    records = sorted((r for name, job in result.jobs.items() for r in job.ledger
                      if r["rank"] == rank), key=lambda r: r["t_start"])
    busy, free = [], 0.0
    for r in records:
        start = max(r["t_start"] - result.origin, free)
        cost_s = link.cost(r["bytes_sent"], r["rounds"]) if link is not None else 0.0
        free = start + cost_s
        busy.append((r["group"], start, free))
    return busy


def draw_schedules(results: dict, rank: int = 0, shown=("sequential", "crossover", "concurrent")):
    """Rank `rank`'s two jobs under each schedule on one time axis: compute in the job's dark
    colour, its gradients on the link (`on_the_link`) in its light colour."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    shown = [s for s in shown if s in results]
    end = max(results[s].wall_s for s in shown) * 1e3
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, 0.9 * len(shown) + 0.8), sharex=True)
    axes = [axes] if len(shown) == 1 else axes
    for ax, schedule in zip(axes, shown):
        for e in results[schedule].timeline:
            job = e["args"]["job"]
            if e["rank"] == rank and e["kind"] == "compute":
                ax.broken_barh([(e["t0"] * 1e3, max((e["t1"] - e["t0"]) * 1e3, 0.05))], (-0.4, 0.8),
                               facecolors=COLORS.get(job, ("gray",))[0], edgecolor="none")
        for job, t0, t1 in on_the_link(results[schedule], rank):
            ax.broken_barh([(t0 * 1e3, max((t1 - t0) * 1e3, 0.05))], (0.6, 0.8),
                           facecolors=COLORS.get(job, ("gray", "lightgray"))[1], edgecolor="none")
        ax.set_yticks([0, 1], ["processor", "link"], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, end)
        ax.set_title(f"{schedule}: {results[schedule].wall_s * 1e3:.4g} ms", fontsize=9, loc="left")
    axes[-1].set_xlabel(f"time (ms, {results[shown[0]].clock.label}), rank {rank}")
    handles = [Patch(color=c[i], label=f"{j} {'communication' if i else 'compute'}")
               for j, c in COLORS.items() for i in (0, 1)]
    axes[0].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
                   frameon=False)
    if "sequential" in shown:
        fastest = min(shown, key=lambda s: results[s].wall_s)
        fig.suptitle(f"rank {rank}: {fastest} finishes first, "
                     f"{results['sequential'].wall_s / results[fastest].wall_s:.2f}× sooner than sequential",
                     fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- 2. math
def compute_seconds(result, job: str, names=None) -> float:
    """Median seconds of one step's compute spans of `job` (all of them, or those `names`:
    ("forward", "backward") or ("optimizer",)), rank 0, after the first step. On a paced clock
    these are the accelerator's seconds, bit-reproducible."""
    per_step: dict = {}
    for e in result.timeline:
        if e["rank"] == 0 and e["kind"] == "compute" and e["args"].get("job") == job and \
                (names is None or e["name"] in names):
            step = e["args"].get("step")
            per_step[step] = per_step.get(step, 0.0) + e["t1"] - e["t0"]
    values = [v for k, v in sorted(per_step.items()) if k != 0] or list(per_step.values())
    return statistics.median(values) if values else 0.0


def model_table(results: dict, link: str = "1GbE") -> dict:
    """P (forward + backward + optimizer) measured from the sequential run, C from the closed
    form on the run's link (the paced link on a paced clock); each schedule's steady round and
    the whole run's length replayed (`cost.run_seconds`)."""
    seq = results["sequential"]
    resolved = seq.link
    compute = {name: compute_seconds(seq, name, ("forward", "backward")) for name in seq.jobs}
    update = {name: compute_seconds(seq, name, ("optimizer",)) for name in seq.jobs}
    total = {name: compute[name] + update[name] for name in seq.jobs}
    comm = {name: cost.sync_seconds(r.config, resolved) for name, r in seq.jobs.items()}
    print(f"clock: {seq.clock.label}; link: {link}" + (f" ({resolved.name})" if resolved else ""))
    for name in seq.jobs:
        print(f"job {name}: P = {total[name] * 1e3:7.4g} ms compute (measured, "
              f"{update[name] * 1e3:.4g} of it the optimizer), C = {comm[name] * 1e3:7.4g} ms "
              "on the link (closed form)")
    for schedule in ("sequential", "crossover"):
        print(f"{schedule:<11} round = {cost.round_seconds(schedule, total, comm) * 1e3:7.4g} ms   "
              f"whole run of {seq.steps} steps = "
              f"{cost.run_seconds(schedule, compute, update, comm, seq.steps) * 1e3:7.4g} ms")
    print(f"predicted crossover speedup: {cost.crossover_speedup(total, comm):.2f}× in steady state, "
          f"{predicted_run_speedup(compute, update, comm, seq.steps):.2f}× over this run's "
          f"{seq.steps} steps")
    return {"compute": total, "comm": comm, "fwd_bwd": compute, "update": update,
            "steps": seq.steps}


def predicted_run_speedup(compute: dict, update: dict, comm: dict, steps: int) -> float:
    """Crossover ÷ sequential throughput over a run of `steps` steps (warm-up and drain in)."""
    return (cost.run_seconds("sequential", compute, update, comm, steps)
            / cost.run_seconds("crossover", compute, update, comm, steps))


def bytes_formula() -> None:
    """Each job's parameters, buckets and the bytes rank 0 sends per step (ring all-reduce)."""
    for n in (2, 4):
        for spec in jobs(n):
            cfg = spec.config(n, 1)
            buckets = cost.job_messages(cfg)
            sent, even = cost.job_bytes(cfg)[0], 2 * (n - 1) / n * sum(buckets) * 4
            print(f"N={n} job {spec.name} ({spec.model}): Ψ = {sum(buckets):,} in {len(buckets)} "
                  f"bucket(s), {sent:,} bytes per step from rank 0 (2(N-1)/N·Ψ·4 = {even:,.0f}"
                  + (")" if sent == round(even) else f" when N divides every bucket; here the ring's "
                     f"chunks differ by one element, so rank 0 sends {abs(sent - even):,.0f} B "
                     f"{'fewer' if sent < even else 'more'})"))


# ----------------------------------------------------------------------------- 4. correctness
def print_exact(results: dict, references: dict) -> None:
    for schedule, result in results.items():
        verdicts = "  ".join(f"job {name} match: {result.jobs[name].compare(ref).match}"
                             for name, ref in references.items())
        print(f"{schedule:<11} {verdicts}")


# ----------------------------------------------------------------------------- 5. measurement
def ledger_table(results: dict) -> None:
    """Each job's bytes (rank 0, whole run) in its own ledger against the closed form."""
    for schedule, result in results.items():
        for name, job in result.jobs.items():
            measured, formula = job.bytes_per_rank()[0], cost.job_bytes(job.config)[0]
            groups = sorted({r["group"] for r in job.ledger})
            print(f"{schedule:<11} job {name}: ledger {measured:>9,} B  closed form {formula:>9,} B  "
                  f"equal: {measured == formula}  groups: {groups}")


def memory_table(results: dict, schedule: str = "crossover") -> None:
    """Each job's peak bytes on every rank (params, grads, optimizer, buckets) against the formula:
    sharing the ranks adds the jobs' memories, whatever the schedule."""
    for name, job in results[schedule].jobs.items():
        formula = cost.job_memory(job.config)
        measured = [{k: m[k] for k in formula} for m in job.memory]
        print(f"job {name}: {formula} per rank, measured equal on every rank: "
              f"{all(m == formula for m in measured)}")


def throughput_table(results: dict, model: dict | None = None) -> dict:
    """Job-steps per second of each schedule and the ratio to sequential (one run each), each
    job's span and its slowdown against its own span when it had the cluster alone."""
    base = results["sequential"]
    ratios = {}
    print(f"{base.clock.label}")
    print(f"{'schedule':<11} {'run ms':>8} {'steps/s':>8} {'vs seq':>7}   span A / alone   span B / alone")
    for schedule, result in results.items():
        ratios[schedule] = result.throughput() / base.throughput()
        spans = "   ".join(f"{result.spans[n] * 1e3:6.4g} ms {result.spans[n] / base.spans[n]:4.2f}×"
                           for n in result.jobs)
        print(f"{schedule:<11} {result.wall_s * 1e3:>8.4g} {result.throughput():>8.4g} "
              f"{ratios[schedule]:>6.2f}×   {spans}")
    if model is not None:
        print(f"model: crossover {cost.crossover_speedup(model['compute'], model['comm']):.2f}× "
              "in steady state (the first step's warm-up and the last job's drain are not hidden)")
    return ratios


def crossover_verdict(results: dict, model: dict, tolerance: float = 0.10) -> dict:
    """This run's headline, printed with a verdict computed from the run: crossover's throughput
    ÷ sequential's, measured, against the model replayed over the run's own length; the lesson
    (crossover ≥ sequential) holds or the diagnosis says why not."""
    seq, cross = results["sequential"], results["crossover"]
    measured = seq.wall_s / cross.wall_s
    predicted = predicted_run_speedup(model["fwd_bwd"], model["update"], model["comm"],
                                      model["steps"])
    steady = cost.crossover_speedup(model["compute"], model["comm"])
    error = measured / predicted - 1
    holds = measured >= 1.0
    agrees = abs(error) <= tolerance
    print(f"crossover: {measured:.2f}× sequential's throughput, measured in this run "
          f"({cross.clock.label}); model {predicted:.2f}× over its {model['steps']} steps "
          f"({steady:.2f}× in steady state)")
    print(f"crossover ≥ sequential: {'yes' if holds else 'NO'}; "
          f"{'agrees with' if agrees else 'does NOT agree with'} the model "
          f"({error:+.0%}, tolerance ±{tolerance:.0%})")
    if not (holds and agrees):
        why = []
        if not cross.clock.paced:
            why.append("this is the raw CPU clock: the ranks' threads contend for its cores")
        ratio = sum(model["comm"].values()) / max(sum(model["compute"].values()), 1e-12)
        if ratio > 4 or ratio < 0.25:
            why.append(f"communication is {ratio:.1f}× compute: little of either to hide "
                       "behind the other")
        print("why: " + ("; ".join(why) or "the schedule's real overheads (issue, wait, the "
                         "optimizer between waits) are not in the model"))
    return {"measured": measured, "predicted": predicted, "steady": steady, "holds": holds,
            "agrees": agrees}


# ----------------------------------------------------------------------------- 7. summary
def print_headlines(verdict: dict, rows: list, density: float, world_size: int) -> None:
    """The chapter's measured headlines, printed from this run with their verdicts: crossover
    against sequential (`crossover_verdict`), and the edge split at `density` against every
    feature (`explore.edge.accuracy_vs_bytes` rows: density, bytes per image, accuracy) with the
    paper's goal (≥ 80% fewer bytes at ≤ 2 points of accuracy lost)."""
    print(f"two jobs: crossover {verdict['measured']:.2f}× sequential's throughput (model "
          f"{verdict['predicted']:.2f}× over this run, {verdict['steady']:.2f}× steady): "
          f"crossover ≥ sequential {'holds' if verdict['holds'] else 'does NOT hold'}, "
          f"{'agrees with' if verdict['agrees'] else 'does NOT agree with'} the model")
    dense = next((r for r in rows if r[0] == 1.0), rows[0])
    row = min(rows, key=lambda r: abs(r[0] - density))
    fewer = 1 - row[1] / dense[1] if dense[1] else 0.0
    lost = 100 * (dense[2] - row[2])
    meets = fewer >= 0.8 and lost <= 2.0
    print(f"edge split over {world_size} devices, density {row[0]}: {row[1]:,} B per image against "
          f"{dense[1]:,} B with every feature ({fewer:.0%} fewer), accuracy {row[2]:.1%} against "
          f"{dense[2]:.1%} ({lost:+.1f} points lost): the goal (≥ 80% fewer bytes at ≤ 2 points) "
          f"is {'met' if meets else 'NOT met'}"
          + ("" if meets else (" — too few bytes saved at this density" if fewer < 0.8
                               else " — this density drops transfers the network needs")))


# ----------------------------------------------------------------------------- the widget
def panel(schedule: str, link: str, world_size: int, density: str = "0.1", steps: int = 3,
          clock: str = "A100") -> None:
    """Widget callback: the two jobs under one schedule beside sequential (on `clock`: paced
    A100 time, or "wall", this CPU raw, where concurrent's threads contend for the cores), and
    the edge split at one mask density."""
    specs = jobs(world_size)
    runs = {s: run_jobs(specs, world_size, s, steps, _link(link), clock=clock)
            for s in dict.fromkeys(["sequential", schedule])}
    for s, r in runs.items():
        print(f"{s:<11} {r.wall_s * 1e3:6.4g} ms ({r.clock.label})  {r.throughput():5.4g} job-steps/s  "
              f"({r.throughput() / runs['sequential'].throughput():.2f}× sequential)")
    if 4 % world_size == 0:
        ex_edge.panel_edge(world_size, float(density))
