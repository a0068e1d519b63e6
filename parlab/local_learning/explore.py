"""What notebook 05 runs: the locks drawn, the routes and their bytes, the exact cases, the
emulation check, loss against steps and wall-clock, idle fractions, stashed versions, the widget
and the exercises. Papers: Belilovsky et al. (ICML 2020), Gomez et al. (JMLR 2022), Narayanan
et al. (PipeDream, SOSP 2019; PipeDream-2BW, ICML 2021)."""

from __future__ import annotations

import statistics

import parlab
from parlab.engine.runner import make_config
from parlab.engine.verify import compare_states
from parlab.exercises import Exercise, find, numeric, one_of
from parlab.local_learning import cost
from parlab.local_learning.emulate import emulate
from parlab.local_learning.layout import resolve
from parlab.local_learning.routes import Route

WORK = ("F", "B", "W")
COLOURS = {"F": "tab:blue", "B": "tab:orange", "W": "tab:green"}


# ----------------------------------------------------------------------------- routes and bytes
def route_table(pp: int, rows: int = 12, model: str = "gpt") -> None:
    """Per scheme and boundary: the losses whose gradient crosses it, bytes per step up / down."""
    mc = make_config("single", model=model).model_config
    for name, depth, w in (("local", 0, 1.0), ("interlocking d=1", 1, 1.0),
                           (f"interlocking d={pp - 1}, w=0 (global)", pp - 1, 0.0)):
        route = Route.of(pp, depth, w)
        print(f"{name}: tie kept: {route.tied}")
        for row in cost.boundary_table(route, mc, rows):
            print(f"  boundary {row['boundary']}: up {row['activations']:>7,} B, down "
                  f"{row['gradients']:>7,} B per step; losses down {list(row['losses_down'])}")


def run_route(scheme: str, world_size: int, steps: int = 3, **options):
    return parlab.run(scheme, world_size=world_size, steps=steps, **options)


# ----------------------------------------------------------------------------- correctness
def check_exact(world_size: int, steps: int = 3) -> dict:
    """The settings where theory says the scheme *is* global backprop: prints match lines."""
    ref = parlab.run("single", steps=steps)
    cases = [("local", {"pp": 1}), ("interlocking", {"pp": 1}),
             ("interlocking", {"depth": world_size - 1, "aux_weight": 0.0}),
             ("pipedream", {"microbatches": 1}), ("pipedream-2bw", {"microbatches": 1})]
    results = {}
    for scheme, options in cases:
        r = run_route(scheme, world_size, steps, **options)
        c = r.compare(ref)
        label = ", ".join(f"{k}={v}" for k, v in options.items())
        print(f"{scheme:14} {label:26} match: {c.match}")
        results[(scheme, label)] = r
    return results


def emulation_check(scheme: str, world_size: int, steps: int = 3, **options) -> tuple:
    """A distributed run and its one-process emulation: (run, max parameter diff, match)."""
    r = run_route(scheme, world_size, steps, **options)
    cfg = make_config(scheme, world_size=world_size, steps=steps, **options)
    layout = resolve(cfg)
    route = Route.of(layout.pp, cfg.options.get("depth", 0), cfg.options.get("aux_weight", 1.0))
    em = emulate(cfg, layout, route)
    worst, _, problems = compare_states(r.state, em.state)
    loss_ok = all(abs(a - b) <= 1e-4 * max(abs(b), 1) for a, b in zip(r.losses, em.losses))
    label = ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"
    print(f"{scheme:13} pp={layout.pp} {label:24} equals its emulation: {loss_ok and not problems}")
    return r, worst, loss_ok and not problems


def ledger_report(result) -> None:
    """Bytes per step across each boundary, measured beside the closed form."""
    cfg = result.config
    layout = resolve(cfg)
    route = Route.of(layout.pp, cfg.options.get("depth", 0), cfg.options.get("aux_weight", 1.0))
    print(f"{cfg.scheme} (depth {route.depth}, aux_weight {route.aux_weight:g}), pp={layout.pp}, "
          f"{layout.rows} rows per step")
    for row in cost.boundary_table(route, cfg.model_config, layout.rows):
        j = row["boundary"]
        up = result.bytes_per_rank(phase="pp-fwd")[j] // cfg.steps
        down = result.bytes_per_rank(phase="pp-bwd")[j + 1] // cfg.steps
        print(f"  boundary {j}: up {up:>7,} B (closed form {row['activations']:>7,}), down "
              f"{down:>7,} B (closed form {row['gradients']:>7,}) per step")


# ----------------------------------------------------------------------------- measurement
def idle_fractions(timeline: list[dict], skip_first: bool = True) -> list[float]:
    """Per rank: 1 − (F, B, W compute) / (the rank's span from its first to its last of them),
    leaving out step 0 (warm-up)."""
    out = []
    for rank in sorted({e["rank"] for e in timeline}):
        ev = [e for e in timeline if e["rank"] == rank and e["kind"] == "compute"
              and e["name"] in WORK and not (skip_first and e["args"].get("step") == 0)]
        if not ev:
            out.append(float("nan"))
            continue
        span = max(e["t1"] for e in ev) - min(e["t0"] for e in ev)
        out.append(1 - sum(e["t1"] - e["t0"] for e in ev) / span if span > 0 else 0.0)
    return out


