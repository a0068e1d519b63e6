"""`python -m parlab bench asynchrony`: BSP vs SSP vs ASP with a straggler, and synchronous vs
asynchronous Jacobi, measured in one run, on the paced clock (`--clock A100`, the default; the
parameter server's pulls and pushes on the real NVLink, in A100 time; Jacobi on its virtual clock)
or this CPU's raw clock (`--clock wall`).

Parameter server (Dean et al. 2012; Ho et al. 2013): world size 4 (3 workers), the last worker
`--straggler`× slower, `--steps` updates each: time to the last update (A100 time on a paced clock)
and its ratio to `ps-sync`, the largest staleness, the held-out loss and its ratio to `single`'s
(ASP's throughput gain and its loss penalty), server bytes per update against the closed form.
Jacobi (Bertsekas & Tsitsiklis 1989): time to a 1e-6 residual, synchronous vs asynchronous with the
same straggler and with injected delays (the issue's goal: asynchronous ≥ 1.3× sooner), and
macroiteration counts. Dual-batch (Lu et al. 2025): time to a common held-out loss, one batch size
vs dual-batch vs the hybrid with cyclic progressive learning, the straggler small-batch, beside the
paper's −10.1%.
"""

from __future__ import annotations

import argparse
import json

import parlab
from parlab.asynchrony import cost
from parlab.asynchrony import explore as ex
from parlab.asynchrony.explore import dualbatch as dual
from parlab.core.progress import progress


def measure_ps(world_size: int, steps: int, straggler: float, staleness: int,
               clock: str = "A100") -> list[dict]:
    runs = ex.race(world_size, steps, straggler, staleness, clock=clock)
    single_loss = ex.eval_loss(runs["single"].state)
    base = runs["ps-sync"].outputs[0].extras["update_times"][-1]
    numel = sum(v.numel() for v in runs["single"].state.values())
    rows = []
    for name in ex.SCHEMES:
        r = runs[name]
        t = r.outputs[0].extras["update_times"][-1]
        into = r.bytes_per_rank("bytes_recv")[0] / steps
        mode = parlab.schemes()[name].cost.mode  # its registered closed form: "ssp" or "asp"
        loss = ex.eval_loss(r.state)
        rows.append({"scheme": name, "seconds": t, "speedup": base / t,
                     "max_staleness": ex.staleness_stats(r)["max"], "heldout_loss": loss,
                     "loss_ratio": loss / single_loss, "server_in_per_update": into,
                     "formula_in_per_update": cost.server_bytes_per_update(numel, world_size - 1, mode)[0]})
    return rows


def measure_sharded(world_size: int, steps: int, clock: str = "A100") -> list[dict]:
    """ps-sync with 1 and 2 servers: seconds per update, the busiest server's bytes in per update
    (ledger) and the closed form."""
    rows = []
    for k in progress((1, 2), desc="sharded"):
        if world_size - k < 1:
            continue
        r = parlab.run("ps-sync", world_size=world_size, steps=steps, servers=k, clock=clock,
                       link=ex.paced_link(clock))
        numel = sum(v.numel() for v in r.state.values())
        pairs = cost.server_bytes_per_update(numel, world_size - k, "ssp", k)
        pairs = [pairs] if k == 1 else pairs
        into = r.bytes_per_rank("bytes_recv", phase="push")[:k]
        rows.append({"servers": k, "workers": world_size - k, "seconds_per_update": r.step_time(),
                     "busiest_in_per_update": max(into) / steps,
                     "formula_busiest_in": max(i for i, _ in pairs)})
    return rows


def measure_jacobi(ranks: int, sweeps: int, straggler: float, tol: float,
                   clock: str = "A100") -> list[dict]:
    runs = ex.jacobi_runs(ranks, sweeps, straggler, clock=clock)
    base = runs["sync"].time_to(tol)
    return [{"mode": name, "sweeps": r.sweeps(), "macroiterations": len(r.macro_times()),
             "time_to_tol": r.time_to(tol), "speedup": base / r.time_to(tol)} for name, r in runs.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench asynchrony", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--straggler", type=float, default=3.0)
    parser.add_argument("--staleness", type=int, default=2)
    parser.add_argument("--sweeps", type=int, default=300)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--dual-steps", type=int, default=60, help="jobs of each dual-batch run")
    parser.add_argument("--clock", default="A100", help="paced clock (A100, H100, V100; Jacobi: its "
                        "virtual clock) or wall (this CPU, raw)")
    parser.add_argument("--json", default=None, help="save the rows here")
    args = parser.parse_args(argv)
    ps = measure_ps(args.world_size, args.steps, args.straggler, args.staleness, args.clock)
    print(f"parameter server: world size {args.world_size}, {args.steps} updates, last worker "
          f"{args.straggler:g}× slower, ps-ssp staleness {args.staleness}; clock {args.clock} "
          "(paced: A100 time, the real NVLink)")
    print(f"{'scheme':<9} {'seconds':>8} {'speedup':>8} {'max stale':>9} {'held-out':>9} {'/single':>8} "
          f"{'server B in/update':>19} {'formula':>10}")
    for r in ps:
        print(f"{r['scheme']:<9} {r['seconds']:>8.2f} {r['speedup']:>7.2f}× {r['max_staleness']:>9} "
              f"{r['heldout_loss']:>9.4f} {r['loss_ratio']:>8.3f} {r['server_in_per_update']:>19,.0f} "
              f"{r['formula_in_per_update']:>10,}")
    sharded = measure_sharded(args.world_size, args.steps, args.clock)
    print(f"\nsharded servers (Li et al. 2014), ps-sync, world size {args.world_size}")
    print(f"{'servers':>7} {'workers':>7} {'s/update':>9} {'busiest server B in/update':>27} {'formula':>10}")
    for r in sharded:
        print(f"{r['servers']:>7} {r['workers']:>7} {r['seconds_per_update']:>9.4f} "
              f"{r['busiest_in_per_update']:>27,.0f} {r['formula_busiest_in']:>10,}")
    jac = measure_jacobi(args.world_size, args.sweeps, args.straggler, args.tol, args.clock)
    print(f"\nblock-Jacobi on {args.world_size} ranks, last rank {args.straggler:g}× slower: time to "
          f"residual {args.tol:g} ({ex.jacobi_clock(args.clock)} clock)")
    print(f"{'mode':<15} {'seconds':>8} {'speedup':>8} {'macroiterations':>16}  sweeps per rank")
    for r in jac:
        print(f"{r['mode']:<15} {r['time_to_tol']:>8.2f} {r['speedup']:>7.2f}× {r['macroiterations']:>16}  "
              f"{r['sweeps']}")
    print(f"\ndual-batch on {args.world_size} ranks, {args.dual_steps} jobs, the last worker "
          f"{args.straggler:g}× slower (small-batch in dual and hybrid)")
    measured = dual.measure(dual.dual_runs(args.world_size, args.dual_steps, args.straggler,
                                           clock=args.clock))
    change = dual.dual_table(measured)
    dual_rows = [{"variant": name, **{k: v for k, v in r.items() if k != "curve"}}
                 for name, r in measured["rows"].items()]
    print("one run, ratios within it" + ("; this CPU, raw: shared and noisy" if args.clock == "wall" else
                                         "; paced time: repeatable to a few percent on any machine"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ps": ps, "sharded": sharded, "jacobi": jac, "dual": dual_rows,
                       "dual_time_change": change, "dual_target": measured["target"]}, f, indent=1)
    return 0
