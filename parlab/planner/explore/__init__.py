"""What notebook 13 runs: every plan of a world size measured beside its prediction, the planner
under a memory cap, the widget; each plan's exactness and bytes as short summaries: `summaries`.

The cost model (`costmodel`: a blocking α-β model; MAD-Max's replay across plans is `whatif`)
predicts every plan's step in *virtual* time on a named accelerator (`parlab.run(...,
clock="A100")`, `parlab.core.clock`): compute from the kernels of a block counted once
(`counted_profile.profile`: a paced span lasts exactly Σ(launch_s + max(FLOPs/F_acc, bytes/HBM)),
`Clock.price`), communication from the real link's α-β. What is not closed form (how the schedule
overlaps, the operators the composed layers add) is calibrated *leave one out*
(`search.leave_one_out`): each plan is predicted by a calibration fitted on the other plans of the
sweep, so no prediction is scored against the run it was fitted on. Predictions and measurements are
in the accelerator's seconds ("A100 ms"), and a paced measurement is bit-reproducible: one run of a
plan is its measurement.

A sweep runs each plan once with the scheme `nd` and keeps its `RunResult`, so exactness against
`single`, bytes against the closed forms, memory against the closed forms and step time against
the model all come from the same runs. `clock="wall"` keeps the raw-CPU model (a profile timed on
this machine, gloo's α-β fit, calibrated on the one-dimensional plans) for comparison.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from parlab.core.progress import progress
from parlab.planner import costmodel, counted_profile, profile, search
from parlab.planner.plan import DEGREES

_CALIBRATIONS: dict = {}  # (world_size, link name, clock name) -> the last sweep's Calibration
LINK = "NVLink"  # the paced sweeps' link: the real NVLink of the clock's accelerator


def model_config(overrides: dict | None = None):
    from parlab.models import model_config as make
    return make("gpt", overrides)


@dataclass
class Sweep:
    world_size: int
    link: str | None
    rows: list  # one dict per plan
    judgement: search.Judgement
    calibration: costmodel.Calibration
    results: dict  # {plan: RunResult}
    predictions: list
    measured: dict
    load: str  # `uptime`'s load average when the sweep ran
    clock: object = None  # the runs' parlab.core.clock.Clock
    method: str = "leave one out"  # how each prediction was calibrated
    memory_cap: float | None = None  # bytes per rank the pick and the best measured plan must fit

    def frame(self):
        import pandas as pd
        return pd.DataFrame(self.rows)

    @property
    def unit(self) -> str:
        """What the sweep's milliseconds are: the accelerator's ("A100 ms"), or this CPU's."""
        return self.clock.unit if self.clock is not None and self.clock.paced \
            else "ms, this CPU, raw"

    def describe(self) -> str:
        """The sweep's configuration, for the cell that runs it."""
        cfg = next(iter(self.results.values())).config
        m = cfg.model_config
        return (f"{len(self.rows)} plans at world size {self.world_size} (scheme nd), each run "
                f"{cfg.steps} steps (step time: the median after the first), batch "
                f"{cfg.batch_size} sequences of {m.block_size} tokens, GPT of {m.n_layer} blocks, "
                f"width {m.n_embd}; link {self.link or 'loopback'}; {self.unit}; load average "
                f"{self.load}")

    @property
    def calibration_plans(self) -> set:
        """The plans the calibration was fitted on (none when leave one out: each plan's
        prediction was fitted on the others): never scored as predictions."""
        return {p.plan for p, r in zip(self.predictions, self.rows) if r["calibration"]}


def _load() -> str:
    import os
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def sweep(world_size: int, link: str | None = LINK, steps: int = 3, plans: list | None = None,
          memory_cap: float | None = None, batch_size: int = 12, clock: str = "A100",
          model: dict | None = None, **plan_space) -> Sweep:
    """Run every plan (default: `search.candidate_plans`) once with `nd` on `clock`, predict each
    (paced: leave one out; wall: calibrated on the one-dimensional plans); the judge compares them
    under `memory_cap` bytes (None: no cap). `model`: GPT config overrides (None: the chapter's)."""
    cfg = model_config(model)
    plans = plans or search.candidate_plans(world_size, cfg, batch_size, **plan_space)
    load = _load()
    measured = {p: search.measure_plan(p, steps, link, batch_size, model_config=model, clock=clock)
                for p in progress(plans, desc=f"measuring plans ×{world_size}")}
    if clock == "wall":
        prof, fit, clk = profile.measure(cfg), profile.calibrate_comm(world_size), None
        calibration, _ = search.calibrate(plans, cfg, prof, fit, link, batch_size, steps, measured)
        preds = [costmodel.predict(p, cfg, prof, fit, link, batch_size, calibration) for p in plans]
        base, method = set(search.pure_plans(plans)), "fitted on the one-dimensional plans"
    else:
        clk = counted_profile.clock_for(clock, world_size)
        prof, fit = counted_profile.profile(cfg, clk), None
        preds, calibration = search.leave_one_out(plans, cfg, prof, fit, link, batch_size,
                                                  measured, clk)
        base, method = set(), "leave one out"
    _CALIBRATIONS[(world_size, link, clock)] = calibration
    rows, judgement = score(preds, measured, base, memory_cap)
    return Sweep(world_size, link, rows, judgement, calibration,
                 {p: m["result"] for p, m in measured.items()}, preds, measured, load, clk, method,
                 memory_cap)


