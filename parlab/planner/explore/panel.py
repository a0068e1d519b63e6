"""Notebook 13's panel: a plan's calibrated prediction in paced time, a measured run on demand.
The buttons follow the world size (`panel_follow`: only degrees that divide it, dp the ranks the
others leave), and each run prints what changed from the previous setting (`panel_changes`)."""

from __future__ import annotations

from parlab.planner import costmodel, counted_profile, profile, search
from parlab.planner.plan import Plan


def panel_follow(values: dict) -> dict:
    """The panel's knobs that depend on the others (`widgets.experiment_panel`'s `follow`): tp, pp
    and cp offer only the degrees of `PANEL_DEGREES` that divide the world size (world size 1
    offers 1 alone), a value that no longer applies drops to the largest that does; dp takes the
    ranks tp·pp·cp leave, so the one dp that exists is the only choice offered, and it is the dp
    `panel` runs (1 where tp·pp·cp does not divide the world size: no plan exists, and `panel`
    says why)."""
    ws, out = values["world_size"], {}
    for name in ("tp", "pp", "cp"):
        options = [d for d in PANEL_DEGREES if ws % d == 0]
        out[name] = (options, max(d for d in options if d <= values[name]))
    rest = out["tp"][1] * out["pp"][1] * out["cp"][1]
    dp = ws // rest if ws % rest == 0 else 1
    out["dp"] = ([dp], dp)
    return out


PANEL_DEGREES = (1, 2, 4)  # the tp, pp and cp buttons of notebook 13's panel
_PANEL_LAST: dict = {}  # the panel's previous setting, to print what changed


def panel_changes(values: dict) -> str:
    """What changed from the panel's previous setting (`values` become the previous one)."""
    before = dict(_PANEL_LAST)
    _PANEL_LAST.clear()
    _PANEL_LAST.update(values)
    if not before:
        return "the first setting"
    changed = [f"{k} {before[k]} → {v}" for k, v in values.items() if before.get(k) != v]
    return "changed: " + (", ".join(changed) if changed else "nothing")


def panel(world_size: int, dp: int, tp: int, pp: int, cp: int, microbatches: int, link: str,
          memory_cap_mb: int, measure: str = "no", clock: str = "A100") -> None:
    """Widget callback: what changed from the previous setting, the plan's predicted step (the
    accelerator's ms on `clock`), memory and bytes; a measured run on demand."""
    print(panel_changes({"world_size": world_size, "dp": dp, "tp": tp, "pp": pp, "cp": cp,
                         "microbatches": microbatches, "link": link,
                         "memory_cap_mb": memory_cap_mb, "measure": measure, "clock": clock})
          + f" (tp, pp and cp offer the degrees that divide world size {world_size}; dp the "
          "ranks they leave)")
    from parlab.planner.explore import _CALIBRATIONS, LINK, model_config
    cfg = model_config()
    rest = tp * pp * cp
    if dp * rest != world_size and world_size % rest == 0:  # dp takes the ranks left over
        print(f"dp={dp} → {world_size // rest}: dp takes the ranks tp·pp·cp leave")
        dp = world_size // rest
    plan = Plan(dp=dp, tp=tp, pp=pp, cp=cp, microbatches=microbatches if pp > 1 else 1)
    problems = plan.problems(world_size, cfg, 12)
    if problems:
        print(f"plan {plan.describe()} does not fit world size {world_size}: " + "; ".join(problems))
        return
    link = None if link == "loopback" else link
    calibration = (_CALIBRATIONS.get((world_size, link, clock))
                   or _CALIBRATIONS.get((world_size, LINK, clock)))
    if clock == "wall":
        clk, prof, fit, unit = None, profile.measure(cfg), profile.calibrate_comm(world_size), \
            "ms, this CPU, raw"
    else:
        clk = counted_profile.clock_for(clock, world_size)
        prof, fit, unit = counted_profile.profile(cfg, clk), None, clk.unit
    p = costmodel.predict(plan, cfg, prof, fit, link, 12, calibration, clk)
    cap = memory_cap_mb * 1e6
    print("(calibrated by this world size's sweep)" if calibration else
          "(the raw model: no sweep of this world size and clock has run yet)")
    print(f"{plan.describe()}: predicted step {1e3 * p.step_s:.3f} {unit} (compute "
          f"{1e3 * p.compute_s:.3f}, exposed communication {1e3 * p.exposed_comm_s:.3f}, fraction "
          f"{p.exposed_fraction:.0%}, bubble {p.bubble_fraction:.0%})")
    print(f"peak memory per rank {p.memory['total'] / 1e6:.2f} MB "
          f"({'fits' if p.memory['total'] <= cap else 'over'} the {memory_cap_mb} MB cap); "
          f"bytes per step by dimension {p.bytes_per_dim or 'none: one rank sends nothing'}")
    if measure == "yes":
        got = search.measure_plan(plan, 3, link, clock=clock)
        print(f"measured step {1e3 * got['step_s']:.3f} {unit}, peak "
              f"{got['peak_bytes'] / 1e6:.2f} MB, bytes per step {got['bytes']:,}")
