"""What notebook 11 runs: the straggler on a timeline, shares by speed, HAP's LP written out and
solved, exactness of weighted shards, bytes vs the closed form, step time vs the model, two nodes,
backup workers and the widget's callback (Zhang et al., "HAP", EuroSys 2024; Chen et al.,
"Revisiting Distributed Synchronous SGD", 2016). The exercises: `exercises`.
"""

from __future__ import annotations

import parlab
from parlab.core import topology
from parlab.core.link import ACCELERATORS, cpu_flops_line
from parlab.engine.runner import make_config
from parlab.heterogeneous import cost, shares
from parlab.heterogeneous.schemes import FIXED_ROWS

# Every emulated device runs at SCALE of one core here: N ranks share this machine's 2 cores with
# other work, so a rank at speed 1 would be slowed by its neighbours' compute, not by its own speed;
# at 1/8 the emulated waits dominate and the cluster's ratios (1:1:1:0.25) are what the clock shows.
SCALE = 0.125


def slow_speeds(world_size: int, pattern: str = "one slow", scale: float = SCALE) -> list[float]:
    """Speeds of `world_size` ranks, times `scale`: "equal", "one slow" (the last at 1/4 of the
    others) or "halves" (1, 1/2, 1/4, ...)."""
    if pattern == "equal":
        ratios = [1.0] * world_size
    elif pattern == "halves":
        ratios = [0.5 ** r for r in range(world_size)]
    else:
        ratios = [1.0] * (world_size - 1) + [0.25]
    return [r * scale for r in ratios]


# ----------------------------------------------------------------------------- 1. the straggler
def idle_per_rank(result, warmup: int = 1) -> list[float]:
    """Seconds per step each rank spent blocked in communication (its ledger ops, issue to
    completion; every op here is synchronous), over the steps after `warmup`: a fast rank waiting
    for a slow one in the all-reduce shows here."""
    n, steps = result.config.world_size, result.config.steps
    first = min(warmup, steps - 1)
    idle = [0.0] * n
    for record in result.ledger:
        if record["step"] is not None and record["step"] >= first:
            idle[record["rank"]] += record["t_end"] - record["t_start"]
    return [t / (steps - first) for t in idle]


def draw_straggler(world_size: int, steps: int = 3, pattern: str = "one slow", clock: str = "A100"):
    """`hetero-dp` with even shares and one slow rank: its timeline, and the others' idle time."""
    import matplotlib.pyplot as plt

    from parlab.viz import timeline
    speeds = speeds_for(world_size, clock, pattern)
    result = parlab.run("hetero-dp", world_size=world_size, steps=steps, speeds=speeds, shard="even",
                        clock=clock)
    fig, ax = plt.subplots(figsize=(10, 0.6 + 0.5 * world_size))
    timeline(result.timeline, ax=ax, title=f"even shares, speeds {speeds} ({result.config.clock.label})")
    plt.show()
    idle = idle_per_rank(result)
    print(f"blocked in the all-reduce per step ({result.config.clock.label}): " + ", ".join(
        f"rank {r} {1e3 * t:.1f} ms" for r, t in enumerate(idle)))
    return result


# ----------------------------------------------------------------------------- 2. shares and the LP
def fixed_rows_for(world_size: int, clock: str = "A100", batch_size: int = 12) -> float:
    """f in rows' worth for the default GPT: on a paced clock the clock's own count
    (`paced_model.paced_rates`: its kernels' launches and the optimizer over one row's work),
    on this CPU's raw clock the recorded `FIXED_ROWS`."""
    from parlab.heterogeneous.paced_model import paced_rates

    probe = make_config("hetero-dp", world_size=world_size, batch_size=batch_size, clock=clock)
    return paced_rates(probe)[1] if probe.clock.paced else FIXED_ROWS


def shares_table(batch: int, speeds, fixed_rows: float = FIXED_ROWS, source: str = "") -> None:
    """Rows per rank under each sharding, and the model's step time in rows' compute at speed 1
    (a rank with no rows computes nothing: `shares.busy_time`)."""
    _, t_star = shares.solve_lp(batch, speeds, fixed_rows)
    times = {}
    print(f"B={batch}, speeds {list(speeds)}, f={fixed_rows:.1f} rows" + (f" ({source})" if source else ""))
    for sharding in shares.SHARDINGS:
        rows = shares.shares(sharding, batch, speeds, fixed_rows)
        times[sharding] = max(shares.busy_time(b, s, fixed_rows) for b, s in zip(rows, speeds))
        print(f"  {sharding:<13} rows {rows}  step {times[sharding]:.2f} row-times  "
              f"even/this {times['even'] / times[sharding]:.2f}×")
    print(f"  LP bound T* = {t_star:.2f} row-times (no whole-row sharding is faster)")