def score(preds: list, measured: dict, calibration: set, memory_cap: float | None = None) -> tuple:
    """The sweep's table (one row per plan, `calibration` True for the plans the model was fitted
    on) and the judge's verdict, whose error and Spearman count the held-out plans only: a
    calibration plan predicts the run it was fitted on, and would score ≈0 error."""
    rows = []
    for p in preds:
        got = measured[p.plan]
        rows.append({"plan": p.plan.describe(), "calibration": p.plan in calibration,
                     "predicted_ms": round(1e3 * p.step_s, 4),
                     "measured_ms": round(1e3 * got["step_s"], 4),
                     "error": round((p.step_s - got["step_s"]) / got["step_s"], 3),
                     "exposed_fraction": round(p.exposed_fraction, 3),
                     "bubble": round(p.bubble_fraction, 3),
                     "predicted_bytes": sum(p.bytes_per_dim.values()), "measured_bytes": got["bytes"],
                     "predicted_peak": p.memory["total"], "measured_peak": got["peak_bytes"]})
    return rows, search.judge(preds, measured, memory_cap, calibration)


def goals_report(s: Sweep) -> None:
    """The judge beside the chapter's goals (`search.GOALS`), each with a verdict computed from
    this sweep, and a diagnosis computed from the sweep where one is missed (never hidden)."""
    j, g = s.judgement, search.GOALS
    calib = [r["plan"] for r in s.rows if r["calibration"]]
    print(f"world size {s.world_size}, link {s.link or 'loopback'}, {s.unit}; "
          f"{len(s.rows)} plans, load average {s.load}")
    print(f"calibration ({s.method}): compute ×{s.calibration.compute_scale:.2f}, "
          f"communication ×{s.calibration.comm_scale:.2f}, + {1e3 * s.calibration.overhead_s:.3f} ms "
          "per step" + (" (these scales: fitted on all plans, for the panel below; each scored "
                        "prediction used a fit without its own plan)" if not calib else ""))
    print(f"scored: the held-out plans ({j.scored} of {len(s.rows)})" +
          (f"; not scored, fitted on: {', '.join(calib)}" if calib else
           ": every plan, each predicted by a fit on the others"))
    print(f"median |error| {j.median_error:.1%}   goal ≤ {g['median_error']:.0%}")
    print(f"Spearman rank correlation {j.spearman:.3f}   goal ≥ {g['spearman']}")
    print(f"planner's pick {j.choice}, best measured {j.best}{_under(s)}: regret {j.regret:.1%}   "
          f"goal ≤ {g['regret']:.0%}")
    for goal, ok in j.goals().items():
        print(f"  {goal}: {'met' if ok else 'MISSED'}")
    if all(j.goals().values()):
        print("verdict: the model agrees with this run on all three goals")
    else:
        print(diagnose(s))


def diagnose(s: Sweep) -> str:
    """Which dimension the model misjudges most: the median measured/predicted ratio of the
    plans that use each dimension, from this sweep."""
    ratios = {}
    held = [(r, p) for r, p in zip(s.rows, s.predictions) if not r["calibration"]]
    for r, p in held:
        for d in DEGREES:
            if getattr(p.plan, d) > 1:
                ratios.setdefault(d, []).append(r["measured_ms"] / max(r["predicted_ms"], 1e-9))
    if not ratios:
        return "diagnosis: nothing to compare"
    med = {d: statistics.median(v) for d, v in ratios.items()}
    worst = max(med, key=lambda d: abs(med[d] - 1) if med[d] >= 1 else abs(1 / med[d] - 1))
    spread = max(abs(r["error"]) for r, _ in held)
    paced_clock = s.clock is not None and s.clock.paced
    cause = ("the model's critical path misses how this dimension's schedule overlaps or waits"
             if paced_clock else
             f"on this shared machine (load {s.load}) each rank is a process competing for the "
             "cores, so a raw step depends on the scheduler as much as on the plan")
    return (f"diagnosis: plans with {worst} > 1 measured {med[worst]:.2f}× their prediction "
            f"(median; per dimension: " + ", ".join(f"{d} {v:.2f}×" for d, v in med.items())
            + f"); the largest single error is {spread:.0%}; {cause}.")


