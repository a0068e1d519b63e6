"""MAD-Max's what-ifs across plans at a real model's size: trace each plan once, replay it anywhere.

Hsia et al., "MAD-Max Beyond Single-Node" (ISCA 2024): one iteration's trace (§4), replayed with
compute and communication on their own streams, answers the co-design questions (§6) — 2× FLOP/s,
2× network bandwidth, lower latency, another accelerator — for every parallelization strategy.
Here each candidate plan of a real model's shapes (`parlab.models.presets`, `gpt2-xl`) runs once,
shapes-only (`parlab.core.shapes`), on a paced clock that keeps its kernels
(`Clock(keep_work=True)`); `trace_replay.replay` re-prices that one trace under each `WhatIf`. A
what-if is a clock and a real link (`setting`), so a shapes-only run under the same change checks
the replay (`check`). Per plan: the replayed step, its exposed communication (the compute stream
waiting while the rank's own ops are on the link) beside the paper's 14–32% (its Fig. 2), and
which what-if pays most.

Simplifications, named: the model is `layers` of the preset's blocks (its embedding's share of the
gradients is then larger than at full depth); `world_size` ranks in nodes of `per_node` stand for
a multi-node job; "2× FLOP/s" doubles the sustained rate only (HBM and launch unchanged, so a
memory-bound kernel does not speed up); another accelerator brings its own NVLink generation and
inter-node link (`Accelerator.inter`: a DGX H100 has NDR InfiniBand).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

from parlab.core.clock import Clock, pace_link
from parlab.core.link import ACCELERATORS, Link
from parlab.core.topology import Topology, nodes
from parlab.planner.plan import Plan
from parlab.planner.trace_replay import Trace, replay

PRESET, WORLD_SIZE, PER_NODE, LAYERS, BATCH, BASE = "gpt2-xl", 4, 2, 2, 8, "A100"
STEP = 1  # the step traced and compared: the second (the first creates AdamW's moments)
PUBLISHED = (0.14, 0.32)  # MAD-Max's exposed communication share of GPU hours (Fig. 2)
# gpt2-xl's 25 heads admit tp ∈ {1, 5, 25}: on 4 ranks its plans are dp, ZeRO and pp
PLANS = {"gpt2-xl": (Plan(dp=4, dp_sync="overlap"), Plan(dp=4, zero=3),
                     Plan(dp=2, pp=2, microbatches=4)),
         "llama3-8b": (Plan(dp=4, dp_sync="overlap"), Plan(tp=4), Plan(dp=2, tp=2))}


@dataclass(frozen=True)
class WhatIf:
    """A change of hardware: `flops`× the sustained FLOP/s, `bandwidth`× every link's β, α ÷
    `latency`, on `accelerator` (None: the base one) with its own links."""

    name: str
    flops: float = 1.0
    bandwidth: float = 1.0
    latency: float = 1.0
    accelerator: str | None = None

    def __post_init__(self):
        for field in ("flops", "bandwidth", "latency"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not (value > 0 and math.isfinite(value)):
                raise ValueError(f"WhatIf {self.name!r}: {field}={value!r} must be a finite "
                                 "number > 0")
        if self.accelerator is not None and self.accelerator not in ACCELERATORS:
            raise ValueError(f"WhatIf {self.name!r}: accelerator={self.accelerator!r} must be "
                             f"one of {sorted(ACCELERATORS)}")


AS_RUN = WhatIf("as run")
WHAT_IFS = (WhatIf("2× FLOP/s", flops=2.0), WhatIf("2× bandwidth", bandwidth=2.0),
            WhatIf("½ α", latency=2.0), WhatIf("H100", accelerator="H100"))


def _scaled(link, bandwidth: float, latency: float):
    if link is None or (bandwidth == 1 and latency == 1):
        return link
    if isinstance(link, Topology):
        return Topology(tuple(tuple(_scaled(p, bandwidth, latency) for p in row)
                              for row in link.links), link.name, link.nodes)
    tag = "".join([f" {bandwidth:g}×β" if bandwidth != 1 else "",
                   f" α÷{latency:g}" if latency != 1 else ""])
    return Link(link.latency_s / latency, link.bandwidth_Bps * bandwidth, link.name + tag)


def setting(whatif: WhatIf = AS_RUN, world_size: int = WORLD_SIZE, per_node: int = PER_NODE,
            base: str = BASE) -> tuple[Clock, object]:
    """(paced Clock keeping kernels, real link) of `whatif`: nodes of `per_node` with the
    accelerator's NVLink inside and its cluster's InfiniBand between (`parlab.core.topology`)."""
    if base not in ACCELERATORS:
        raise ValueError(f"base={base!r} must be one of {sorted(ACCELERATORS)}")
    acc = ACCELERATORS[whatif.accelerator or base]
    if whatif.flops != 1:
        acc = dataclasses.replace(acc, name=f"{acc.name} {whatif.flops:g}×FLOP/s",
                                  flops=acc.flops * whatif.flops)
    clock = Clock(acc, keep_work=True)
    link = (pace_link(nodes(world_size, per_node, "NVLink", acc.inter), clock)
            if world_size > 1 else None)
    return clock, _scaled(link, whatif.bandwidth, whatif.latency)


def run_plan(plan: Plan, whatif: WhatIf = AS_RUN, preset: str = PRESET, layers: int = LAYERS,
             batch: int = BATCH, per_node: int = PER_NODE, base: str = BASE):
    """`plan` run shapes-only at `preset`'s shapes (`layers` blocks) under `whatif`, 2 steps."""
    import parlab
    from parlab.models.presets import PRESETS

    if preset not in PRESETS:
        raise ValueError(f"preset={preset!r} must be one of {sorted(PRESETS)}")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers={layers!r} must be an int >= 1")
    clock, link = setting(whatif, plan.world_size, per_node, base)
    return parlab.run("nd", world_size=plan.world_size, model=preset, steps=STEP + 1,
                      model_config={"n_layer": layers}, clock=clock, link=link,
                      shapes_only=True, batch_size=batch, timeout=1800.0, **plan.options())