SCHEMES = (("pp-1f1b", {}), ("local", {}), ("interlocking", {"depth": 1}),
           ("pipedream", {}))


def compare_schemes(world_size: int, steps: int = 6, model: str = "gpt", model_config=None,
                    link=None, microbatches: int | None = None, schemes=SCHEMES,
                    quiet: bool = False, **common) -> list[dict]:
    """Each scheme at pp = world_size: step time, throughput ratio to pp-1f1b measured in the same
    sweep, median idle fraction over ranks, final loss."""
    rows = []
    for scheme, options in schemes:
        kw = dict(options)
        if microbatches is not None:
            kw["microbatches"] = microbatches
        r = parlab.run(scheme, world_size=world_size, steps=steps, model=model,
                       model_config=model_config, link=link, **kw, **common)
        label = scheme + "".join(f" {k}={v}" for k, v in options.items())
        rows.append({"scheme": label, "step_s": r.step_time(), "idle": statistics.median(
            idle_fractions(r.timeline)), "final_loss": r.losses[-1], "result": r})
    base = rows[0]["step_s"]
    for row in rows:
        row["speedup"] = base / row["step_s"]
    if not quiet:
        table(rows)
    return rows


def table(rows: list[dict]) -> None:
    for row in rows:
        print(f"{row['scheme']:22} {row['step_s'] * 1e3:7.1f} ms/step  {row['speedup']:4.2f}× "
              f"pp-1f1b's throughput  idle {row['idle']:5.1%}  final loss {row['final_loss']:.4f}")


def explain_idle(rows: list[dict], microbatches: int, cores: int | None = None) -> None:
    """Each scheme's measured idle beside the schedule's closed form, and where it is higher, what
    the run itself shows: the link time of a rank's own boundary transfers per step against its
    compute (a link-bound stage idles at least 1 − compute/link however it is scheduled), and how
    many ranks share each core (a rank waiting for a core is idle on the timeline)."""
    import os

    from parlab.core.link import resolve as resolve_link

    cores = cores or os.cpu_count() or 1
    for row in rows:
        r = row["result"]
        cfg, pp = r.config, r.config.world_size
        form = (cost.one_f_one_b_idle(pp, microbatches) if row["scheme"].startswith("pp-")
                else cost.decoupled_idle(pp, microbatches, cfg.steps))
        if row["idle"] <= form + 0.10:
            print(f"{row['scheme']:22} idle {row['idle']:.0%} ≈ closed form {form:.0%}")
            continue
        link = resolve_link(cfg.link)
        compute = statistics.median(_per_rank_compute(r.timeline)) / cfg.steps
        sends = [x for x in r.ledger if x["op"] in ("send", "isend") and x["bytes_sent"]]
        link_s = (max(sum(link.cost(x["bytes_sent"], x["rounds"]) for x in sends
                          if x["rank"] == k) for k in range(pp)) / cfg.steps if link else 0.0)
        reasons = []
        if link_s > compute:
            reasons.append(f"link-bound: a rank's transfers cost {link_s * 1e3:.0f} ms per step on "
                           f"{link.name} against {compute * 1e3:.0f} ms of compute, so it idles "
                           f"≥ {1 - compute / link_s:.0%} whatever the schedule")
        if pp > cores:
            reasons.append(f"{pp} ranks share {cores} cores: a rank waiting for a core shows as "
                           "idle")
        print(f"{row['scheme']:22} idle {row['idle']:.0%} > closed form {form:.0%}: "
              + ("; ".join(reasons) or "neither link-bound nor oversubscribed: per-message and "
                 "per-update overheads of a tiny model fill the gaps"))


def _per_rank_compute(timeline: list[dict]) -> list[float]:
    """Seconds of F, B, W compute per rank over the run."""
    totals: dict = {}
    for e in timeline:
        if e["kind"] == "compute" and e["name"] in WORK:
            totals[e["rank"]] = totals.get(e["rank"], 0.0) + e["t1"] - e["t0"]
    return list(totals.values())