def lp_written_out(batch: int, speeds, fixed_rows: float = FIXED_ROWS) -> None:
    """The LP of `parlab.heterogeneous.shares` with this cluster's numbers, and its solution: on
    every rank, and on the fastest ranks alone (a rank with no rows pays nothing)."""
    print(f"minimise T over b_0..b_{len(speeds) - 1} ≥ 0 subject to")
    for r, s in enumerate(speeds):
        print(f"  ({fixed_rows:.1f} + b_{r}) / {s:g} ≤ T   (only if b_{r} > 0: no rows, no work)")
    print(f"  b_0 + ... + b_{len(speeds) - 1} = {batch}")
    _, t_all = shares._solve_all(batch, speeds, fixed_rows)
    continuous, t_star = shares.solve_lp(batch, speeds, fixed_rows)
    print(f"every rank taking rows: T = {t_all:.2f} (the slowest pays f/s = "
          f"{fixed_rows / min(speeds):.2f} before any row)")
    print("solution: b = [" + ", ".join(f"{b:.2f}" for b in continuous) + f"], T* = {t_star:.2f}"
          + (f" — dropping the idle ranks is {t_all / t_star:.2f}× shorter" if t_star < t_all else ""))
    if shares.degenerate(batch, speeds, fixed_rows) and t_star >= t_all:
        print("the optimum is degenerate (rows can move between ranks without changing T*): of the "
              "optimal b, the one with the fewest rows per unit of speed on its busiest rank")
    print(f"whole rows: {shares.lp(batch, speeds, fixed_rows)}")


# ----------------------------------------------------------------------------- 3. exact, and bytes
def check_exact(world_size: int, steps: int = 2, pattern: str = "one slow") -> dict:
    """Every sharding against `single`: the rows each rank took and the comparison."""
    speeds = slow_speeds(world_size, pattern, scale=1.0)  # speeds change the time, never the result
    ref = parlab.run("single", steps=steps)
    results = {}
    for sharding in shares.SHARDINGS:
        result = parlab.run("hetero-dp", world_size=world_size, steps=steps, speeds=speeds,
                            shard=sharding)
        results[sharding] = result
        print(f"{sharding:<13} rows {result.outputs[0].extras['rows']}  "
              f"match: {result.compare(ref).match}")  # the differences vary with summation order
    return results


def bytes_table(results: dict) -> None:
    """Bytes each rank sent (ledger) beside the closed form, for each sharding's run."""
    for sharding, result in results.items():
        predicted = cost.hetero_dp_prediction(result.config).bytes_sent
        measured = result.bytes_per_rank()
        print(f"{sharding:<13} ledger {measured}  closed form {predicted}  equal: {measured == predicted}")


# ----------------------------------------------------------------------------- 4. time vs the model
SLOW_DEVICE = "V100"  # the timed cells' slow device: a real one beside the clock's accelerators