def replay_under(trace: Trace, whatif: WhatIf, world_size: int, per_node: int = PER_NODE,
                 base: str = BASE) -> dict:
    """`trace` replayed with its kernels and ops re-priced on `whatif`'s setting."""
    clock, link = setting(whatif, world_size, per_node, base)
    return replay(trace, clock=clock, link=link)


def explore(preset: str = PRESET, plans=None, whatifs=WHAT_IFS, layers: int = LAYERS,
            batch: int = BATCH, per_node: int = PER_NODE, base: str = BASE,
            progress=None) -> list[dict]:
    """Each plan traced once, replayed as run and under every what-if. One row per plan: plan,
    run_s (its measured step), replay (what-if name -> `replay`'s dict, "as run" first), error
    (replay as run ÷ run − 1), speedup (what-if name -> step as run ÷ step under it), best (the
    one-factor what-if — no other accelerator — that pays most), trace (kept for `check`)."""
    rows = []
    for plan in PLANS[preset] if plans is None else plans:
        t0 = time.perf_counter()
        r = run_plan(plan, AS_RUN, preset, layers, batch, per_node, base)
        trace = Trace.from_run(r, STEP)
        out = {w.name: replay_under(trace, w, plan.world_size, per_node, base)
               for w in (AS_RUN, *whatifs)}
        step = out[AS_RUN.name]["step_s"]
        speedup = {w.name: step / out[w.name]["step_s"] for w in whatifs}
        single = [w.name for w in whatifs if w.accelerator is None]  # one factor changed
        rows.append({"plan": plan, "name": plan.describe(), "run_s": r.step_times[STEP],
                     "replay": out, "error": step / r.step_times[STEP] - 1, "speedup": speedup,
                     "best": max(single, key=speedup.get) if single else None, "trace": trace})
        if progress:
            progress(f"  {plan.describe()}: traced and replayed ({time.perf_counter() - t0:.0f} s "
                     "of this CPU)")
    return rows


def check(row: dict, whatif: WhatIf, preset: str = PRESET, layers: int = LAYERS,
          batch: int = BATCH, per_node: int = PER_NODE, base: str = BASE) -> dict:
    """The row's plan run shapes-only under `whatif`, beside its trace's replay under it."""
    plan = row["plan"]
    r = run_plan(plan, whatif, preset, layers, batch, per_node, base)
    replayed = replay_under(row["trace"], whatif, plan.world_size, per_node, base)["step_s"]
    return {"plan": row["name"], "whatif": whatif.name, "replay_s": replayed,
            "run_s": r.step_times[STEP], "error": replayed / r.step_times[STEP] - 1}


def format_rows(rows: list[dict], whatifs=WHAT_IFS) -> str:
    """Per plan: run and replay (ms of the base accelerator), exposed share (all waiting, and on
    the wire), the speedup of every what-if and the one that pays most."""
    head = (f"{'plan':<24} {'run ms':>8} {'replay ms':>9} {'error':>7} {'exposed':>7} "
            f"{'on wire':>7}  " + " ".join(f"{w.name:>12}" for w in whatifs) + "  one factor pays most")
    lines = [head]
    for row in rows:
        base = row["replay"][AS_RUN.name]
        lines.append(f"{row['name']:<24} {row['run_s'] * 1e3:8.2f} {base['step_s'] * 1e3:9.2f} "
                     f"{row['error']:+7.2%} {base['exposed_share']:7.0%} {base['wire_share']:7.0%}"
                     "  " + " ".join(f"{'×' + format(row['speedup'][w.name], '.2f'):>12}"
                                     for w in whatifs) + f"  {row['best']}")
    return "\n".join(lines)


