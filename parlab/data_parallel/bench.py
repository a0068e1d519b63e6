"""`python -m parlab bench dp`: step time of every data-parallel variant, side by side.

For each world size and link, every variant trains the same model on the same batches; the step
time is the median, over the steps after warm-up, of the time between consecutive forward starts
on a rank (the slowest rank counts), then the median over `--repeats` interleaved rounds. Ratios to
`torch-ddp` and to `ddp-naive` come from the same round-robin, so machine noise hits all alike.
The exposed-communication fraction is the share of each step a rank spent blocked in `wait()`
(MAD-Max, ISCA 2024: 14-32% of GPU hours in production are exactly this). Beside each measurement
stands the α-β prediction of `parlab.data_parallel.cost` from the measured compute of `ddp-naive`.

`torch-ddp` uses PyTorch's own gloo all-reduce on loopback; an emulated link cannot delay that, so
on emulated links it runs with the parlab comm hook (DDP's buckets and hooks, our Comm).
"""

from __future__ import annotations

import argparse
import json
import statistics

from parlab.core.progress import progress

VARIANTS = ["ddp-naive", "ddp-bucketed", "ddp-overlap", "ddp-priority", "dear", "torch-ddp"]


def forward_starts(events: list[dict], rank: int) -> list[float]:
    """When each step's first forward began on `rank` (a forward may be cut into segments)."""
    first: dict[int, float] = {}
    for e in events:
        if e["rank"] == rank and e["name"] == "forward":
            step = e.get("args", {}).get("step")
            first[step] = min(first.get(step, e["t0"]), e["t0"])
    return [first[s] for s in sorted(first)]


