"""What notebook 11 runs for `hetero-tp`: uneven tensor-parallel shards by speed (Zhang et al.,
"HAP: SPMD DNN Training on Heterogeneous GPU Clusters with Automated Program Synthesis", EuroSys
2024): the split of heads / columns / positions, exactness against `single`, the uneven
collectives padded vs exact (bytes beside `cost.uneven_bytes`, time beside the α-β model), and
the step time of LP vs even shares beside `cost.tp_step_time`, with the diagnosis where the
measured ordering disagrees with the model.
"""

from __future__ import annotations

import math
import statistics
import time

import torch

import parlab
from parlab.core.launch import launch
from parlab.core.link import resolve
from parlab.engine.runner import make_config
from parlab.heterogeneous import cost, tp_shares
from parlab.heterogeneous.shares import SHARDINGS
from parlab.heterogeneous.uneven import VARIANTS, GatherUneven

SCALE = 0.125  # every device at 1/8 of a core, as in parlab.heterogeneous.explore (shared cores)


# ----------------------------------------------------------------------------- 1. the split
def split_table(world_size: int, speeds, fixed: float = 0.1, collective: str = "exact") -> dict:
    """Ratios and the heads / columns / positions of each rank under every sharding."""
    out = {}
    for sharding in SHARDINGS:
        cfg = make_config("hetero-tp", world_size=world_size, speeds=speeds, shard=sharding,
                          fixed=fixed, collective=collective)
        w = tp_shares.ratios(sharding, cost.speeds_of(cfg), fixed, cost.tp_kappa(cfg), collective)
        out[sharding] = split = cost.tp_split(cfg)
        print(f"{sharding:<13} w {[round(x, 3) for x in w]}  heads {split['heads']}  "
              f"columns {split['columns']}  positions {split['tokens']}")
    return out


# ----------------------------------------------------------------------------- 2. exact, bytes
def check_tp_exact(world_size: int, speeds, steps: int = 2, shardings=("even", "lp")) -> dict:
    """hetero-tp (each sharding, padded and exact collectives) against `single`, and each rank's
    bytes beside the closed form."""
    ref = parlab.run("single", steps=steps)
    results = {}
    for sharding in shardings:
        for collective in VARIANTS:
            r = parlab.run("hetero-tp", world_size=world_size, steps=steps, speeds=speeds,
                           shard=sharding, collective=collective)
            results[(sharding, collective)] = r
            predicted = cost.hetero_tp_prediction(r.config).bytes_sent
            print(f"{sharding:<5} {collective:<7} positions {r.outputs[0].extras['split']['tokens']}  "
                  f"match: {r.compare(ref).match}  bytes {r.bytes_per_rank()}  closed form {predicted}  "
                  f"equal: {r.bytes_per_rank() == predicted}")
    return results


# ----------------------------------------------------------------------------- 3. the collectives
def collective_rank(rank: int, world_size: int, sizes: list[int], inner: int, repeats: int) -> dict:
    """On each rank: all-gather (forward) + reduce-scatter (backward) of `GatherUneven`, padded and
    exact, on known data; checks the values, returns bytes sent per op and the median seconds."""
    from parlab.core.comm import Comm

    comm = Comm()
    total = sum(sizes)
    lo = sum(sizes[:rank])
    full = torch.arange(total * inner, dtype=torch.float32).view(1, total, inner)  # (1, S, inner)
    grad = torch.ones(1, total, inner)  # (1, S, inner) every rank's gradient
    out = {}
    for variant in VARIANTS:
        seconds = []
        for _ in range(repeats):
            comm.drop_records()
            shard = full[:, lo:lo + sizes[rank]].clone().requires_grad_()  # (1, S_r, inner)
            t0 = time.perf_counter()
            gathered = GatherUneven.apply(shard, comm, sizes, 1, variant)  # (1, S, inner)
            gathered.backward(grad)  # reduce-scatter: (1, S, inner) -> (1, S_r, inner)
            seconds.append(time.perf_counter() - t0)
        ok = torch.equal(gathered.detach(), full) and bool((shard.grad == world_size).all())
        sent = {op: sum(r["bytes_sent"] for r in comm.ledger.records if r["op"] in ops)
                for op, ops in (("all_gather", ("all_gather",)),
                                ("reduce_scatter", ("reduce_scatter", "send")))}
        out[variant] = {"ok": ok, "sent": sent, "seconds": statistics.median(seconds)}
    return out


