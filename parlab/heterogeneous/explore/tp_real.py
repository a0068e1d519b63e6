"""What notebook 11 times for `hetero-tp` on the chapter's one clock: real devices, real links,
GPT-2 XL's width (Zhang et al., "HAP: SPMD DNN Training on Heterogeneous GPU Clusters with
Automated Program Synthesis", EuroSys 2024: one sharding ratio per device, uneven collectives).

`measure_collectives`: the uneven all-gather and its reduce-scatter (padded vs exact, chapter's
`parlab.heterogeneous.uneven`) run on real tensors in paced time over a real link (virtual time:
nothing sleeps), beside the α-β model of the ring's busiest sender (Thakur, Rabenseifner & Gropp,
IJHPCA 2005). `measure_steps`: `hetero-tp` shapes-only (`parlab.core.shapes`: every operator,
message and byte of GPT-2 XL's shapes, no numbers) on an A100 and a V100 joined by EDR InfiniBand,
even vs the LP's ratios, beside `hap_time.step_seconds` of Megatron's block (`programs.MEGATRON_SP`)
at the run's own heads, columns and positions. Simplification, stated: the V100 is the A100's clock
at their FLOP/s ratio (50 / 150 TFLOP/s, `explore.hap_real.device_speeds`).
"""

from __future__ import annotations

import torch

import parlab
from parlab.core import cost as core_cost
from parlab.core.clock import pace_link
from parlab.core.clock import resolve as resolve_clock
from parlab.core.launch import launch
from parlab.core.link import real
from parlab.heterogeneous import cost, hap_time
from parlab.heterogeneous import programs as pg
from parlab.heterogeneous.explore.hap_real import DEVICES, LINK, device_speeds, real_config
from parlab.heterogeneous.uneven import VARIANTS, GatherUneven
from parlab.models.presets import PRESETS

CLOCK = "A100"
BATCH = 2  # sequences of 1024 positions, as in explore.hap_real


# ----------------------------------------------------------------------------- the collectives
def positions(devices=DEVICES, shard: str = "lp", n_layer: int = 2, link: str = LINK) -> list[int]:
    """The positions (of GPT-2 XL's 1024) `hetero-tp` gives each of `devices` under `shard`, with
    speeds their sustained FLOP/s over the first's (no run: `cost.tp_split`)."""
    from parlab.engine.runner import make_config

    cfg = make_config("hetero-tp", world_size=len(devices), speeds=device_speeds(devices), shard=shard,
                      model_config=shape(n_layer), batch_size=BATCH, clock=devices[0], link=link,
                      shapes_only=True)
    return cost.tp_split(cfg)["tokens"]


def paced_collective_rank(rank: int, world_size: int, sizes: list[int], inner: int, clock: str,
                          link: str) -> dict:
    """On each rank, in `clock`'s virtual time over the real `link`: all-gather (forward) and
    reduce-scatter (backward) of `GatherUneven`, padded and exact, on known data; checks the values,
    returns the bytes each op sent and the op's virtual seconds on this rank."""
    from parlab.core.comm import Comm
    from parlab.core.pacer import Pacer
    from parlab.core.trace import Timeline

    paced = resolve_clock(clock)
    timeline = Timeline(rank, Pacer(paced))
    comm = Comm(None, timeline=timeline, link=pace_link(real(link), paced))
    total, lo = sum(sizes), sum(sizes[:rank])
    full = torch.arange(total * inner, dtype=torch.float32).view(1, total, inner)  # (1, S, inner)
    grad = torch.ones(1, total, inner)  # (1, S, inner) every rank's gradient
    out = {}
    for variant in VARIANTS:
        comm.drop_records()
        shard = full[:, lo:lo + sizes[rank]].clone().requires_grad_()  # (1, S_r, inner)
        t0 = timeline.now()
        gathered = GatherUneven.apply(shard, comm, sizes, 1, variant)  # (1, S, inner)
        gathered.backward(grad)  # reduce-scatter: (1, S, inner) -> (1, S_r, inner)
        seconds = timeline.now() - t0
        ok = torch.equal(gathered.detach(), full) and bool((shard.grad == world_size).all())
        sent = sum(r["bytes_sent"] for r in comm.ledger.records)
        out[variant] = {"ok": ok, "sent": sent, "seconds": seconds}
    return out


