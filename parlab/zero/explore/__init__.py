"""What chapter 02 (memory) runs: per-rank memory of DDP and ZeRO-1/2/3 beside the ZeRO paper's
formulas, bytes per stage, activation checkpointing's trade, ours beside PyTorch's, and the
checkpoint / kill / reshard / resume demo. `python -m parlab bench memory` uses the same functions.

Papers: Rajbhandari et al., "ZeRO", SC 2020; Zhao et al., "PyTorch FSDP", VLDB 2023; Chen et al.,
"Training Deep Nets with Sublinear Memory Cost", 2016; Liu & Jiang, "Dive into Big Model
Training", 2022.
"""

from __future__ import annotations

import statistics

import parlab
from parlab.core.cost import FP32_BYTES, round_up
from parlab.zero.cost import memory_formula, mixed_precision_formula, step_bytes
from parlab.zero.shard import FlatLayout

KINDS = ("params", "grads", "optimizer", "activations")


def stage_of(result) -> int:
    """The ZeRO stage a run sharded at, as its ranks report it (extras "stage"; 0: every state
    replicated, as in DDP and `single`), the stage the memory formulas take."""
    return result.outputs[0].extras.get("stage", 0)


def psi_of(result) -> int:
    return sum(v.numel() for v in result.state.values())


def memory_row(result, warmup: int = 1) -> dict:
    """One row: the largest measured bytes of each kind over ranks, the formula, the step time."""
    scheme, n = result.config.scheme, result.config.world_size
    psi = psi_of(result)
    mixed = result.config.precision != "fp32" and not scheme.startswith("torch-")  # FSDP2: 4+4+8
    formula = (mixed_precision_formula if mixed else memory_formula)(stage_of(result), psi, n)
    row = {"scheme": scheme + ("+ckpt" if result.config.checkpoint else ""), "world_size": n,
           "psi": psi}
    for kind in KINDS:
        row[kind] = max(m.get(kind, 0) for m in result.memory)
    row["states"] = row["params"] + row["grads"] + row["optimizer"]
    row["formula"] = int(sum(formula.values()))
    row["vs_formula"] = row["states"] / row["formula"]
    row["gathered_peak"] = max(m.get("gathered_peak", 0) for m in result.memory)
    row["step_ms"] = 1e3 * result.step_time(warmup)
    return row


def memory_table(schemes=("ddp-naive", "zero1", "zero2", "zero3"), world_sizes=(1, 2, 4),
                 steps: int = 3, **options):
    """Run every scheme at every world size; a DataFrame of measured memory and step time."""
    import pandas as pd

    rows = []
    for n in world_sizes:
        for scheme in schemes:
            rows.append(memory_row(parlab.run(scheme, world_size=n, steps=steps, **options)))
    return pd.DataFrame(rows)


def formula_lines(psi: int, world_size: int) -> list[str]:
    """Model-state bytes per rank for Ψ parameters on N ranks: ours (fp32 weights and gradients,
    Adam's two fp32 moments: 4 + 4 + 8) beside the ZeRO paper's mixed precision (fp16 weights and
    gradients, fp32 master + two moments: 2 + 2 + 12), so the paper's 16Ψ and 4Ψ + 12Ψ/N map to
    ours term by term."""
    lines = [f"{'':7s} {'fp32 + Adam (ours, 4+4+8)':>44s}   {'mixed precision (paper, 2+2+12)':>44s}"]
    sym32 = ("16Ψ", "8Ψ + 8Ψ/N", "4Ψ + 12Ψ/N", "16Ψ/N")
    sym16 = ("16Ψ", "4Ψ + 12Ψ/N", "2Ψ + 14Ψ/N", "16Ψ/N")
    for stage, name in enumerate(("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")):
        f32 = memory_formula(stage, psi, world_size)
        f16 = mixed_precision_formula(stage, psi, world_size)
        lines.append(f"{name:7s} {sym32[stage]:>12s} = {sum(f32.values()):>10,.0f} B "
                     f"(p {f32['params']:>8,.0f} g {f32['grads']:>8,.0f})   "
                     f"{sym16[stage]:>12s} = {sum(f16.values()):>10,.0f} B "
                     f"(p {f16['params']:>8,.0f} g {f16['grads']:>8,.0f})")
    return lines