def plot_losses(rows: list[dict], title: str = ""):
    """Loss against steps and against wall-clock seconds (cumulative step times)."""
    import itertools

    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.5))
    for row in rows:
        r = row["result"]
        a.plot(range(len(r.losses)), r.losses, label=row["scheme"])
        b.plot(list(itertools.accumulate(r.step_times)), r.losses, label=row["scheme"])
    a.set_xlabel("step")
    b.set_xlabel("seconds")
    for ax in (a, b):
        ax.set_ylabel("training loss (last stage)")
    a.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def gantt(rows: list[dict], step: int = 2):
    """F / B / W spans per rank of one step of each run, side by side: where the locks wait."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(rows), 1, figsize=(10, 1.1 + 0.9 * len(rows)), squeeze=False)
    for ax, row in zip(axes[:, 0], rows):
        ev = [e for e in row["result"].timeline if e["kind"] == "compute" and e["name"] in WORK
              and e["args"].get("step") in (step, step + 1)]
        t0 = min(e["t0"] for e in ev)
        for e in ev:
            ax.barh(e["rank"], (e["t1"] - e["t0"]) * 1e3, left=(e["t0"] - t0) * 1e3,
                    color=COLOURS[e["name"]], edgecolor="white", linewidth=0.3,
                    alpha=1.0 if e["args"]["step"] == step else 0.45)
        ax.set_yticks(sorted({e["rank"] for e in ev}))
        ax.invert_yaxis()
        ax.set_ylabel("stage")
        ax.set_title(f"{row['scheme']}: idle {row['idle']:.0%}", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel(f"ms (steps {step} and {step + 1}, the second lighter); blue F, orange B, "
                           "green W")
    fig.tight_layout()
    return fig


def stash_report(world_size: int, microbatches: int = 4, steps: int = 3) -> None:
    """Weight versions each stage held at its peak, PipeDream vs 2BW, beside the closed forms, and
    what every backward used (its forward's version)."""
    for scheme in ("pipedream", "pipedream-2bw"):
        r = parlab.run(scheme, world_size=world_size, steps=steps, microbatches=microbatches)
        print(f"{scheme}, p={world_size}, m={microbatches}:")
        for out in r.outputs:
            s, x = out.extras["stage"], out.extras
            formula = (cost.pipedream_versions(world_size, microbatches, s) if scheme == "pipedream"
                       else cost.twobw_versions(world_size, microbatches, s))
            used_own = all(fwd == used for _, fwd, used, _ in x["versions"])
            stale = max(live - fwd for _, fwd, _, live in x["versions"])
            print(f"  stage {s}: {x['peak_versions']} versions (closed form {formula}) = "
                  f"{cost.stash_bytes(x['peak_versions'], x['stage_numel']):>8,} B; every backward "
                  f"used its forward's weights: {used_own}; most updates behind: {stale}")


def widget_run(world_size: int = 2, scheme: str = "interlocking", depth: int = 1) -> None:
    """The panel's callback: one scheme against pp-1f1b, timelines and the bytes per boundary."""
    import matplotlib.pyplot as plt

    options = {"depth": min(depth, world_size - 1)} if scheme == "interlocking" else {}
    rows = compare_schemes(world_size, steps=4, schemes=(("pp-1f1b", {}), (scheme, options)))
    if scheme in ("local", "interlocking"):
        ledger_report(rows[1]["result"])
    gantt(rows)
    plt.show()


# ----------------------------------------------------------------------------- exercises
def _gpt_mc():
    return make_config("single").model_config


EXERCISES = [
    Exercise("interlock-bytes",
             "Interlocking at depth 2 on p = 4 stages, aux_weight 1, default GPT (T = 32, C = 32), "
             "12 rows per step. How many bytes per step go *down* across boundary 0?",
             expect=numeric(cost.gradient_bytes(Route.of(4, 2, 1.0), 0, _gpt_mc(), 12), rtol=0),
             hint_text="Count the losses whose gradient may cross boundary 0 at depth 2; each is one "
                  "activation-shaped tensor.",
             solution_text="losses 1 and 2 cross it: 2 × 12·32·32·4 B = 98,304 B"),
    Exercise("global-depth",
             "On p = 6 stages, which depth with aux_weight = 0 makes interlocking equal global "
             "backprop? (An integer.)",
             expect=numeric(5, rtol=0),
             hint_text="The true loss sits on the last stage; how many boundaries lie between it and "
                  "the first stage?",
             solution_text="p − 1 = 5"),
    Exercise("pipedream-versions",
             "PipeDream on p = 8 stages with m = 16 micro-batches in flight: how many weight "
             "versions does the first stage hold at its peak?",
             expect=numeric(cost.pipedream_versions(8, 16, 0), rtol=0),
             hint_text="One version per micro-batch in flight; 1F1B admits p − s on stage s.",
             solution_text="min(p − 0, m) = 8"),
    Exercise("decoupled-idle",
             "Local learning never flushes: p = 4 stages, m = 4 micro-batches per step, 100 steps, "
             "equal stages. What fraction of the run does a stage idle? (A fraction.)",
             expect=numeric(cost.decoupled_idle(4, 4, 100), rtol=0.02),
             hint_text="The pipeline fills once per run, not once per step.",
             solution_text="(p−1)/(steps·m + p−1) = 3/403 ≈ 0.0074"),
    Exercise("which-lock",
             "Local learning removes backward and update locking. Which lock remains? "
             "(forward, backward or update)",
             expect=one_of("forward", "forward locking"),
             hint_text="What must a stage have before it can compute anything at all?",
             solution_text="forward locking: stage k still needs stage k−1's activation"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