def verdicts(rows: list[dict], checks=(), whatifs=WHAT_IFS, tolerance: float = 0.02,
             whatif_tolerance: float = 0.05) -> list[str]:
    """The checks and the findings, computed from the rows (and `check`'s results)."""
    worst = max(rows, key=lambda row: abs(row["error"]))
    out = [f"replay as run vs the shapes-only run it came from: worst {worst['error']:+.3%} "
           f"({worst['name']}) -> {'within' if abs(worst['error']) <= tolerance else 'NOT within'}"
           f" {tolerance:.0%}"]
    if checks:
        bad = max(checks, key=lambda c: abs(c["error"]))
        out.append(f"replay under a what-if vs a shapes-only run under it ({len(checks)} checked): "
                   f"worst {bad['error']:+.3%} ({bad['plan']}, {bad['whatif']}) -> "
                   + ("within" if abs(bad["error"]) <= whatif_tolerance else "NOT within")
                   + f" {whatif_tolerance:.0%}")
    lo, hi = PUBLISHED
    for row in rows:
        base = row["replay"][AS_RUN.name]
        wire, share = base["wire_share"], base["exposed_share"]
        where = "inside" if lo <= wire <= hi else ("below" if wire < lo else "above")
        out.append(f"{row['name']}: exposed communication {wire:.0%} of the step ({where} "
                   f"MAD-Max's {lo:.0%}–{hi:.0%})"
                   + (f"; with waiting for peers' compute (a pipeline's bubble) {share:.0%}"
                      if share - wire >= 0.005 else "")
                   + (f"; of one factor, {row['best']} pays most "
                      f"(×{row['speedup'][row['best']]:.2f})" if row["best"] else "")
                   + "".join(f", {w.name} (its system) ×{row['speedup'][w.name]:.2f}"
                             for w in whatifs if w.accelerator is not None))
    fastest = min(rows, key=lambda row: row["replay"][AS_RUN.name]["step_s"])
    line = [f"fastest plan as run: {fastest['name']}"]
    for w in whatifs:
        best = min(rows, key=lambda row: row["replay"][w.name]["step_s"])
        line.append(f"under {w.name}: {best['name']}"
                    + (" (the choice changes)" if best is not fastest else ""))
    out.append("; ".join(line))
    return out


def show(preset: str = PRESET, layers: int = LAYERS, plans=None, whatifs=WHAT_IFS,
         batch: int = BATCH, per_node: int = PER_NODE, base: str = BASE, checks: bool = True,
         progress=print) -> list[dict]:
    """Chapter 13's section: the setting, the table, and the verdicts; with `checks`, each plan
    also runs shapes-only under the one-factor what-if that pays it most, beside its replay."""
    t0 = time.perf_counter()
    rows = explore(preset, plans, whatifs, layers, batch, per_node, base, progress)
    found = []
    for row in rows if checks else ():
        what = next(w for w in whatifs if w.name == row["best"])
        found.append(check(row, what, preset, layers, batch, per_node, base))
    clock, link = setting(AS_RUN, rows[0]["plan"].world_size, per_node, base) if rows else (None,
                                                                                          None)
    print(f"{preset} shapes, {layers} of its blocks, shapes-only, global batch {batch}, "
          f"{link if link is not None else clock.label if clock else base}; step {STEP} traced "
          "once per plan, "
          "replayed under each what-if (speedup = step as run ÷ step under it)")
    print(format_rows(rows, whatifs))
    for line in verdicts(rows, found, whatifs):
        print(line)
    print(f"({time.perf_counter() - t0:.0f} s of this CPU, raw)")
    return rows


def main(argv=None) -> int:
    """`python -m parlab.planner.whatif [--preset gpt2-xl] [--layers 48] [--per-node 2]`."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m parlab.planner.whatif",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default=PRESET, choices=sorted(PLANS))
    parser.add_argument("--layers", type=int, default=LAYERS,
                        help="blocks of the preset (gpt2-xl: 48 in full; even, for pp=2)")
    parser.add_argument("--per-node", type=int, default=PER_NODE, help="GPUs per node")
    parser.add_argument("--batch", type=int, default=BATCH, help="global batch (sequences)")
    parser.add_argument("--no-checks", action="store_true", help="replays only, no check runs")
    args = parser.parse_args(argv)
    show(args.preset, args.layers, batch=args.batch, per_node=args.per_node,
         checks=not args.no_checks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
