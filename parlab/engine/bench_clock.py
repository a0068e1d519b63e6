"""`python -m parlab bench clock`: does paced time hold on a busy machine? (parlab.core.clock)

The acceptance measurement of paced time: `ddp-overlap` against `ddp-naive` at world size 4, on a
link where communication ≈ compute, three times on an idle machine and three times beside two
CPU-burning processes that this bench starts itself. Each row is a median over its repeats; the
spread is (max − min) / median. The paced rows must agree within ±5% idle vs busy; the same
comparison on the raw clock (`clock="wall"`, same link as a teaching link) is printed beside, to
show what the paced clock removes.

    python -m parlab bench clock [--repeats 3] [--steps 4] [--world-size 4]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from parlab.core.link import Link

SCHEMES = ("ddp-naive", "ddp-overlap")
# a real link on which the tiny GPT's gradient all-reduce takes about as long as its compute on a
# paced A100 (α = 0.2 µs, β = 100 GB/s; dilated by the clock): where overlap has something to hide
LINK = Link(2e-7, 100e9, "a link where communication ≈ compute")
TOLERANCE = 0.05


def burners(count: int) -> list[subprocess.Popen]:
    """`count` processes that busy-loop until killed: a machine that is not idle."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def stop(processes) -> None:
    for p in processes:
        p.kill()
        p.wait()


def measure(clock: str, repeats: int, steps: int, world_size: int) -> dict:
    """{scheme: [step time of each repeat]} (median step of each run), schemes interleaved."""
    import parlab

    link = LINK if clock != "wall" else Link(2e-7 * 2e4, 100e9 / 2e4, "the same link ×20,000, raw")
    out = {s: [] for s in SCHEMES}
    overrun = []
    for _ in range(repeats):
        for scheme in SCHEMES:
            r = parlab.run(scheme, world_size=world_size, steps=steps, clock=clock, link=link)
            out[scheme].append(r.step_time())
            if r.pace:
                overrun.append(r.pace["overrun_share"])
    out["overrun"] = overrun
    return out


def spread(values) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench clock", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--burners", type=int, default=2)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.steps < 2 or args.world_size < 2 or args.burners < 0:
        raise SystemExit(f"--repeats={args.repeats} (>= 1), --steps={args.steps} (>= 2), "
                         f"--world-size={args.world_size} (>= 2), --burners={args.burners} (>= 0)")
    rows = {}
    for clock in ("A100", "wall"):
        rows[(clock, "idle")] = measure(clock, args.repeats, args.steps, args.world_size)
        procs = burners(args.burners)
        try:
            rows[(clock, "busy")] = measure(clock, args.repeats, args.steps, args.world_size)
        finally:
            stop(procs)
    print(f"ddp-overlap vs ddp-naive, world size {args.world_size}, {args.steps} steps, median of "
          f"{args.repeats} runs; busy = beside {args.burners} CPU-burning processes")
    print(f"{'clock':<22} {'machine':<7} {'naive s/step':>13} {'overlap s/step':>15} {'ratio':>7} "
          f"{'spread':>7} {'overrun':>8}")
    ok = True
    for clock in ("A100", "wall"):
        label = "A100 (paced)" if clock != "wall" else "this CPU, raw"
        medians = {}
        for machine in ("idle", "busy"):
            got = rows[(clock, machine)]
            naive, overlap = (statistics.median(got[s]) for s in SCHEMES)
            medians[machine] = (naive, overlap, naive / overlap)
            overrun = f"{max(got['overrun']):.1%}" if got["overrun"] else "—"
            print(f"{label:<22} {machine:<7} {naive:>13.3f} {overlap:>15.3f} {naive / overlap:>6.2f}× "
                  f"{max(spread(got[s]) for s in SCHEMES):>7.1%} {overrun:>8}")
        changes = [abs(medians["busy"][i] / medians["idle"][i] - 1) for i in range(3)]
        verdict = "holds" if max(changes) <= TOLERANCE else "MOVES"
        print(f"  {label}: busy vs idle changes step times and ratio by at most {max(changes):.1%} "
              f"→ {verdict} (tolerance ±{TOLERANCE:.0%})")
        if clock != "wall":
            ok = ok and max(changes) <= TOLERANCE
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