def ring_chain_seconds(sizes: list[int], inner: int, link: str) -> float:
    """The hand-written exact ring reduce-scatter (`uneven.ring_reduce_scatter`) as the paced link
    runs it: in step k rank r sends chunk r−k−1 to r+1 once it has received it (step k−1) and its
    own last send and r+1's receive are done; each message k·α + bytes/β. Its time is the chain's,
    not the busiest sender's: with one large chunk, every step carries it on some rank."""
    wire, n = real(link), len(sizes)
    tx, rx, ready, end = [0.0] * n, [0.0] * n, [0.0] * n, 0.0
    for k in range(n - 1):
        arrived = [0.0] * n
        for r in range(n):
            start = max(tx[r], rx[(r + 1) % n], ready[r])
            done = start + wire.cost(sizes[(r - k - 1) % n] * inner * core_cost.FP32_BYTES, 1)
            tx[r] = rx[(r + 1) % n] = arrived[(r + 1) % n] = done
            end = max(end, done)
        ready = arrived
    return end


def model_seconds_collectives(variant: str, sizes: list[int], inner: int, link: str) -> float:
    """The all-gather (`Comm.all_gather`, one collective) at its busiest sender, k·α + bytes/β,
    plus the reduce-scatter: padded, a collective of N equal chunks (the busiest sender, which is
    also its chain); exact, the chain of `ring_chain_seconds`."""
    n, wire = len(sizes), real(link)
    busiest = max(cost.uneven_bytes("all_gather", variant, sizes, inner, r) for r in range(n))
    gather = wire.cost(busiest, n - 1)
    chunks = [max(sizes)] * n if variant == "padded" else list(sizes)
    return gather + ring_chain_seconds(chunks, inner, link)


def measure_collectives(sizes: list[int], inner: int, link: str = LINK, clock: str = CLOCK) -> list[dict]:
    """Padded vs exact uneven all-gather + reduce-scatter of chunks `sizes` × `inner` fp32, paced:
    bytes per rank (ledger beside `cost.uneven_bytes`) and the slowest rank's virtual time beside
    `model_seconds_collectives` and the busiest sender's bytes alone (a lower bound)."""
    n = len(sizes)
    per_rank = launch(paced_collective_rank, n, sizes, inner, clock, link)
    wire = real(link)
    rows = []
    for variant in VARIANTS:
        closed = [sum(cost.uneven_bytes(op, variant, sizes, inner, r)
                      for op in ("all_gather", "reduce_scatter")) for r in range(n)]
        busiest = sum(wire.cost(max(cost.uneven_bytes(op, variant, sizes, inner, r) for r in range(n)), n - 1)
                      for op in ("all_gather", "reduce_scatter"))
        rows.append({"variant": variant, "ok": all(per_rank[r][variant]["ok"] for r in range(n)),
                     "sent": [per_rank[r][variant]["sent"] for r in range(n)], "closed": closed,
                     "ms": 1e3 * max(per_rank[r][variant]["seconds"] for r in range(n)),
                     "model_ms": 1e3 * model_seconds_collectives(variant, sizes, inner, link),
                     "busiest_ms": 1e3 * busiest, "sizes": list(sizes), "inner": inner,
                     "link": str(wire), "clock": resolve_clock(clock).label})
    return rows


def print_collective_times(rows: list[dict]) -> dict:
    """Paced time (slowest rank) beside the model and the busiest-sender bound; the verdicts."""
    mb = sum(rows[0]["sizes"]) * rows[0]["inner"] * core_cost.FP32_BYTES / 1e6
    print(f"shards {rows[0]['sizes']} × {rows[0]['inner']} fp32 ({mb:.1f} MB gathered) on {rows[0]['link']}, "
          f"{rows[0]['clock']} (virtual time: real tensors, the link priced, nothing sleeps):")
    for r in rows:
        print(f"  {r['variant']:<7} {r['ms']:.3f} ms  model {r['model_ms']:.3f} ms  busiest sender alone "
              f"{r['busiest_ms']:.3f} ms  bytes/rank {r['sent']}  closed form equal: "
              f"{r['sent'] == r['closed']}")
    ratio, modelled = rows[0]["ms"] / rows[1]["ms"], rows[0]["model_ms"] / rows[1]["model_ms"]
    bound = rows[0]["busiest_ms"] / rows[1]["busiest_ms"]
    saved = 1 - sum(rows[1]["sent"]) / sum(rows[0]["sent"])
    fits = all(abs(r["ms"] / r["model_ms"] - 1) <= 0.01 for r in rows)
    print(f"  exact sends {100 * saved:.0f}% fewer bytes in all; padded / exact time {ratio:.2f}× (model "
          f"{modelled:.2f}×, the busiest senders alone {bound:.2f}×); measured = model within 1%: {fits} — "
          + ("exact is faster" if ratio > 1.05 else "exact is hardly any faster"))
    return {"ratio": ratio, "model": modelled, "bound": bound, "saved": saved, "fits": fits}


