"""`python -m parlab bench cp`: context parallelism vs sequence length, and video serving vs halo.

Ring attention (Liu et al. 2023; zig-zag and contiguous splits, with and without the recomputing
backward), Ulysses (Jacobs et al. 2023), Llama 3's all-gather of K/V (`cp-allgather`, Dubey et al.
2024, §3.3.2), USP, Ulysses × ring (`cp-usp`, Fang & Zhao 2024: every u × r = cp whose u divides
the query and key/value heads, 1 < u < cp) and no CP, on the tiny GPT at each sequence length and
cp degree, in one run, on a paced clock (default: A100 time over the A100's NVLink 3): the
measured step (median after the first, the slowest rank) beside the serial α-β model
(`parlab.context_parallel.step_price`: counted compute + the closed form's messages, every one
blocking; the ring's sends may hide), attention and gradient bytes per rank per step (ledger, and
whether they equal the closed form), and peak activation memory per rank (ActivationMeter);
ratios are against the single process measured in the same run. Then the video denoiser served
with sequence parallelism and with latent parallelism (Wu et al. 2025) at several halos: bytes per
denoising step, time per step, error vs one process.

    python -m parlab bench cp --seq-lens 32 64 128 --cps 2 4 --steps 3 --out cp.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import parlab
from parlab.context_parallel.cost import sp_bytes
from parlab.context_parallel.explore.regime import real_link
from parlab.context_parallel.latent_parallel import relative_error, serve
from parlab.context_parallel.step_price import price
from parlab.context_parallel.usp import usp_problem
from parlab.context_parallel.video_denoiser import VideoConfig, sample
from parlab.core.progress import progress

# (key for --schemes, scheme, options, the row's name, one run per u × r split)
VARIANTS = (("ring", "cp-ring", {"layout": "zigzag"}, "cp-ring (zigzag)", False),
            ("ring-contiguous", "cp-ring", {"layout": "contiguous"}, "cp-ring (contiguous)", False),
            ("ring-recompute", "cp-ring", {"layout": "zigzag", "recompute": True},
             "cp-ring (zigzag, recompute)", False),
            ("ulysses", "cp-ulysses", {"layout": "contiguous"}, "cp-ulysses", False),
            ("allgather", "cp-allgather", {}, "cp-allgather", False),
            ("usp", "cp-usp", {}, "cp-usp", True))
KEYS = tuple(v[0] for v in VARIANTS)
TOLERANCE = 0.01  # paced step within 1% of [model − the ring's link time, model]


def _median_after_first(values: list[float]) -> float:
    return statistics.median(values[1:] if len(values) > 1 else values)


def usp_splits(cp: int, n_head: int, kv_heads: int, seq_len: int, wanted=None) -> list[int]:
    """USP's Ulysses degrees u for `cp` (ring r = cp/u): those of `wanted` (default: every u with
    1 < u < cp — u = 1 is the ring, u = cp Ulysses) that `usp_problem` accepts (u divides cp, the
    query and key/value heads; the sequence splits into 2·r zig-zag chunks of u parts)."""
    candidates = wanted or range(2, cp)
    return [u for u in candidates if cp % u == 0 and usp_problem(cp, u, n_head, kv_heads, seq_len)
            is None]


def variants(keys, cps, model_config: dict, ulysses=None) -> list[tuple]:
    """(name, scheme, options, cp) of every run the keys ask for at each cp: one cp-usp per valid
    u × r factorization, named by it."""
    from parlab import models

    g = models.model_config("gpt", model_config)
    out = []
    for key, scheme, options, name, per_split in VARIANTS:
        if key not in keys:
            continue
        for cp in cps:
            if not per_split:
                out.append((name, scheme, options, cp))
                continue
            for u in usp_splits(cp, g.n_head, g.kv_heads, g.block_size, ulysses):
                out.append((f"{name} (u={u} × r={cp // u})", scheme, {"ulysses": u}, cp))
    return out


def verdict(p: dict) -> str:
    """Whether the paced step lies where the model puts it: within `TOLERANCE` of [model − the
    ring's link time (every ring send hidden), model (none hidden)]."""
    lo, hi = p["model_s"] - p["ring_comm_s"], p["model_s"]
    ok = lo * (1 - TOLERANCE) <= p["paced_s"] <= hi * (1 + TOLERANCE)
    return "holds" if ok else "OUTSIDE"


def train_rows(seq_lens, cps, steps, batch_size, keys=KEYS, clock: str = "A100",
               link: str = "NVLink", n_head: int = 4, n_layer: int = 4, ulysses=None) -> list[dict]:
    """One row per sequence length × scheme × cp: the paced step beside `step_price.price`'s model,
    bytes (ledger and closed form), activation memory; first the single process at each length."""
    lk = real_link(link, clock)
    rows = []
    for T in progress(seq_lens, desc="training, per T"):
        config = {"block_size": T, "n_head": n_head, "n_layer": n_layer}
        base = parlab.run("single", steps=steps, model_config=config, batch_size=batch_size,
                          clock=clock)
        base_time = base.step_time(warmup=1)
        base_mem = base.memory[0]["activations"]
        rows.append({"T": T, "scheme": "no CP (single)", "cp": 1, "paced_ms": base_time * 1e3,
                     "model_ms": base_time * 1e3, "compute_ms": base_time * 1e3, "comm_ms": 0.0,
                     "hidden_ms": 0.0, "verdict": "-", "time_ratio": 1.0, "attn_bytes": 0,
                     "closed_form": "-", "grad_bytes": 0, "activations": base_mem,
                     "mem_ratio": 1.0, "clock": base.clock.label, "link": "-"})
        for name, scheme, options, cp in variants(keys, cps, config, ulysses):
            r = parlab.run(scheme, world_size=cp, cp=cp, steps=steps, model_config=config,
                           batch_size=batch_size, clock=clock, link=lk, **options)
            p = price(r)
            mem = max(m["activations"] for m in r.memory)
            rows.append({"T": T, "scheme": name, "cp": cp, "paced_ms": p["paced_s"] * 1e3,
                         "model_ms": p["model_s"] * 1e3, "compute_ms": p["compute_s"] * 1e3,
                         "comm_ms": p["comm_s"] * 1e3,
                         "hidden_ms": (p["model_s"] - p["paced_s"]) * 1e3, "verdict": verdict(p),
                         "time_ratio": p["paced_s"] / base_time, "attn_bytes": p["attn_bytes"],
                         "closed_form": "=" if p["attn_bytes"] == p["closed_attn_bytes"] else "≠",
                         "grad_bytes": max(r.bytes_per_rank(phase="grad-sync")) / steps,
                         "activations": mem, "mem_ratio": mem / base_mem,
                         "clock": r.clock.label, "link": str(r.config.link),
                         "ring_ms": p["ring_comm_s"] * 1e3, "ledger_comm_ms": p["ledger_comm_s"] * 1e3})
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
    parser.add_argument("--schemes", nargs="+", default=list(KEYS), choices=KEYS)
    parser.add_argument("--ulysses", type=int, nargs="+", default=None,
                        help="cp-usp's Ulysses degrees u (ring r = cp/u; default: every "
                             "1 < u < cp dividing cp and the heads)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--clock", default="A100", help="the paced accelerator (A100, H100, V100)")
    parser.add_argument("--link", default="NVLink",
                        help="a real link (parlab.core.link.REAL); NVLink: the accelerator's own")
    parser.add_argument("--halos", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--skip-video", action="store_true")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)

    print(f"== training: tiny GPT (n_head={args.n_head}, n_layer={args.n_layer}), per rank; "
          f"paced {args.clock} time over {real_link(args.link, args.clock)}; ratios vs no CP "
          "measured in this run; model = counted compute + closed-form messages, all blocking ==")
    train = train_rows(args.seq_lens, args.cps, args.steps, args.batch_size, args.schemes,
                       args.clock, args.link, args.n_head, args.n_layer, args.ulysses)
    ms = "{:.3f}".format
    _print(train, {"T": str, "scheme": str, "cp": str, "paced_ms": ms, "model_ms": ms,
                   "compute_ms": ms, "comm_ms": ms, "hidden_ms": ms, "verdict": str,
                   "time_ratio": "{:.2f}".format, "attn_bytes": "{:,.0f}".format,
                   "closed_form": str, "grad_bytes": "{:,.0f}".format,
                   "activations": "{:,}".format, "mem_ratio": "{:.2f}".format})
    cp_rows = [r for r in train if r["cp"] > 1]
    if cp_rows:
        held = sum(r["verdict"] == "holds" for r in cp_rows)
        exact = sum(r["closed_form"] == "=" for r in cp_rows)
        print(f"paced step within {TOLERANCE:.0%} of [model − the ring's link time, model]: "
              f"{held} of {len(cp_rows)} rows; attention bytes = closed form: {exact} of "
              f"{len(cp_rows)}; hidden = model − paced (at most the ring's sends can hide)")
    if not args.skip_video:
        print("\n== video serving: bytes per denoising step and error vs one process (this CPU, raw) ==")
        video = video_rows(args.cps, args.halos, VideoConfig())
        _print(video, {"cp": str, "mode": str, "halo": str, "bytes_per_step": "{:,.0f}".format,
                       "formula": "{:,.0f}".format, "step_ms": "{:.1f}".format,
                       "error": "{:.2e}".format, "vs_sp": "{:.3f}".format})
    else:
        video = []
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"train": train, "video": video}, f, indent=1)
        print(f"rows written to {args.out}")
    return 0