def _under(s: Sweep) -> str:
    """ " (both under the 1.40 MB cap)": the cap the pick and the best plan were chosen under."""
    return "" if s.memory_cap is None else f" (both under the {s.memory_cap / 1e6:.2f} MB cap per rank)"


def planner_table(s: Sweep, caps_mb: list[float]):
    """The planner's pick under each cap beside the best measured plan under it."""
    import pandas as pd
    rows = []
    for cap in caps_mb:
        j = search.judge(s.predictions, s.measured, cap * 1e6, s.calibration_plans)
        pick = search.choose(s.predictions, cap * 1e6)
        fits = pick is not None and j.best is not None
        rows.append({"cap_MB": cap, "pick": j.choice or "no plan fits",
                     "pick_predicted_MB": round(pick.memory["total"] / 1e6, 2) if pick else "n/a",
                     "best_measured": j.best or "no plan fits",
                     "regret": round(j.regret, 3) if fits else "n/a"})
    return pd.DataFrame(rows)


def closed_form_table(world_size: int, batch_size: int = 12, plans=None):
    """Every plan's bytes per step of its busiest rank (`plans`, default every candidate of the
    search): the time model's message list (`costmodel.message_bytes`, what each message it
    prices carries) against `parlab.planner.cost.nd_closed_form_bytes` (the scheme's registered
    closed form), without a run."""
    import pandas as pd

    from parlab.planner.cost import nd_closed_form_bytes

    cfg = model_config()
    run_cfg = type("Cfg", (), {"model_config": cfg, "batch_size": batch_size, "steps": 1})()
    rows = []
    for plan in plans if plans is not None else search.candidate_plans(world_size, cfg, batch_size):
        ours = costmodel.message_bytes(plan, cfg, batch_size)
        per_rank = nd_closed_form_bytes(plan, run_cfg, steps=1)
        theirs = max(sum(v[r] for v in per_rank.values()) for r in range(plan.world_size))
        rows.append({"plan": plan.describe(), **{d: ours.get(d, 0) for d in
                                                 ("dp", "tp", "pp", "cp", "tie")},
                     "busiest rank": sum(ours.values()), "nd closed form": theirs,
                     "equal": sum(ours.values()) == theirs})
    return pd.DataFrame(rows)


def headline(s: Sweep) -> None:
    """The chapter's measured headlines, printed from this sweep with a verdict each: exactness,
    bytes and memory against the closed forms, and the model's three numbers in paced time."""
    j, g = s.judgement, search.GOALS
    bytes_ok = sum(r["predicted_bytes"] == r["measured_bytes"] for r in s.rows)
    peak_ok = sum(r["predicted_peak"] == r["measured_peak"] for r in s.rows)
    n = len(s.rows)
    print(f"{n} plans at world size {s.world_size} on {s.link or 'loopback'}, {s.unit}:")
    print(f"- ledger bytes = the closed forms in {bytes_ok} of {n} plans; peak memory = the closed "
          f"form in {peak_ok} of {n}: {'agrees' if bytes_ok == peak_ok == n else 'DOES NOT agree'}")
    print(f"- predicted vs measured ({s.method}): median |error| {j.median_error:.1%} "
          f"(goal ≤ {g['median_error']:.0%}), Spearman {j.spearman:.3f} (goal ≥ {g['spearman']})")
    print(f"- the planner's pick {j.choice} vs the best measured {j.best}{_under(s)}: regret {j.regret:.1%} "
          f"(goal ≤ {g['regret']:.0%})")
    missed = [k for k, ok in j.goals().items() if not ok]
    print("verdict: the cost model agrees with this run on all three goals" if not missed else
          f"verdict: MISSED {', '.join(missed)} — {diagnose(s)}")


from parlab.planner.explore.panel import panel, panel_changes, panel_follow  # noqa: E402,F401