def measure_collectives(sizes: list[int], inner: int = 4096, repeats: int = 5, link=None) -> list[dict]:
    """Padded vs exact uneven all-gather + reduce-scatter of row chunks `sizes` × `inner` fp32:
    bytes per rank (ledger beside `cost.uneven_bytes`) and time (measured beside k·α + max bytes/β
    on the link)."""
    n = len(sizes)
    per_rank = launch(collective_rank, n, sizes, inner, repeats, link=link)
    link_obj = resolve(link)
    rows = []
    for variant in VARIANTS:
        measured = [per_rank[r][variant]["sent"] for r in range(n)]
        closed = [{op: cost.uneven_bytes(op, variant, sizes, inner, r)
                   for op in ("all_gather", "reduce_scatter")} for r in range(n)]
        model_s = None
        if link_obj is not None and n > 1:
            model_s = sum(link_obj.cost(max(c[op] for c in closed), n - 1)
                          for op in ("all_gather", "reduce_scatter"))
        rows.append({"variant": variant, "ok": all(per_rank[r][variant]["ok"] for r in range(n)),
                     "sent": [sum(m.values()) for m in measured], "closed": [sum(c.values()) for c in closed],
                     "ms": 1e3 * max(per_rank[r][variant]["seconds"] for r in range(n)),
                     "model_ms": None if model_s is None else 1e3 * model_s})
    for row in rows:
        row.update(sizes=list(sizes), inner=inner, link=str(link_obj or "loopback"))
    return rows


def print_collective_bytes(rows: list[dict]) -> None:
    """Bytes each rank sent (all-gather + reduce-scatter), the ledger beside the closed form."""
    print(f"shards {rows[0]['sizes']} rows × {rows[0]['inner']} fp32: all-gather + reduce-scatter")
    for r in rows:
        print(f"  {r['variant']:<7} correct: {r['ok']}  bytes/rank {r['sent']}  closed form {r['closed']}  "
              f"equal: {r['sent'] == r['closed']}")
    saved = 1 - sum(rows[1]["sent"]) / max(1, sum(rows[0]["sent"]))
    busiest = 1 - max(rows[1]["sent"]) / max(1, max(rows[0]["sent"]))
    sizes, inner, n = rows[0]["sizes"], rows[0]["inner"], len(rows[0]["sizes"])
    per_op = {op: 1 - max(cost.uneven_bytes(op, "exact", sizes, inner, r) for r in range(n))
              / max(1, max(cost.uneven_bytes(op, "padded", sizes, inner, r) for r in range(n)))
              for op in ("all_gather", "reduce_scatter")}
    print(f"  exact sends {100 * saved:.0f}% fewer bytes in all, {100 * busiest:.0f}% fewer from the "
          "busiest rank over both ops; per op, the busiest sender (what sets a ring's time) sends "
          + ", ".join(f"{100 * v:.0f}% fewer in the {op.replace('_', '-')}" for op, v in per_op.items()))


def print_collective_times(rows: list[dict]) -> None:
    """Measured time (slowest rank, median) beside the α-β model of the busiest sender."""
    print(f"shards {rows[0]['sizes']} on {rows[0]['link']} — clock: this CPU, raw, on purpose (not the "
          "chapter's paced A100): the uneven collectives run for real over an emulated link, whose "
          "preset divides the real β so that bytes, not this CPU's per-message work, set the time:")
    for r in rows:
        model = "" if r["model_ms"] is None else f"  model {r['model_ms']:.2f} ms"
        print(f"  {r['variant']:<7} {r['ms']:.2f} ms{model}")
    ratio = rows[0]["ms"] / rows[1]["ms"]
    line = f"  padded / exact time {ratio:.2f}×"
    if rows[0]["model_ms"] is not None:
        modelled = rows[0]["model_ms"] / rows[1]["model_ms"]
        line += f" (model {modelled:.2f}×)"
        if (ratio > 1.1) != (modelled > 1.1):
            line += (" — measured and modelled disagree on whether exact is faster: the link's time is "
                     "not the whole op here (the hand-written ring's per-message CPU work is)")
        slow = rows[1]["ms"] / rows[1]["model_ms"]
        if slow > 1.15:
            line += (f"\n  exact took {slow:.2f}× its model: each ring step of the reduce-scatter waits for "
                     "its predecessor's message, so a large chunk delays the steps behind it; the "
                     "busiest-sender model counts bytes, not that chain")
    elif ratio < 1:
        line += (" — no emulated link: the bytes cost almost nothing on the loopback, and the exact "
                 "reduce-scatter's N−1 separate messages cost more CPU than padding saves")
    print(line)


