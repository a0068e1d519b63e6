"""Command line: `python -m parlab list | run SCHEME ... | bench NAME ...`.

    python -m parlab list
    python -m parlab run ddp-naive --world-size 4 --steps 5 --link 1GbE --trace trace.json
    python -m parlab run ddp-overlap --world-size 4 --clock A100 --link NVLink   # paced time
    python -m parlab run ddp-naive -w 2 --option algo=ring --compare
    python -m parlab bench allreduce --world-sizes 2 4 --max-mb 64
"""

from __future__ import annotations

import argparse
import ast
import sys


def _option(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--option {text!r} must look like key=value")
    key, raw = text.split("=", 1)
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw  # a bare word: a string
    return key.replace("-", "_"), value


def _list(_args) -> int:
    import parlab

    rows = parlab.schemes()
    width = max(len(n) for n in rows)
    for name, info in rows.items():
        exact = "exact" if info.exact else "approx"
        opts = ", ".join(f"{k}={v!r}" for k, v in info.options.items())
        print(f"{name:<{width}}  {exact:<6}  {info.summary}" + (f"  [{opts}]" if opts else ""))
    return 0


def _check_trace(path: str) -> None:
    """A trace path that cannot be written fails now, not after the run."""
    from parlab.core.trace import check_trace_path

    check_trace_path(path, "--trace")


def _run(args) -> int:
    import parlab

    options = dict(args.option or [])
    if args.timeout is not None:
        options["timeout"] = args.timeout
    if args.clock is not None:
        options["clock"] = args.clock
    if args.trace:
        _check_trace(args.trace)
    bar = None
    try:
        from tqdm import tqdm

        from parlab.core.progress import mode
        bar = tqdm(total=args.steps, desc=f"{args.scheme} ×{args.world_size}", unit="step",
                   disable=args.steps < 20 or mode() is None, file=sys.stderr, leave=False)
    except ImportError:
        pass

    def progress(done, total):
        if bar is not None:
            bar.n = done
            bar.refresh()

    result = parlab.run(args.scheme, world_size=args.world_size, model=args.model,
                        steps=args.steps, seed=args.seed, link=args.link, progress=progress,
                        **options)
    if bar is not None:
        bar.close()
    print(result.summary())
    for rank, mem in enumerate(result.memory):
        print(f"  rank {rank} memory: " + ", ".join(f"{k} {v:,} B" for k, v in mem.items()))
    if args.trace:
        result.save_trace(args.trace)
        print(f"trace written to {args.trace} (open in ui.perfetto.dev or chrome://tracing)")
    if args.compare:
        reference = parlab.run("single", model=args.model, steps=args.steps, seed=args.seed,
                               **{k: v for k, v in options.items()
                                  if k in ("batch_size", "lr", "optimizer", "model_config",
                                           "precision", "loss_scale")})  # same precision
        comparison = result.compare(reference)
        print(comparison)
        return 0 if comparison.match else 1
    return 0


# The short names the benchmarks had before each chapter got its folder.
BENCH_ALIASES = {"allreduce": "core", "dp": "data_parallel", "memory": "zero",
                 "tp": "tensor_parallel", "pp": "pipeline", "cp": "context_parallel"}


def benchmarks() -> list[str]:
    """The chapters with a `bench.py`: `python -m parlab bench <slug>`."""
    import importlib.util

    from parlab.engine.runner import chapter_packages
    return [p for p in chapter_packages() if importlib.util.find_spec(f"parlab.{p}.bench")]


def _bench(args) -> int:
    import importlib

    if args.name == "all":  # every chapter's headline comparison in one table (issue 21)
        pipeline = importlib.import_module("parlab.pipeline.bench")
        return importlib.import_module("parlab.engine.bench_all").main(
            args.rest, sections={"pipeline": pipeline.headline_rows}) or 0
    if args.name == "clock":  # paced time on an idle and a busy machine (parlab.core.clock)
        return importlib.import_module("parlab.engine.bench_clock").main(args.rest) or 0
    if args.name == "scale":  # 1 to 16 ranks on paced A100 time beside the model (issue 34)
        return importlib.import_module("parlab.planner.scaling.bench_scale").main(args.rest) or 0
    if args.name == "whatif":  # MAD-Max's what-ifs across plans at a real size (issue 49)
        return importlib.import_module("parlab.planner.whatif").main(args.rest) or 0
    name = BENCH_ALIASES.get(args.name, args.name)
    if name not in benchmarks():
        raise SystemExit(f"unknown benchmark {args.name!r}; available: {', '.join(benchmarks())} "
                         f"(aliases: {', '.join(f'{a}={n}' for a, n in BENCH_ALIASES.items())}; "
                         "all: every chapter's headline; clock: paced time on a busy machine; "
                         "scale: strong/weak scaling; whatif: MAD-Max's what-ifs across plans)")
    return importlib.import_module(f"parlab.{name}.bench").main(args.rest) or 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the registered schemes").set_defaults(func=_list)
    run = sub.add_parser("run", help="train with one scheme and print a summary")
    run.add_argument("scheme")
    run.add_argument("-w", "--world-size", type=int, default=2)
    run.add_argument("--steps", type=int, default=5)
    run.add_argument("--model", default="gpt")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--link", default=None, help="loopback, 1GbE, 10GbE, 100Gb-IB, NVLink")
    run.add_argument("--clock", default=None,
                     help="wall (default: this CPU, raw) or paced time: A100, H100, V100")
    run.add_argument("--trace", default=None, help="write a Chrome/Perfetto trace JSON here")
    run.add_argument("--timeout", type=float, default=None,
                     help="seconds the whole run may take (default 300)")
    run.add_argument("--option", "-o", action="append", type=_option,
                     help="a scheme option key=value (repeatable), e.g. -o algo=ring")
    run.add_argument("--compare", action="store_true", help="also run 'single' and compare")
    run.set_defaults(func=_run)
    bench = sub.add_parser("bench", help="run a benchmark: python -m parlab bench NAME --help")
    bench.add_argument("name")
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(func=_bench)
    args = parser.parse_args(argv)
    from parlab.core.launch import RankError

    try:
        return args.func(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RankError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
