"""Strong and weak scaling from 1 to 16 ranks on a named accelerator and link (issue 34).

The points: each dimension (dp as WFBP's ddp-overlap, ZeRO-3, tp, pp as 1F1B, a 3-D plan) cut n
ways on the tiny GPT, strong (global batch fixed) or weak (rows per data-parallel rank fixed), on
paced A100 time with NVLink inside a node of 8 and a second link between two nodes
(`parlab.core.topology.two_nodes`, chapter 11). Each point's measured step is printed beside the
model of `parlab.planner.scaling.step_model.predict_step`, and the state one rank holds beside its
closed form; `stops_paying` says where a dimension stops paying and why. The sweep and its report
are `parlab.planner.scaling.bench_scale` (`python -m parlab bench scale`).
"""

from __future__ import annotations

import math

from parlab.planner.scaling.step_model import predict_step

# ----------------------------------------------------------------------------- the scaling sweep
# One point of a sweep: a dimension at n ranks. Strong scaling keeps the global batch (STRONG_BATCH)
# and splits it; weak scaling keeps each rank's share (WEAK_ROWS rows per data-parallel rank, and a
# pipeline's microbatch size), so the global batch grows with the cluster.
DIMENSIONS = ("dp", "zero3", "tp", "pp", "3d")
STRONG_BATCH = 16
WEAK_ROWS = 2
NODE = 8  # accelerators per node: NVLink inside, the inter-node link between
PLANS_3D = {1: (1, 1, 1), 2: (2, 1, 1), 4: (1, 2, 2), 8: (2, 2, 2), 16: (4, 2, 2),
            32: (2, 8, 2), 64: (2, 8, 4)}  # dp, tp, pp (beyond 16: real presets, tp in a node)