def padding_report(world_size: int = 3, steps: int = 1, rank: int = 0) -> dict:
    """ZeRO-3 at a world size that pads the flat units: the padding of the whole units (all ranks
    together, `RunResult.memory`'s "padding"), one rank's share of it (1/N: each rank's chunk is
    1/N of the padded unit), and that rank's parameter bytes beside the formula Ψ·4/N — they differ
    by exactly that share. Printed and returned."""
    result = parlab.run("zero3", world_size=world_size, steps=steps)
    mem = result.memory[rank]
    form = memory_formula(3, psi_of(result), world_size)["params"]
    share, over = mem["padding"] / world_size, mem["params"] - form
    ok = abs(over - share) < 1e-6
    print(f"N={world_size}: padding of the whole flat units (all ranks together) {mem['padding']} B; "
          f"per rank (1/N of it) {share:.2f} B")
    print(f"rank {rank}'s params {mem['params']:,} B against the formula Ψ·4/N = {form:,.2f} B: "
          f"{over:.2f} B over — {'exactly its share of the padding' if ok else 'NOT its share'}")
    return {"result": result, "padding": mem["padding"], "per_rank": share, "over": over, "ok": ok}


def plot_memory(df, ax=None, kinds=("params", "grads", "optimizer"),
                title="measured model states per rank (black: the ZeRO formula)"):
    """Stacked bars of measured bytes per scheme and world size, the formula as a black mark."""
    from parlab.viz import stacked_bars

    rows = {f"{r.scheme}\nN={r.world_size}": {k: getattr(r, k) / 1e3 for k in kinds}
            for r in df.itertuples()}
    ax = stacked_bars(rows, ax=ax, ylabel="kB per rank (largest rank)", title=title)
    ax.plot(list(rows), [f / 1e3 for f in df["formula"]], "k_", markersize=30, mew=2)
    return ax


def bytes_per_stage(world_size: int = 4, steps: int = 2, **options) -> list[dict]:
    """Measured bytes each rank sends per step, beside the closed form, for DDP and each stage."""
    ddp = parlab.run("ddp-naive", world_size=world_size, steps=steps, **options)
    ddp_bytes = max(ddp.bytes_per_rank()) / steps
    rows = [{"scheme": "ddp-naive", "measured": ddp_bytes, "closed_form": None, "vs_ddp": 1.0}]
    for stage in (1, 2, 3):
        result = parlab.run(f"zero{stage}", world_size=world_size, steps=steps, **options)
        numels = [FlatLayout.from_meta(m).numel for m in result.outputs[0].extras["layouts"]]
        measured = max(result.bytes_per_rank()) / steps
        rows.append({"scheme": f"zero{stage}", "measured": measured,
                     "closed_form": step_bytes(stage, numels, world_size),
                     "vs_ddp": measured / ddp_bytes if ddp_bytes else float("nan")})
    return rows