def _time_all_reduce(rank, world_size, sizes, repeats):
    from parlab.core.comm import Comm
    from parlab.core.timing import all_reduce_seconds

    comm = Comm(link=None)  # calibrates the bare loopback, whatever link the launch was given
    medians = []
    for numel in sizes:
        times = all_reduce_seconds(comm, numel, repeats)
        medians.append(sorted(times)[len(times) // 2])
    return medians


def measure_alpha_beta(world_size: int, sizes=(256, 16384, 131072), repeats: int = 7):
    """Fit α-β of gloo's own all-reduce on this machine now (`parlab.core.cost.fit_alpha_beta`).

    The result is what loopback costs per message: the floor under every emulated link.
    """
    from parlab.core import cost as core_cost
    from parlab.core.launch import launch

    if world_size == 1:
        return core_cost.AlphaBeta(0.0, float("inf"), "ring", 1)
    per_rank = launch(_time_all_reduce, world_size, list(sizes), repeats)
    seconds = [max(column) for column in zip(*per_rank)]
    return core_cost.fit_alpha_beta([4 * s for s in sizes], seconds, world_size, "ring")


def exposed_fraction(result, warmup: int) -> float:
    """Share of the measured steps' wall time the ranks spent blocked on communication."""
    fractions = []
    for rank in range(result.config.world_size):
        events = [e for e in result.timeline if e["rank"] == rank]
        starts = forward_starts(events, rank)
        t0, t1 = starts[warmup], starts[-1]
        waited = sum(min(e["t1"], t1) - max(e["t0"], t0) for e in events
                     if e["kind"] == "wait" and e["t1"] > t0 and e["t0"] < t1)
        fractions.append(waited / (t1 - t0))
    return statistics.mean(fractions)


def compute_profile(result, warmup: int) -> tuple[float, float, float]:
    """Median forward, backward and optimizer seconds per step on rank 0 (spans of the timeline)."""
    out = []
    for name in ("forward", "backward", "optimizer"):
        per_step: dict = {}
        for e in result.timeline:
            if e["rank"] == 0 and e["name"] == name:
                step = e.get("args", {}).get("step", len(per_step))
                per_step[step] = per_step.get(step, 0.0) + e["t1"] - e["t0"]
        spans = [per_step[s] for s in sorted(per_step, key=lambda s: (s is None, s))]
        out.append(statistics.median(spans[warmup:] or spans))
    return tuple(out)


def emulated_link(link: str, world_size: int, args):
    """None for loopback; with --accelerator, the real link as that accelerator sees it from this
    machine's compute rate on the model at the per-rank batch (parlab.core.link.faithful); else the
    preset."""
    import parlab
    from parlab.core.link import REAL, achieved_flops, faithful

    if link == "loopback":
        return None
    if args.accelerator and link in REAL:
        ref = parlab.run("single", model=args.model, steps=3,
                         batch_size=max(args.batch_size // world_size, 1))
        return faithful(link, achieved_flops(ref), args.accelerator)
    return link


def measure(world_size: int, link: str, args) -> list[dict]:
    import parlab
    from parlab.core.link import resolve
    from parlab.data_parallel import cost as dp_cost
    from parlab.engine.registry import get_scheme

    emulated = emulated_link(link, world_size, args)
    if emulated is not None and not isinstance(emulated, str):
        print(f"  N={world_size}: {emulated}", flush=True)
    common = dict(world_size=world_size, model=args.model, steps=args.warmup + args.steps + 1,
                  batch_size=args.batch_size, link=emulated)
    samples = {v: [] for v in VARIANTS}
    exposed = {v: [] for v in VARIANTS}
    naive = None
    for _ in range(args.repeats):
        for variant in VARIANTS:
            options = {}
            if "comm" in get_scheme(variant).options:  # PyTorch's own all-reduce or ours
                options["comm"] = "torch" if link == "loopback" else "parlab"
            result = parlab.run(variant, **common, **options)
            samples[variant].append(result.step_time(warmup=args.warmup))
            exposed[variant].append(exposed_fraction(result, args.warmup))
            if variant == "ddp-naive":
                naive = result
    t_f, t_b, t_o = compute_profile(naive, args.warmup)
    numels = [v.numel() for v in naive.state.values()]
    resolved = resolve(emulated)
    gloo = measure_alpha_beta(world_size)
    floor = (gloo.alpha, gloo.beta)
    alpha, beta = (resolved.latency_s, resolved.bandwidth_Bps) if resolved is not None else floor
    step = {v: statistics.median(s) for v, s in samples.items()}
    rows = []
    for variant in VARIANTS:
        kind = get_scheme(variant).modelled_as or variant
        predicted = dp_cost.predict_step_time(kind, numels, world_size, t_f, t_b, t_o, alpha, beta,
                                              floor)
        label = f"{link}@{args.accelerator}" if args.accelerator and link != "loopback" else link
        rows.append({"world_size": world_size, "link": label, "variant": variant,
                     "step_ms": step[variant] * 1e3, "vs_torch_ddp": step[variant] / step["torch-ddp"],
                     "naive_speedup": step["ddp-naive"] / step[variant],
                     "exposed": statistics.median(exposed[variant]),
                     "predicted_ms": predicted["step_s"] * 1e3,
                     "samples_ms": [s * 1e3 for s in samples[variant]]})
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'N':>2} {'link':<12} {'variant':<13} {'step ms':>8} {'/torch-ddp':>10} "
          f"{'naive/x':>8} {'exposed':>8} {'predicted':>10}")
    for r in rows:
        print(f"{r['world_size']:>2} {r['link']:<12} {r['variant']:<13} {r['step_ms']:>8.1f} "
              f"{r['vs_torch_ddp']:>10.2f} {r['naive_speedup']:>8.2f} {r['exposed']:>8.0%} "
              f"{r['predicted_ms']:>9.1f}")


def plot(rows: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["world_size"], r["link"]) for r in rows})
    fig, axes = plt.subplots(1, len(groups), figsize=(4.5 * len(groups), 3.8), squeeze=False)
    for ax, (n, link) in zip(axes[0], groups):
        mine = [r for r in rows if (r["world_size"], r["link"]) == (n, link)]
        x = range(len(mine))
        ax.bar(x, [r["step_ms"] for r in mine], label="measured")
        ax.plot(x, [r["predicted_ms"] for r in mine], "k_", markersize=18, label="α-β predicted")
        ax.set_xticks(list(x), [r["variant"] for r in mine], rotation=45, ha="right")
        ax.set_title(f"N={n}, {link}")
        ax.set_ylabel("step time (ms)")
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench dp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--links", nargs="+", default=["loopback", "1GbE"])
    parser.add_argument("--accelerator", default=None,
                        help="dilate real links (NVLink, 100Gb-IB, 10GbE, 1GbE) to this accelerator's "
                             "compute ratio (V100, A100, H100; parlab.core.link.faithful) instead of "
                             "the fixed presets")
    parser.add_argument("--model", default="gpt")
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--steps", type=int, default=8, help="measured steps per run")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds per variant")
    parser.add_argument("--plot", default=None, help="save a bar chart here (png)")
    parser.add_argument("--json", default=None, help="save the rows here")
    args = parser.parse_args(argv)
    rows = []
    for n in progress(args.world_sizes, desc="world sizes"):
        for link in args.links:
            rows += measure(n, link, args)
    print_table(rows)
    print("median of steps after warm-up, median over interleaved rounds; this machine is shared "
          "and noisy — compare ratios within a block, not across runs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.plot:
        plot(rows, args.plot)
    return 0
