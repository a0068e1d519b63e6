"""`python -m parlab bench clock`: is virtual time the same on a busy machine? (parlab.core.clock)

The acceptance measurement of virtual time (issue 46): `ddp-overlap` against `ddp-naive` at world
size 4 on the real 1 GbE link, on an idle machine and again beside two CPU-burning processes this
bench starts. A paced run is bit-reproducible: the busy runs' timelines must be identical to the
idle runs' — equality, not a tolerance. The raw clock's comparison is printed beside (its step
times move with the load), with each clock's wall time per run.

    python -m parlab bench clock [--repeats 2] [--steps 4] [--world-size 4]

In full: docs/engine.md, `parlab.engine.bench_clock`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from parlab.core.link import Link
from parlab.core.progress import progress

SCHEMES = ("ddp-naive", "ddp-overlap")
# paced: the real 1 GbE (α 50 µs, 125 MB/s: parlab.core.link.REAL), where the all-reduce of the
# tiny GPT's gradients on an A100 takes about as long as its compute: overlap has something to hide
LINK = "1GbE"
# raw: a link on which the same all-reduce takes about as long as this CPU's compute
RAW_LINK = Link(4e-3, 5e6, "a slow link (communication ≈ compute on this CPU), raw")


def burners(count: int) -> list[subprocess.Popen]:
    """`count` processes that busy-loop until killed: a machine that is not idle."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def stop(processes) -> None:
    for p in processes:
        p.kill()
        p.wait()


def fingerprint(r) -> tuple:
    """Everything a run's time is made of: its timeline (every span and wait, per rank), every
    ledger record's issue and completion, its step times, and its losses."""
    return (tuple(tuple(sorted((k, repr(v)) for k, v in e.items())) for e in r.timeline),
            tuple((x["rank"], x["op"], x["t_start"], x["t_end"]) for x in r.ledger),
            tuple(r.step_times), tuple(r.losses))


def measure(clock: str, repeats: int, steps: int, world_size: int) -> dict:
    """{scheme: [(step time, wall seconds, fingerprint) of each repeat]}, schemes interleaved."""
    import parlab

    link = LINK if clock != "wall" else RAW_LINK
    out = {s: [] for s in SCHEMES}
    for _ in progress(range(repeats), desc="repeats"):
        for scheme in SCHEMES:
            r = parlab.run(scheme, world_size=world_size, steps=steps, clock=clock, link=link)
            out[scheme].append((r.step_time(), r.wall_s, fingerprint(r)))
    return out


def spread(values) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def identical(runs: list) -> bool:
    """True when every run's fingerprint equals the first's."""
    return all(fp == runs[0][2] for _, _, fp in runs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench clock", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--burners", type=int, default=2)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.steps < 2 or args.world_size < 2 or args.burners < 0:
        raise SystemExit(f"--repeats={args.repeats} (>= 1), --steps={args.steps} (>= 2), "
                         f"--world-size={args.world_size} (>= 2), --burners={args.burners} (>= 0)")
    import parlab

    parlab.run("single", steps=1)  # warm-up: the forkserver starts here, in no measured run
    rows = {}
    for clock in ("A100", "wall"):
        rows[(clock, "idle")] = measure(clock, args.repeats, args.steps, args.world_size)
        procs = burners(args.burners)
        try:
            rows[(clock, "busy")] = measure(clock, args.repeats, args.steps, args.world_size)
        finally:
            stop(procs)
    print(f"ddp-overlap vs ddp-naive, world size {args.world_size}, {args.steps} steps, "
          f"{args.repeats} run(s) each; busy = beside {args.burners} CPU-burning processes")
    print(f"{'clock':<16} {'machine':<7} {'naive ms/step':>13} {'overlap ms/step':>15} {'ratio':>7} "
          f"{'spread':>7} {'wall s/run':>10}")
    ok, wall = True, {}
    for clock in ("A100", "wall"):
        label = "A100 (virtual)" if clock != "wall" else "this CPU, raw"
        unit = "A100 ms" if clock != "wall" else "CPU ms"
        medians = {}
        for machine in ("idle", "busy"):
            got = rows[(clock, machine)]
            naive, overlap = (statistics.median(t for t, _, _ in got[s]) for s in SCHEMES)
            medians[machine] = (naive, overlap, naive / overlap)
            wall[(clock, machine)] = statistics.median(w for s in SCHEMES for _, w, _ in got[s])
            print(f"{label:<16} {machine:<7} {naive * 1e3:>13.4f} {overlap * 1e3:>15.4f} "
                  f"{naive / overlap:>6.3f}× {max(spread([t for t, _, _ in got[s]]) for s in SCHEMES):>7.1%} "
                  f"{wall[(clock, machine)]:>10.2f}")
        if clock != "wall":
            same = all(identical(rows[(clock, "idle")][s] + rows[(clock, "busy")][s])
                       for s in SCHEMES)
            print(f"  {label}: every run's timeline, ledger times, step times and losses, idle and "
                  f"busy, are {'identical to the last bit → holds' if same else 'NOT identical'} "
                  f"(step times in {unit})")
            ok = ok and same
        else:
            changes = [abs(medians["busy"][i] / medians["idle"][i] - 1) for i in range(3)]
            print(f"  {label}: busy vs idle moves step times and the ratio by up to "
                  f"{max(changes):.1%} (step times in {unit})")
    saved = [wall[("wall", m)] - wall[("A100", m)] for m in ("idle", "busy")]
    print(f"wall time per run (this CPU, raw): virtual time {wall[('A100', 'idle')]:.2f} s idle, "
          f"{wall[('A100', 'busy')]:.2f} s busy; the raw clock {wall[('wall', 'idle')]:.2f} s idle, "
          f"{wall[('wall', 'busy')]:.2f} s busy → virtual time "
          + ", ".join(f"{'saves' if d >= 0 else 'costs'} {abs(d):.2f} s per run {m}"
                      for d, m in zip(saved, ("idle", "busy")))
          + " (it sleeps nothing; the raw runs sleep through their link)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