def phase_bytes(result, rank: int = 0) -> dict:
    """Bytes `rank` sent per training step, by phase label (param-gather-fwd, ...): the run's
    totals divided by its number of steps (every step sends the same)."""
    out: dict = {}
    for r in result.ledger:
        if r["rank"] == rank and r["bytes_sent"]:
            out[r["phase"]] = out.get(r["phase"], 0) + r["bytes_sent"]
    steps = result.config.steps
    return {phase: total // steps for phase, total in out.items()}


def compute_spans(result, warmup: int = 1) -> dict:
    """{"forward": [...], "backward": [...]}: seconds of each step after warm-up on rank 0."""
    spans: dict = {"forward": [], "backward": []}
    for e in result.timeline:
        if e["rank"] == 0 and e["name"] in spans:
            spans[e["name"]].append(e["t1"] - e["t0"])
    return {k: v[warmup:] for k, v in spans.items()}


def compute_seconds(result, warmup: int = 1) -> list[float]:
    """Forward + backward seconds of each step after warm-up on rank 0 (timeline spans)."""
    spans = compute_spans(result, warmup)
    return [f + b for f, b in zip(spans["forward"], spans["backward"])]


def checkpointing_tradeoff(scheme: str = "zero3", world_size: int = 2, steps: int = 4,
                           clock: str = "A100", **options) -> dict:
    """Peak activations of `scheme` without and with activation checkpointing (Chen et al., 2016),
    and the compute time it costs on the paced `clock`: forward F and backward B of the single
    process, every operator priced on the accelerator's roofline (`parlab.core.clock`), the
    recomputed forward included, so the times are bit-reproducible.

    The closed form: recomputation adds one forward to the backward, (2F + B)/(F + B), which is
    4/3 only when B = 2F. The recompute R = B_ckpt − B is measured; it is the checkpointed blocks'
    forward, so R ≤ F (the embedding, final norm, head and loss are not recomputed)."""
    plain = parlab.run(scheme, world_size=world_size, steps=2, clock=clock, **options)
    recomputed = parlab.run(scheme, world_size=world_size, steps=2, checkpoint=True, clock=clock,
                            **options)
    spans = {ckpt: compute_spans(parlab.run("single", steps=steps, checkpoint=ckpt, clock=clock,
                                            **options)) for ckpt in (False, True)}
    act, act_ckpt = (max(m["activations"] for m in r.memory) for r in (plain, recomputed))
    f, b = (statistics.median(spans[False][k]) for k in ("forward", "backward"))
    f_ckpt, b_ckpt = (statistics.median(spans[True][k]) for k in ("forward", "backward"))
    t, t_ckpt = f + b, f_ckpt + b_ckpt
    return {"activations": act, "activations_ckpt": act_ckpt, "saved": 1 - act_ckpt / act,
            "clock": clock, "compute_ms": 1e3 * t, "compute_ms_ckpt": 1e3 * t_ckpt,
            "time_ratio": t_ckpt / t, "forward_ms": 1e3 * f, "forward_ms_ckpt": 1e3 * f_ckpt,
            "backward_ms": 1e3 * b, "backward_ms_ckpt": 1e3 * b_ckpt,
            "recompute_ms": 1e3 * (b_ckpt - b), "expected_ratio": (2 * f + b) / t}


def print_checkpointing(trade: dict, tolerance: float = 0.10) -> None:
    """The trade on the paced clock, the measured ratio beside (2F + B)/(F + B) from the run's
    own F and B and beside the textbook 4/3, with computed verdicts."""
    unit = f"paced {trade['clock']} time" if trade["clock"] != "wall" else "this CPU, raw"
    print(f"peak activations: {trade['activations']:,} B -> {trade['activations_ckpt']:,} B "
          f"({100 * trade['saved']:.0f}% saved)")
    print(f"forward + backward, one process ({unit}): {trade['compute_ms']:.4f} ms -> "
          f"{trade['compute_ms_ckpt']:.4f} ms: measured ratio {trade['time_ratio']:.3f}×")
    f, b, r = trade["forward_ms"], trade["backward_ms"], trade["recompute_ms"]
    model = trade["expected_ratio"]
    close = abs(trade["time_ratio"] / model - 1) <= tolerance
    print(f"F = {f:.4f} ms, B = {b:.4f} ms (B/F = {b / f:.2f}; the closed form 4/3 = 1.333× "
          f"assumes B/F = 2): one more forward predicts (2F + B)/(F + B) = {model:.3f}×; measured "
          f"within {100 * tolerance:.0f}% of it: {close}; measured vs 4/3: "
          f"{trade['time_ratio'] / (4 / 3):.3f}×")
    print(f"the recomputing backward took {trade['backward_ms_ckpt']:.4f} ms = B + R, recompute "
          f"R = {r:.4f} ms = {r / f:.2f} F; R <= F: {r <= f * (1 + 1e-12)} (only the blocks are "
          f"checkpointed: the {f - r:.4f} ms of embedding, final norm, head and loss in F are not "
          f"run again); forward unchanged by checkpointing: "
          f"{trade['forward_ms_ckpt'] == trade['forward_ms']}")


def checkpoint_demo(directory: str, before: int = 4, after: int = 2, steps: int = 4,
                    fail_at_step: int = 3, scheme: str = "zero3", **options) -> dict:
    """Train with a checkpoint every step, kill a rank at `fail_at_step`, restart from the last
    checkpoint at another world size, and compare with a run that never failed."""
    from parlab.core.launch import RankError
    from parlab.zero.checkpoint import Checkpoint
    from parlab.zero.checkpoint_integrity import latest

    clean = parlab.run(scheme, world_size=before, steps=steps, **options)
    error = None
    try:
        parlab.run(scheme, world_size=before, steps=steps, save_dir=directory, save_every=1,
                   fail_at_step=fail_at_step, fail_rank=before - 1, **options)
    except RankError as err:
        error = str(err).splitlines()[0]
    saved = Checkpoint(latest(directory))
    resumed = parlab.run(scheme, world_size=after, steps=steps, save_dir=directory, resume=True,
                         **options)
    return {"error": error, "checkpoint": saved.path.name, "saved_world_size": saved.world_size,
            "resumed_at_step": resumed.outputs[0].extras["first_step"], "world_size_after": after,
            "clean": clean, "resumed": resumed, "comparison": resumed.compare(clean)}


def panel(world_size: int = 2, stage: str = "zero3", checkpoint: str = "off",
          precision: str = "fp32") -> None:
    """Widget callback: one run; measured bytes per rank beside the formula (depends on N) of
    the precision (fp32: 4 + 4 + 8 bytes per parameter; bf16-mixed: the paper's 2 + 2 + 12)."""
    scheme = stage if stage.startswith("zero") else "ddp-naive"
    result = parlab.run(scheme, world_size=world_size, steps=2, checkpoint=checkpoint == "on",
                        precision=precision)
    row = memory_row(result, warmup=0)
    formula = (memory_formula if precision == "fp32" else mixed_precision_formula)(
        stage_of(result), row["psi"], world_size)
    print(f"{scheme} on {world_size} rank(s), Ψ = {row['psi']:,} parameters, checkpointing "
          f"{checkpoint}, {precision}")
    for r, mem in enumerate(result.memory):
        print(f"  rank {r}: params {mem['params']:>8,}  grads {mem['grads']:>8,}  optimizer "
              f"{mem['optimizer']:>8,}  activations {mem['activations']:>9,} B")
    print(f"  formula: params {formula['params']:>8,.0f}  grads {formula['grads']:>8,.0f}  "
          f"optimizer {formula['optimizer']:>8,.0f}")
    print(f"  bytes sent per step per rank: {max(result.bytes_per_rank()) / 2:,.0f}; "
          f"{result.compare(parlab.run('single', steps=2, precision=precision))}")


def predicted_comm_s(result, link, clock: str = "wall") -> float:
    """α-β prediction of one step's communication for a ZeRO run: each reduce-scatter and
    all-gather of a padded unit of P bytes costs (N-1)(α + P/(N·β)) (parlab.core.cost). Under a
    paced `clock` a link name means the real link (`parlab.core.clock.real_link`)."""
    from parlab.core import cost
    from parlab.core.clock import real_link
    from parlab.core.link import resolve

    link = resolve(link) if clock == "wall" else real_link(link, clock)
    n, stage = result.config.world_size, stage_of(result)
    numels = [FlatLayout.from_meta(m).numel for m in result.outputs[0].extras["layouts"]]
    collectives = 3 if stage == 3 else 2
    return sum(collectives * cost.reduce_scatter_time(FP32_BYTES * round_up(u, n), n, link.latency_s,
                                                      link.bandwidth_Bps) for u in numels)


def comm_seconds(result, warmup: int = 1) -> float:
    """Median over steps of the time collectives took, each counted on the rank that arrived
    last (the shortest duration over ranks: the others also waited for it to arrive)."""
    by_rank: dict = {}
    for r in result.ledger:
        by_rank.setdefault(r["rank"], []).append(r)
    per_step: dict = {}
    for same_op in zip(*by_rank.values()):  # the i-th collective of every rank
        step = same_op[0]["step"]
        if step is not None and step >= warmup:
            took = min(r["t_end"] - r["t_start"] for r in same_op)
            per_step[step] = per_step.get(step, 0.0) + took
    return statistics.median(per_step.values()) if per_step else 0.0


def link_comparison(world_size: int = 2, link: str = "1GbE", steps: int = 5,
                    schemes=("zero1", "zero3"), clock: str = "A100") -> list[dict]:
    """Communication time per step on a link, measured (ledger times; paced `clock` time, the
    real link) beside the α-β prediction of the unit collectives: ZeRO-3's 1.5× bytes become
    ≈1.5× the time."""
    rows = []
    for scheme in schemes:
        result = parlab.run(scheme, world_size=world_size, steps=steps, link=link, clock=clock)
        rows.append({"scheme": scheme, "link": link, "clock": clock,
                     "measured_ms": 1e3 * comm_seconds(result),
                     "predicted_ms": 1e3 * predicted_comm_s(result, link, clock)})
    return rows


def chapter_link(clock: str):
    """The link of the chapter's main runs: on a paced clock the clock's accelerator's own real
    NVLink generation (`parlab.core.clock.real_link`: NVLink 3 for the A100), on the wall clock
    none (this machine's loopback, raw)."""
    return None if clock == "wall" else "NVLink"
