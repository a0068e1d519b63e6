"""`python -m parlab bench cp`: context parallelism vs sequence length, and video serving vs halo.

Ring attention (Liu et al. 2023; zig-zag and contiguous splits), Ulysses (Jacobs et al. 2023)
and no CP, on the tiny GPT at each sequence length and cp degree, in one run: step time (median
over steps after the first, the slowest rank), attention and gradient bytes per rank per step
(ledger), and peak activation memory per rank (ActivationMeter); ratios are against the single
process measured in the same run. Then the video denoiser served with sequence parallelism and
with latent parallelism (Wu et al. 2025) at several halos: bytes per denoising step, time per
step, error vs one process.

    python -m parlab bench cp --seq-lens 32 64 128 --cps 2 4 --steps 4 --out cp.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import parlab
from parlab.context_parallel.cost import sp_bytes
from parlab.context_parallel.latent_parallel import relative_error, serve
from parlab.context_parallel.video_denoiser import VideoConfig, sample
from parlab.core.progress import progress


def _median_after_first(values: list[float]) -> float:
    return statistics.median(values[1:] if len(values) > 1 else values)


def train_rows(seq_lens, cps, steps, batch_size) -> list[dict]:
    rows = []
    for T in progress(seq_lens, desc="training, per T"):
        config = {"block_size": T}
        base = parlab.run("single", steps=steps, model_config=config, batch_size=batch_size)
        base_time = base.step_time(warmup=1)
        base_mem = base.memory[0]["activations"]
        rows.append({"T": T, "scheme": "no CP (single)", "cp": 1, "step_ms": base_time * 1e3,
                     "time_ratio": 1.0, "attn_bytes": 0, "grad_bytes": 0,
                     "activations": base_mem, "mem_ratio": 1.0})
        for scheme, layout, extra, name in (  # the ring's rows name its layout
                ("cp-ring", "zigzag", {}, "cp-ring (zigzag)"),
                ("cp-ring", "contiguous", {}, "cp-ring (contiguous)"),
                ("cp-ring", "zigzag", {"recompute": True}, "cp-ring (zigzag, recompute)"),
                ("cp-ulysses", "contiguous", {}, "cp-ulysses")):
            for cp in cps:
                r = parlab.run(scheme, world_size=cp, cp=cp, steps=steps, model_config=config,
                               batch_size=batch_size, layout=layout, **extra)
                t = r.step_time(warmup=1)
                attn = max(a + b for a, b in zip(r.bytes_per_rank(phase="cp-forward"),
                                                 r.bytes_per_rank(phase="cp-backward"))) / steps
                mem = max(m["activations"] for m in r.memory)
                rows.append({"T": T, "scheme": name, "cp": cp, "step_ms": t * 1e3,
                             "time_ratio": t / base_time, "attn_bytes": attn,
                             "grad_bytes": max(r.bytes_per_rank(phase="grad-sync")) / steps,
                             "activations": mem, "mem_ratio": mem / base_mem})
    return rows


def video_rows(cps, halos, cfg: VideoConfig) -> list[dict]:
    ref = sample(cfg)
    rows = []
    for cp in progress(cps, desc="video, per cp"):
        sp = {}
        for method in ("ring", "ulysses"):
            r = serve("sp", cfg, cp, method=method)
            sp[method] = max(r.bytes_per_step())
            rows.append({"cp": cp, "mode": f"sp-{method}", "halo": "-",
                         "bytes_per_step": sp[method], "formula": sp_bytes(cfg, cp, method),
                         "step_ms": 1e3 * max(_median_after_first(s) for s in r.step_s),
                         "error": relative_error(r.output, ref), "vs_sp": 1.0})
        for h in halos:
            r = serve("lp", cfg, cp, halo=h)
            b = max(r.bytes_per_step())
            rows.append({"cp": cp, "mode": "lp", "halo": h, "bytes_per_step": b, "formula": "",
                         "step_ms": 1e3 * max(_median_after_first(s) for s in r.step_s),
                         "error": relative_error(r.output, ref),
                         "vs_sp": b / min(sp.values())})
    return rows


def _print(rows: list[dict], formats: dict) -> None:
    keys = list(formats)
    cells = [[formats[k](row[k]) if isinstance(row[k], (int, float)) else str(row[k])
              for k in keys] for row in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    print("  ".join(k.rjust(w) for k, w in zip(keys, widths)))
    for c in cells:
        print("  ".join(x.rjust(w) for x, w in zip(c, widths)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench cp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--cps", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--halos", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)

    print("== training: tiny GPT, per rank, ratios vs no CP measured in this run ==")
    train = train_rows(args.seq_lens, args.cps, args.steps, args.batch_size)
    _print(train, {"T": str, "scheme": str, "cp": str, "step_ms": "{:.1f}".format,
                   "time_ratio": "{:.2f}".format, "attn_bytes": "{:,.0f}".format,
                   "grad_bytes": "{:,.0f}".format, "activations": "{:,}".format,
                   "mem_ratio": "{:.2f}".format})
    print("\n== video serving: bytes per denoising step and error vs one process ==")
    video = video_rows(args.cps, args.halos, VideoConfig())
    _print(video, {"cp": str, "mode": str, "halo": str, "bytes_per_step": "{:,.0f}".format,
                   "formula": "{:,.0f}".format, "step_ms": "{:.1f}".format,
                   "error": "{:.2e}".format, "vs_sp": "{:.3f}".format})
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"train": train, "video": video}, f, indent=1)
        print(f"rows written to {args.out}")
    return 0