def point_config(dim: str, n: int, mode: str = "strong", bucket_mb: float = 0.1,
                 preset: str | None = None) -> dict | None:
    """{scheme, batch_size, options, degrees} for dimension `dim` on n ranks, or None when the
    model — the default GPT (4 layers, 4 heads), or a real `preset` (parlab.models.presets) run
    shapes-only — cannot be cut n ways along it (tp divides the heads and stays inside a node,
    pp divides the layers)."""
    from parlab.models.presets import PRESETS

    if mode not in ("strong", "weak"):
        raise ValueError(f"mode={mode!r} must be 'strong' or 'weak'")
    if dim not in DIMENSIONS:
        raise ValueError(f"dimension {dim!r} must be one of {DIMENSIONS}")
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"preset={preset!r} must be one of {sorted(PRESETS)}")
    heads, layers = ((PRESETS[preset]["n_head"], PRESETS[preset]["n_layer"]) if preset
                     else (4, 4))
    dp, tp, pp = {"dp": (n, 1, 1), "zero3": (n, 1, 1), "tp": (1, n, 1), "pp": (1, 1, n),
                  "3d": PLANS_3D.get(n, (0, 0, 0))}[dim]
    if dp == 0 or tp > heads or pp > layers or (preset and (heads % tp or layers % pp
                                                            or tp > NODE)):
        return None
    batch = STRONG_BATCH if mode == "strong" else WEAK_ROWS * n
    if batch % dp:
        return None
    micro = 2 * pp if pp > 1 else 1  # microbatches: twice the stages (bubble (p-1)/(m+p-1))
    if (batch // dp) % micro:
        return None
    real = {"model": preset, "shapes_only": True} if preset else {}
    if n == 1:
        return {"scheme": "single", "batch_size": batch, "options": real, "degrees": (1, 1, 1)}
    scheme, options = {
        "dp": ("ddp-overlap", {"bucket_mb": bucket_mb}),
        "zero3": ("zero3", {}),
        "tp": ("tp", {"tp": tp}),
        "pp": ("pp-1f1b", {"pp": pp, "microbatches": micro}),
        "3d": ("nd", {"dp": dp, "tp": tp, "pp": pp, "microbatches": micro}),
    }[dim]
    return {"scheme": scheme, "batch_size": batch, "options": {**options, **real},
            "degrees": (dp, tp, pp)}


def cluster_link(n: int, intra: str = "NVLink", inter: str = "100Gb-IB"):
    """`intra` inside a node of NODE accelerators; two nodes joined by `inter` beyond NODE."""
    from parlab.core.topology import two_nodes

    return intra if n <= NODE else two_nodes(n, intra=intra, inter=inter, first=NODE)


def run_point(dim: str, n: int, mode: str = "strong", intra: str = "NVLink",
              inter: str = "100Gb-IB", steps: int = 2, clock: str = "A100",
              bucket_mb: float = 0.1, preset: str | None = None):
    """One paced run of the point (None where the dimension cannot reach n); with a `preset`,
    shapes-only at that model's shapes."""
    import parlab

    spec = point_config(dim, n, mode, bucket_mb, preset)
    if spec is None:
        return None
    # a real preset's ranks spend minutes in fake-tensor dispatch when 64 share two cores
    timeout = {"timeout": 3600.0} if preset else {}
    return parlab.run(spec["scheme"], world_size=n, steps=steps, batch_size=spec["batch_size"],
                      clock=clock, link=cluster_link(n, intra, inter), **spec["options"], **timeout)


def state_bytes(r) -> int:
    """Model state the busiest rank holds (parameters + gradients + optimizer state), measured."""
    return max(sum(v for k, v in m.items() if k in ("params", "grads", "optimizer"))
               for m in r.memory)


def predicted_state_bytes(dim: str, degrees: tuple, n: int, preset: str | None = None) -> int:
    """Closed form of the busiest rank's model state from the chapters' own forms: ZeRO-3's
    `parlab.zero.cost.memory_formula` over the whole model and n ranks; otherwise DDP's (stage 0,
    16 bytes a parameter: fp32 weight, gradient, AdamW's two moments) over what the rank holds —
    the parameters `parlab.tensor_parallel.cost.replicated_numels` names whole, the blocks'
    matrices / tp, and of the pipeline one stage's blocks and its end's embeddings (the first
    stage's wte + wpe, the last's tied wte + ln_f: the larger; chapter 04's split)."""
    from fractions import Fraction

    from parlab.core.shapes import shapes
    from parlab.engine.loop import build_model
    from parlab.engine.runner import make_config
    from parlab.tensor_parallel.cost import replicated_numels
    from parlab.zero.cost import memory_formula

    with shapes():  # a real preset's parameters, counted without their bytes
        model = build_model(make_config("single", **({"model": preset, "clock": "A100",
                                                         "shapes_only": True} if preset else {})))
    cfg, total = model.config, sum(p.numel() for p in model.parameters())
    if dim == "zero3" and n > 1:
        return math.ceil(sum(memory_formula(3, Fraction(total), n).values()))
    dp, tp, pp = degrees
    layers, replicated = cfg.n_layer, replicated_numels(cfg)
    wte, wpe, ln_f = replicated[0], replicated[1], sum(replicated[-2:])
    norms = (sum(replicated) - wte - wpe - ln_f) // layers  # a block's ln_1, ln_2: whole on every rank
    block = (total - sum(replicated)) // layers // tp + norms  # its matrices / tp
    ends = wte + wpe + ln_f if pp == 1 else wte + max(wpe, ln_f)
    held = ends + block * (layers // pp)
    return int(sum(memory_formula(0, held, 1).values()))


def measure_point(dim: str, n: int, mode: str = "strong", **kw) -> dict | None:
    """Run the point and put it beside the model: accelerator µs per step (measured and
    predicted), waiting per step (exposed communication, and the bubble), state memory per rank."""
    r = run_point(dim, n, mode, **kw)
    if r is None:
        return None
    preset = kw.get("preset")
    spec = point_config(dim, n, mode, kw.get("bucket_mb", 0.1), preset)
    pred = predict_step(r, step=1)
    clock = r.clock  # virtual time: step times are the accelerator's seconds
    measured = r.step_times[1] if len(r.step_times) > 1 else r.step_times[0]
    mem = state_bytes(r)
    mem_pred = predicted_state_bytes(dim, spec["degrees"], n, preset)
    return {"dim": dim, "mode": mode, "n": n, "scheme": spec["scheme"],
            "degrees": spec["degrees"], "batch": spec["batch_size"],
            "step_us": measured * 1e6, "pred_us": pred["step_s"] * 1e6,
            "error": pred["step_s"] / measured - 1, "model": pred["model"],
            "wait_us": pred["measured_wait_s"] * 1e6, "pred_wait_us": pred["wait_s"] * 1e6,
            "state_B": mem, "pred_state_B": mem_pred, "clock": clock.label,
            "wall_s": r.wall_s}


def with_efficiency(rows: list[dict]) -> list[dict]:
    """Throughput (samples per accelerator second) and efficiency against the 1-rank point of the
    same dimension and mode, measured and predicted: strong T1/(n·Tn), weak (B_n/T_n)/(n·B_1/T_1)."""
    base = {(r["dim"], r["mode"]): r for r in rows if r["n"] == 1}
    for r in rows:
        b = base.get((r["dim"], r["mode"]))
        r["throughput"] = r["batch"] / (r["step_us"] * 1e-6)
        r["pred_throughput"] = r["batch"] / (r["pred_us"] * 1e-6)
        if b is None:
            r["eff"] = r["pred_eff"] = float("nan")
            continue
        r["eff"] = r["throughput"] / (r["n"] * b["throughput"])
        r["pred_eff"] = r["pred_throughput"] / (r["n"] * b["pred_throughput"])
    return rows


def stops_paying(rows: list[dict]) -> list[str]:
    """For each dimension and mode: the first n where doubling the ranks no longer raises the
    throughput by half of what perfect scaling would (efficiency of the step < 75%), and why:
    the share of the step that is waiting (communication that does not shrink, or the bubble),
    or, in strong scaling, compute per rank that does not shrink with the rank's share of the
    batch (a launch-bound model: operators cost their launch however few rows they touch)."""
    lines = []
    for dim in DIMENSIONS:
        for mode in ("strong", "weak"):
            pts = sorted((r for r in rows if r["dim"] == dim and r["mode"] == mode),
                         key=lambda r: r["n"])
            if len(pts) < 2:
                continue
            stop = None
            for a, b in zip(pts, pts[1:]):
                gain = b["throughput"] / a["throughput"]
                if gain < 1 + 0.5 * (b["n"] / a["n"] - 1):
                    stop = (a, b, gain)
                    break
            if stop is None:
                lines.append(f"{dim:>5} {mode:<6}: still pays up to {pts[-1]['n']} ranks "
                             f"(efficiency {pts[-1]['eff']:.0%})")
                continue
            a, b, gain = stop
            share = b["wait_us"] / b["step_us"]
            # compute per rank (step less waiting): strong scaling should cut it by a / b
            shrink = (b["step_us"] - b["wait_us"]) / max(a["step_us"] - a["wait_us"], 1e-12)
            why = ("the bubble and waiting on stages" if b["degrees"][2] > 1 and dim == "pp" else
                   "communication α (rounds grow with n) and bytes that do not shrink")
            if mode == "strong" and shrink > 0.75:
                why = (f"compute per rank ×{shrink:.2f} from {a['n']} to {b['n']} ranks (ideal "
                       f"×{a['n'] / b['n']:.2f}): the model is launch-bound on the accelerator, its "
                       "time is operators × launch cost whatever share of the batch a rank gets")
            if b["n"] > NODE >= a["n"]:
                why = "the step crosses the inter-node link: " + why
            lines.append(f"{dim:>5} {mode:<6}: stops paying at {a['n']}→{b['n']} ranks "
                         f"(throughput ×{gain:.2f} for ×{b['n'] // a['n']} ranks; {share:.0%} of the "
                         f"step is waiting: {why})")
    return lines


def format_table(rows: list[dict], unit: str = "µs") -> str:
    """The sweep's table; times in paced `unit` ("µs" or "ms" of the run's accelerator)."""
    k = {"µs": 1.0, "ms": 1e-3}[unit]
    d = 1 if k == 1 else 4  # decimals
    head = (f"{'dim':>5} {'mode':<6} {'n':>3} {'scheme':<12} {'B':>3} {'step ' + unit:>8} {'model':>8} "
            f"{'err':>6} {'samples/s':>10} {'eff':>5} {'model':>5} {'wait ' + unit:>8} {'model':>8} "
            f"{'state KiB':>9} {'model':>7}")
    out = [head]
    for r in rows:
        out.append(f"{r['dim']:>5} {r['mode']:<6} {r['n']:>3} {r['scheme']:<12} {r['batch']:>3} "
                   f"{k * r['step_us']:8.{d}f} {k * r['pred_us']:8.{d}f} "
                   f"{r['error']:+6.1%} "
                   f"{r['throughput']:10.3g} {r['eff']:5.0%} {r['pred_eff']:5.0%} "
                   f"{k * r['wait_us']:8.{d}f} {k * r['pred_wait_us']:8.{d}f} "
                   f"{r['state_B'] / 1024:9.0f} {r['pred_state_B'] / 1024:7.0f}")
    return "\n".join(out)