# ----------------------------------------------------------------------------- 4. step time
def measure_tp_shardings(world_size: int, ratios, steps: int = 4, scale: float = SCALE,
                         collective: str = "exact", model_config=None, link=None,
                         fixed: float = 0.1, repeats: int = 1, shardings=SHARDINGS) -> list[dict]:
    """Step time of hetero-tp under each sharding (even first) beside `cost.tp_step_time`:
    `repeats` rounds of one run per sharding, interleaved (so a burst of load on the shared cores
    hits all of them), the median step of each."""
    speeds = [r * scale for r in ratios]
    times: dict[str, list[float]] = {s: [] for s in shardings}
    out = {}
    for _ in range(repeats):
        for sharding in shardings:
            r = parlab.run("hetero-tp", world_size=world_size, steps=steps, speeds=speeds,
                           shard=sharding, collective=collective, model_config=model_config,
                           link=link, fixed=fixed)
            times[sharding].append(r.step_time(warmup=1))
            split = r.outputs[0].extras["split"]
            out[sharding] = {"shard": sharding, "columns": split["columns"], "tokens": split["tokens"],
                             "work": [round(w, 3) for w in cost.work_shares(r.config.model_config, split)],
                             "model_ms": 1e3 * cost.tp_step_time(r.config, split, fixed),
                             "speeds": speeds, "fixed": fixed}
    rows = list(out.values())
    for row in rows:
        row["step_ms"] = 1e3 * statistics.median(times[row["shard"]])
    for row in rows:
        row["speedup"] = rows[0]["step_ms"] / row["step_ms"]
        row["model_speedup"] = rows[0]["model_ms"] / row["model_ms"]
    return rows


def print_tp_measurement(rows: list[dict]) -> None:
    """The table, then a diagnosis computed from the measurement where it disagrees with the model."""
    print(f"clock: this CPU, raw, on purpose (not the chapter's paced A100): every device at "
          f"{rows[0]['speeds'][0]:g} of a core × its speed ratio, so the ranks, which share this machine's "
          "cores, are paced by their emulated speeds; the model prices W at cost.CPU_FLOPS")
    print(f"{'shard':<13} {'MLP columns':<18} {'positions':<14} {'step ms':>8} {'model ms':>9} "
          f"{'vs even':>8} {'model':>7}")
    for r in rows:
        print(f"{r['shard']:<13} {str(r['columns']):<18} {str(r['tokens']):<14} {r['step_ms']:>8.1f} "
              f"{r['model_ms']:>9.1f} {r['speedup']:>7.2f}× {r['model_speedup']:>6.2f}×")
    print(diagnosis(rows))


def implied_fixed(rows: list[dict]) -> float:
    """The f (in units of W) whose modelled speedups over even, max_r (f + w_r)/s_r of even ÷ that
    of each sharding, best fit the measured ones (least squares of the logs, f on a 0.01 grid)."""
    speeds = rows[0]["speeds"]

    def step(f, work):
        return max((f + w) / s for w, s in zip(work, speeds))

    def error(f):
        return sum((math.log(r["speedup"]) - math.log(step(f, rows[0]["work"]) / step(f, r["work"]))) ** 2
                   for r in rows[1:])
    return min((i / 100 for i in range(0, 501)), key=error)


def diagnosis(rows: list[dict]) -> str:
    """Whether the measured ordering of the shardings is the model's, and what the measurement says
    about the gaps. Measured ÷ model per sharding: the same factor everywhere means the shares act
    as modelled and only the rate is off (W is flops ÷ F with F measured for the default tiny GPT;
    a wider model's matmuls run faster). The speedups themselves give f, the work that does not
    shrink with a rank's share (`implied_fixed`): larger than the model's f and the shares matter
    less than modelled (per-op overhead of a small model); smaller, and the LP, which trims the slow
    rank's share to pay for f/s_r, trims it too much."""
    measured = [r["shard"] for r in sorted(rows, key=lambda r: r["step_ms"])]
    modelled = [r["shard"] for r in sorted(rows, key=lambda r: r["model_ms"])]
    factors = [r["step_ms"] / r["model_ms"] for r in rows]
    fixed = rows[0]["fixed"]
    lines = [f"measured order (fastest first) {measured}; model {modelled}: "
             + ("the same" if measured == modelled else "they DISAGREE"),
             "measured ÷ model: " + ", ".join(f"{r['shard']} {k:.1f}×" for r, k in zip(rows, factors))]
    spread = max(factors) / min(factors)
    if spread < 1.25:
        achieved = cost.CPU_FLOPS / 1e9 / statistics.mean(factors)
        lines.append(f"one factor for every sharding (spread {spread:.2f}): only the rate is off, "
                     f"≈ {achieved:.2g} GFLOP/s achieved against the closed form's {cost.CPU_FLOPS / 1e9:g}")
    f_fit = implied_fixed(rows)
    lines.append(f"the measured speedups fit f ≈ {f_fit:.2f}·W of share-independent work per rank "
                 f"(the model and the LP assume f = {fixed:g})")
    if measured != modelled:
        if f_fit > 2 * fixed:
            why = ("more work than assumed does not shrink with the share (per-op overhead: a small "
                   "model), so every rank pays f/s_r whatever its share and shares matter less")
        elif f_fit < fixed / 2:
            why = ("less work than assumed is share-independent, so the LP, paying for f/s_r, took too "
                   "much from the slow rank; proportional shares are nearer the best here")
        else:
            why = "f is about as assumed: the rows are within the noise of the shared cores"
        lines.append("why they disagree: " + why)
    return "\n".join(lines)