def speeds_for(world_size: int, clock: str = "A100", pattern: str = "one slow") -> list[float]:
    """The cluster's speeds on `clock`. Paced, "one slow" is real hardware: the clock's accelerator
    on every rank but the last, a V100 there (their sustained FLOP/s ratio, 3 digits: 50 / 150 on
    the A100 clock); "half V100s" puts V100s on the last ⌊N/2⌋ ranks; other patterns are their
    ratios. On this CPU's raw clock, ratios × SCALE."""
    ratio = round(ACCELERATORS[SLOW_DEVICE].flops / ACCELERATORS.get(clock, ACCELERATORS["A100"]).flops, 3)
    if clock != "wall" and pattern == "one slow":
        return [1.0] * (world_size - 1) + [ratio]
    if clock != "wall" and pattern == "half V100s":  # the first ⌈N/2⌉ the clock's, the rest V100s
        return [1.0] * ((world_size + 1) // 2) + [ratio] * (world_size // 2)
    return slow_speeds(world_size, pattern, scale=SCALE if clock == "wall" else 1.0)


def measure_shardings(world_size: int, speeds, steps: int = 5, link=None, batch_size: int = 12,
                      fixed_rows: float = FIXED_ROWS, clock: str = "A100") -> list[dict]:
    """Step time of `hetero-dp` under each sharding, measured in one run each, beside the model.
    On a paced clock the model's t and f are the clock's own (`parlab.heterogeneous.paced_model`), and
    the LP is given that f."""
    from parlab.heterogeneous.paced_model import paced_rates

    probe = make_config("hetero-dp", world_size=world_size, steps=steps, speeds=speeds, link=link,
                        batch_size=batch_size, clock=clock)
    row_s, idle_rows = cost.row_seconds(probe), fixed_rows
    if probe.clock.paced:
        row_s, fixed_rows, idle_rows = paced_rates(probe)
    out = []
    for sharding in shares.SHARDINGS:
        result = parlab.run("hetero-dp", world_size=world_size, steps=steps, speeds=speeds,
                            shard=sharding, link=link, batch_size=batch_size, fixed_rows=fixed_rows,
                            clock=clock)
        cfg = result.config
        rows = result.outputs[0].extras["rows"]
        comm_s = cost.comm_seconds(cfg)
        t_star = ideal_rows(batch_size, cost.speeds_of(cfg), fixed_rows, idle_rows)
        out.append({"shard": sharding, "rows": rows, "step_ms": 1e3 * result.step_time(warmup=1),
                    "model_ms": 1e3 * (max((fixed_rows + b if b else idle_rows) / s  # no rows: optimizer
                                           for b, s in zip(rows, cost.speeds_of(cfg))) * row_s + comm_s),
                    "ideal_ms": 1e3 * (t_star * row_s + comm_s), "fixed_rows": fixed_rows,
                    "clock": cfg.clock.label, "accelerator": cfg.clock.name,
                    "idle_ms": [round(1e3 * t, 4) for t in idle_per_rank(result)]})
    for row in out:
        row["speedup"] = out[0]["step_ms"] / row["step_ms"]
        row["model_speedup"] = out[0]["model_ms"] / row["model_ms"]
    return out


def ideal_rows(batch: int, speeds, fixed_rows: float, idle_rows: float) -> float:
    """The LP's T* in row-times, where a rank the LP gives no rows pays only its `idle_rows` / s
    (its optimizer step, none of f: `shares.solve_lp` drops the slowest ranks when that is shorter)."""
    return shares.solve_lp(batch, speeds, fixed_rows, idle_rows=idle_rows)[1]


def verdict(rows: list[dict]) -> bool:
    """The lesson, checked on this run: LP ≥ proportional ≥ even in step time (on a paced clock
    exactly: virtual time is bit-reproducible; 2% on this CPU's raw clock, whose step times
    move with the machine's load); the diagnosis where it fails."""
    by = {r["shard"]: r for r in rows}
    lp, prop, even = (by[k]["step_ms"] for k in ("lp", "proportional", "even"))
    slack = 1.0 if rows[0].get("accelerator", "wall") in ACCELERATORS else 1.02
    ok = lp <= prop * slack and prop <= even * slack
    print(f"verdict ({rows[0]['clock']}): LP {even / lp:.2f}×, proportional {even / prop:.2f}× as fast "
          f"as even shares: LP ≥ proportional ≥ even {'holds' if ok else 'does NOT hold'}")
    if not ok:
        model = {k: by[k]["model_ms"] for k in by}
        print(f"diagnosis: the model predicted LP {model['lp']:.4g}, proportional "
              f"{model['proportional']:.4g}, even {model['even']:.4g} ms "
              f"with f = {rows[0]['fixed_rows']:.1f} rows; "
              + ("the model's order is the expected one, so the run departs from the model (idle per "
                 f"rank {by['lp']['idle_ms']} under LP): a fixed cost the model misses"
                 if model["lp"] <= model["proportional"] <= model["even"] else
                 "the model itself orders them so: f is not the run's fixed cost"))
    return ok


def print_measurement(rows: list[dict], title: str = "") -> None:
    if title:
        print(title)
    clock = rows[0].get('clock', 'this CPU, raw')
    print(f"clock: {clock}; model f = {rows[0].get('fixed_rows', FIXED_ROWS):.1f} rows")
    if clock == "this CPU, raw":
        print(f"model t: FLOPs at cost.CPU_FLOPS = {cost.CPU_FLOPS / 1e9:g} GFLOP/s (a rate recorded in "
              f"docs/measurements.md, not this run's); {cpu_flops_line()}")
    else:
        acc = ACCELERATORS[rows[0]["accelerator"]]
        print(f"model t: operators and FLOPs priced as the {acc.name}'s clock prices them "
              f"({acc.launch_s * 1e6:g} µs per operator, {acc.flops / 1e12:g} TFLOP/s sustained: "
              "parlab.core.link, with their sources); times in its ms")
    print(f"{'shard':<13} {'rows':<16} {'step ms':>8} {'model ms':>9} {'ideal ms':>9} "
          f"{'vs even':>8} {'model':>7}  idle per rank (ms/step)")
    for r in rows:
        print(f"{r['shard']:<13} {str(r['rows']):<16} {r['step_ms']:>8.4g} {r['model_ms']:>9.4g} "
              f"{r['ideal_ms']:>9.4g} {r['speedup']:>7.2f}× {r['model_speedup']:>6.2f}×  {r['idle_ms']}")


def measure_topology(world_size: int = 4, steps: int = 4, intra: str = "NVLink", inter: str = "1GbE",
                     pattern: str = "one slow", clock: str = "A100") -> list[dict]:
    """`hetero-dp` with LP shares on one node and on two nodes (fast inside, slow between), on
    `clock` (paced: the real links; "wall": this CPU and the links' teaching presets)."""
    speeds = speeds_for(world_size, clock, pattern)
    rows = []
    for name, link in (("one node", intra), ("two nodes", topology.two_nodes(world_size, intra, inter))):
        cfg = make_config("hetero-dp", world_size=world_size, steps=steps, speeds=speeds, link=link,
                          clock=clock)
        result = parlab.run("hetero-dp", world_size=world_size, steps=steps, speeds=speeds, link=link,
                            clock=clock)
        if name == "one node":
            print(f"clock: {cfg.clock.label}")
        rows.append({"cluster": name, "link": str(cost.all_reduce_link(cfg)),
                     "comm_ms": 1e3 * cost.comm_seconds(cfg), "step_ms": 1e3 * result.step_time(1),
                     "rows": result.outputs[0].extras["rows"]})
        print(f"{name:<10} all-reduce on {rows[-1]['link']}: model {rows[-1]['comm_ms']:.1f} ms of "
              f"communication; step {rows[-1]['step_ms']:.1f} ms; rows {rows[-1]['rows']}")
    return rows


# ----------------------------------------------------------------------------- 5. backup workers
def backup_sweep(world_size: int, steps: int = 6, pattern: str = "one slow",
                 backups: tuple = (0, 1), speeds=None, clock: str = "A100") -> list[dict]:
    """Step time and loss of `backup-workers` for each b, beside `single`'s loss, on `clock`."""
    speeds = speeds or speeds_for(world_size, clock, pattern)
    ref = parlab.run("single", steps=steps)
    rows = []
    for b in backups:
        if b >= world_size:
            continue
        result = parlab.run("backup-workers", world_size=world_size, steps=steps, speeds=speeds,
                            backups=b, clock=clock)
        used = result.outputs[0].extras["used"]  # per step: the ranks whose gradients counted
        dropped = sorted({r for step in used for r in range(world_size) if r not in step})
        rows.append({"backups": b, "step_ms": 1e3 * result.step_time(1), "final_loss": result.losses[-1],
                     "single_loss": ref.losses[-1], "dropped": dropped})
    for r in rows:
        print(f"b={r['backups']}: step {r['step_ms']:.4g} ms ({rows[0]['step_ms'] / r['step_ms']:.2f}× b=0), "
              f"final loss {r['final_loss']:.4f} vs single {r['single_loss']:.4f}, "
              f"ranks ever dropped {r['dropped']}")
    return rows


# ----------------------------------------------------------------------------- 6. the widget
def panel(world_size: int, speeds: str, shard: str, cluster: str, steps: int = 3,
          clock: str = "A100") -> None:
    """Widget callback: `hetero-dp` at a speed pattern, sharding and cluster on `clock`; its times
    beside the model, and one timeline drawn while the panel captures it (no plt.show: the panel
    saves the open figures into its own output)."""
    import matplotlib.pyplot as plt

    from parlab.heterogeneous.paced_model import paced_rates
    from parlab.viz import timeline
    speed_list = speeds_for(world_size, clock, speeds)
    link = topology.two_nodes(world_size, "NVLink", "1GbE") if cluster == "two nodes" else None
    probe = make_config("hetero-dp", world_size=world_size, steps=steps, speeds=speed_list, link=link,
                        clock=clock)
    row_s, fixed, idle = cost.row_seconds(probe), FIXED_ROWS, FIXED_ROWS
    if probe.clock.paced:
        row_s, fixed, idle = paced_rates(probe)
    result = parlab.run("hetero-dp", world_size=world_size, steps=steps, speeds=speed_list,
                        shard=shard, link=link, fixed_rows=fixed, clock=clock)
    cfg = result.config
    rows = result.outputs[0].extras["rows"]
    model = max(shares.busy_time(b, s, fixed, idle) for b, s in zip(rows, speed_list)) * row_s \
        + cost.comm_seconds(cfg)
    ideal = ideal_rows(cfg.batch_size, speed_list, fixed, idle) * row_s + cost.comm_seconds(cfg)
    print(f"clock: {cfg.clock.label}; f = {fixed:.1f} rows")
    print(f"speeds {speed_list}, {shard} → rows {rows}; step {1e3 * result.step_time(1):.3f} ms "
          f"(model {1e3 * model:.3f} ms, LP ideal {1e3 * ideal:.3f} ms)")
    fig, ax = plt.subplots(figsize=(9, 0.6 + 0.45 * world_size))
    timeline(result.timeline, ax=ax, title=f"{shard}, {speeds}, {cluster} ({cfg.clock.label})")


def headline(rows: list[dict]) -> float:
    """LP's speedup over even shares in a `measure_shardings` table."""
    return {r["shard"]: r for r in rows}["lp"]["speedup"]