# ----------------------------------------------------------------------------- the step
def shape(n_layer: int) -> dict:
    return {**PRESETS["gpt2-xl"], "n_layer": n_layer}


def model_seconds(tp_cfg, hap_cfg, split: dict) -> float:
    """`hap_time.step_seconds` of Megatron's block at hetero-tp's own split: heads and MLP columns
    as cut, the stream (LayerNorms, residuals, embedding, head) by positions, in batch rows' worth
    (B·t_r/T: the profile is affine in its units)."""
    rows = [tp_cfg.batch_size * t / tp_cfg.model_config.block_size for t in split["tokens"]]
    return hap_time.step_seconds(hap_cfg, pg.MEGATRON_SP,
                                 {"heads": split["heads"], "columns": split["columns"], "rows": rows})


def measure_steps(n_layer: int = 2, shardings=("even", "lp"), devices=DEVICES, link: str = LINK,
                  steps: int = 2) -> list[dict]:
    """`hetero-tp` shapes-only in paced time on `devices` (the first's clock) over `link`, one run
    per sharding (even first); its last step beside `model_seconds`."""
    speeds = device_speeds(devices)
    hap_cfg = real_config(n_layer, batch_size=BATCH, devices=devices, link=link)
    rows = []
    for sharding in shardings:
        r = parlab.run("hetero-tp", world_size=len(devices), steps=steps, speeds=speeds, shard=sharding,
                       collective="exact", model_config=shape(n_layer), batch_size=BATCH, link=link,
                       clock=devices[0], shapes_only=True)
        split = cost.tp_split(r.config)
        rows.append({"shard": sharding, "split": split, "step_ms": 1e3 * r.step_times[-1],
                     "model_ms": 1e3 * model_seconds(r.config, hap_cfg, split),
                     "ratios": [round(w, 3) for w in cost.tp_ratios(r.config)],
                     "clock": r.config.clock.label, "link": str(r.config.link), "speeds": speeds})
    for row in rows:
        row["speedup"] = rows[0]["step_ms"] / row["step_ms"]
        row["model_speedup"] = rows[0]["model_ms"] / row["model_ms"]
    return rows


def print_steps(rows: list[dict], devices=DEVICES) -> bool:
    """The table and the verdict: the LP's ratios beat even ones, measured and modelled, and the
    model stays within 5% of every paced step."""
    r0 = rows[0]
    print(f"hetero-tp shapes-only, GPT-2 XL width, {' + '.join(devices)} (speeds "
          f"{[round(s, 3) for s in r0['speeds']]}), B={BATCH}×1024 positions, link {r0['link']}, "
          f"{r0['clock']}; model: hap_time.step_seconds of Megatron's block at the run's split")
    print(f"{'shard':<6} {'ratios':<16} {'heads':<9} {'MLP columns':<13} {'positions':<11} "
          f"{'step ms':>8} {'model ms':>9} {'vs even':>8} {'model':>7}")
    for r in rows:
        s = r["split"]
        print(f"{r['shard']:<6} {str(r['ratios']):<16} {str(s['heads']):<9} {str(s['columns']):<13} "
              f"{str(s['tokens']):<11} {r['step_ms']:>8.2f} {r['model_ms']:>9.2f} {r['speedup']:>7.2f}× "
              f"{r['model_speedup']:>6.2f}×")
    errors = [r["step_ms"] / r["model_ms"] - 1 for r in rows]
    lp = rows[-1]
    ok = lp["speedup"] > 1.02 and lp["model_speedup"] > 1.02 and max(map(abs, errors)) <= 0.05
    print(f"verdict: the LP's ratios step {lp['speedup']:.2f}× as fast as even ones (model "
          f"{lp['model_speedup']:.2f}×); the model is off by "
          + ", ".join(f"{r['shard']} {100 * e:+.1f}%" for r, e in zip(rows, errors))
          + f" (within ±5%: {max(map(abs, errors)) <= 0.05}) — "
          + ("the LP pays, as modelled" if ok else "NOT as modelled"))
    return ok

