"""`python -m parlab bench local_learning`: throughput, idle fraction and final loss of each
scheme against pp-1f1b at the same micro-batch count, measured in one sweep, at pp = 2 and 4, on
virtual time (`--clock A100`, parlab.core.clock) over NVLink; and the weight versions PipeDream
and 2BW stash per stage.

Papers: Belilovsky et al. (ICML 2020), Gomez et al. (JMLR 2022), Narayanan et al. (SOSP 2019,
ICML 2021). The model is the notebook's timing model (`explore.timing.TIMING_MODEL`, C = 128, T = 64),
wider than the default so that a stage's compute outweighs a message on NVLink. In virtual time
the step times are A100 ms and bit-reproducible on a shared machine; `--clock wall` shows
this CPU, raw (four ranks on two cores then wait for a core too).

    python -m parlab bench local_learning            # pp 2 and 4, NVLink, A100 time (~3 min)
    python -m parlab bench local_learning --quick    # pp 2
    python -m parlab bench local_learning --json out.json
"""

from __future__ import annotations

import argparse
import json

from parlab.core.progress import progress
from parlab.local_learning import cost
from parlab.local_learning.explore import timing as ex_timing

MODEL = ex_timing.TIMING_MODEL


def schemes_for(pp: int) -> tuple:
    out = [("pp-1f1b", {}), ("local", {}), ("interlocking", {"depth": 1})]
    if pp > 2:
        out.append(("interlocking", {"depth": 2}))
    return tuple(out + [("pipedream", {}), ("pipedream-2bw", {})])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench local_learning")
    parser.add_argument("--pp", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--links", nargs="+", default=[ex_timing.TIMING_LINK])
    parser.add_argument("--clock", default="A100", help="A100, H100, V100 (paced) or wall")
    parser.add_argument("--microbatches", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.pp, args.steps = [2], 3
    for name, value in (("--microbatches", args.microbatches), ("--steps", args.steps),
                        ("--batch", args.batch)):
        if value < 1:
            raise ValueError(f"{name}={value} must be >= 1")
    out = []
    for pp in progress(args.pp, desc="pipeline degrees"):
        for link in args.links:
            print(f"\npp={pp}, m={args.microbatches}, link={link}, batch {args.batch}, model {MODEL}")
            rows = ex_timing.compare_schemes(
                pp, steps=args.steps, model_config=MODEL, batch_size=args.batch,
                link=None if link == "loopback" else link, clock=args.clock,
                microbatches=args.microbatches, schemes=schemes_for(pp))
            ex_timing.explain_idle(rows, args.microbatches)
            ex_timing.lessons(rows, args.microbatches)
            for row in rows:
                r = row.pop("result")
                row.update(pp=pp, link=link, clock=r.clock.label,
                           samples_per_s=args.batch / row["step_s"])
                if row["scheme"].startswith("pipedream"):
                    row["stashed_versions"] = [o.extras["peak_versions"] for o in r.outputs]
                out.append(row)
            print(f"  closed forms: flushed idle (p−1)/(m+p−1) = "
                  f"{cost.one_f_one_b_idle(pp, args.microbatches):.1%}; never-flushed idle "
                  f"(p−1)/(steps·m+p−1) = {cost.decoupled_idle(pp, args.microbatches, args.steps):.1%}")
            for row in rows:
                if "stashed_versions" in row:
                    print(f"  {row['scheme']}: weight versions per stage {row['stashed_versions']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0
