"""Chapter 04's sections on what a stage holds and costs: activation memory per stage (GPipe holds
m micro-batches, 1F1B at most p − s: Narayanan et al., PipeDream-Flush, ICML 2021, §3), balanced
partitions of a model with a heavy head (PipeDream, Narayanan et al., SOSP 2019, §3.1: profile each
layer, split contiguously to minimise the slowest stage), and the same 1F1B run over links.
"""

from __future__ import annotations

import statistics

import parlab
from parlab.engine.run_config import COMMON_OPTIONS
from parlab.pipeline import cost

# A model with a heavy head: an 8192-token vocabulary; what it costs in blocks is measured
# (`partition_report` prints the profile's ratio and the run's).
HEAVY_HEAD = {"n_layer": 8, "n_embd": 64, "n_head": 4, "block_size": 32, "vocab_size": 8192}


def memory_report(world_size: int, microbatches: int, steps: int = 1) -> dict:
    """Peak activation bytes per stage: GPipe holds m micro-batches, 1F1B at most p − s. Returns
    {scheme: [peak bytes per rank]}."""
    print(f"p={world_size}, m={microbatches}: peak activations per rank (micro-batches in flight)")
    out = {}
    for scheme in ("pp-gpipe", "pp-1f1b", "pp-zb"):
        r = parlab.run(scheme, world_size=world_size, steps=steps, microbatches=microbatches)
        out[scheme] = [mem["activations"] for mem in r.memory]
        cells = [f"{mem['activations'] / 1e6:6.2f} MB ({o.extras['in_flight_peak']})"
                 for mem, o in zip(r.memory, r.outputs)]
        print(f"  {scheme:9} " + "  ".join(cells))
    return out


def clock_profile(mc, rows: int, clock) -> dict:
    """`parlab.pipeline.partition.profile_layers`' profile priced on a paced clock instead of timed:
    each layer's forward + backward on a micro-batch of `rows`, its operators and FLOPs counted
    (`parlab.core.pacer.count_work`) and priced as a paced run prices them (`Clock.price`)."""
    from parlab.core import pacer
    from parlab.models import build_model
    from parlab.pipeline.partition import profile_layers

    def price(fns) -> list[float]:
        return [clock.price(pacer.count_work(fn)) for fn in fns]

    return profile_layers(build_model("gpt", mc, 0), mc, rows, measure=price)


def _head_in_blocks(profile: dict) -> float:
    return profile["last"] / statistics.median(profile["layers"])


def partition_report(world_size: int = 2, microbatches: int = 4, steps: int = 4,
                     clock: str = "A100") -> dict:
    """Even vs balanced split of a model with a heavy head: profile each layer (this CPU, raw, and
    on `clock` when it is paced: a paced run prices operators and FLOPs, not this CPU's time), split
    by the profile on the clock the pipeline runs on, run on `clock` (A100 time by default),
    compare. When that split is the even one, the run is made once."""
    import torch

    from parlab.core.clock import resolve
    from parlab.models import build_model, model_config
    from parlab.pipeline.partition import balanced_partition, profile_layers, stage_times
    from parlab.pipeline.stages import even_partition

    mc = model_config("gpt", HEAVY_HEAD)
    rows = COMMON_OPTIONS["batch_size"] // microbatches  # the default global batch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # profile as a rank computes: one thread
    try:
        raw = profile_layers(build_model("gpt", mc, 0), mc, rows)
    finally:
        torch.set_num_threads(threads)
    paced = resolve(clock, world_size)
    profile = clock_profile(mc, rows, paced) if paced.paced else raw
    where = paced.label if paced.paced else "this CPU, raw"
    print(f"per-layer fwd+bwd (ms, this CPU, raw): blocks "
          f"{[round(t * 1e3, 2) for t in raw['layers']]}, embedding {raw['first'] * 1e3:.2f}, "
          f"head+loss {raw['last'] * 1e3:.2f}: the head costs {_head_in_blocks(raw):.1f} "
          f"blocks (median block)")
    if paced.paced:
        print(f"per-layer fwd+bwd ({paced.unit}, {where}: operators and FLOPs priced): blocks "
              f"{[float(f'{t * 1e3:.3g}') for t in profile['layers']]}, embedding "
              f"{profile['first'] * 1e3:.3g}, head+loss {profile['last'] * 1e3:.3g}: the head costs "
              f"{_head_in_blocks(profile):.2f} blocks")
    even = even_partition(mc.n_layer, world_size)
    balanced = balanced_partition(profile, world_size)
    out = {"head_blocks": _head_in_blocks(profile), "head_blocks_raw": _head_in_blocks(raw),
           "profiled_on": where, "same": list(balanced) == list(even)}
    for label, counts in (("even", even), ("balanced", balanced)):
        predicted = stage_times(counts, profile)
        if label == "balanced" and out["same"]:
            out[label] = out["even"]
            print(f"{label:9} layers {counts}: the even split — by the profile on the run's clock "
                  "there is nothing to balance (not run twice)")
            continue
        r = parlab.run("pp-1f1b", world_size=world_size, steps=steps, microbatches=microbatches,
                       model_config=HEAVY_HEAD, partition=list(counts), clock=clock)
        step = min(r.step_times[1:] or r.step_times)
        measured = cost.stage_compute(r.timeline)
        per_stage = [t["F"] + t["B"] for _, t in sorted(measured.items())]
        out[label] = {"counts": counts, "step_s": step, "stage_s": per_stage,
                      "bubble": cost.measured_bubble(r.timeline, stat="min")}
        unit = "ms" if not paced.paced else paced.unit
        print(f"{label:9} layers {counts}: predicted stage {unit} "
              f"{[float(f'{t * 1e3:.3g}') for t in predicted]} ({where}); run ({r.clock.label}): "
              f"stage F+B per micro-batch {[float(f'{t * 1e3:.3g}') for t in per_stage]} "
              f"{r.clock.unit}, fastest step {step * 1e3:.3g} {r.clock.unit}, "
              f"least bubble {out[label]['bubble']:.1%}")
    ev = out["even"]["stage_s"]
    print(f"the even split's last stage ({even[-1]} blocks + head) took {ev[-1] / ev[0]:.2f}× its "
          f"first (embedding + {even[0]} blocks) in the run's time; the profile ({where}) predicted "
          f"{predicted_ratio(even, profile):.2f}×, this CPU's raw profile "
          f"{predicted_ratio(even, raw):.2f}×")
    gain = out["even"]["step_s"] / out["balanced"]["step_s"]
    if out["same"]:
        print(f"balanced / even: the same split ({where}: the head costs "
              f"{out['head_blocks']:.2f} blocks there, against {out['head_blocks_raw']:.1f} on this "
              "CPU, raw) — how heavy a layer is depends on the machine it runs on: profile on the "
              "clock you train on")
    else:
        print(f"balanced / even throughput: {gain:.2f}× ({r.clock.label}): "
              + ("the balanced split is faster, as its predicted stage times say" if gain > 1.0 else
                 "the balanced split is NOT faster: the profile priced the layers differently "
                 "from the run" if paced.paced else
                 "the balanced split is NOT faster: on this CPU, raw, contention decided"))
    return out


def predicted_ratio(counts, profile) -> float:
    """Last stage over first stage time of split `counts` by the profile (`stage_times`)."""
    from parlab.pipeline.partition import stage_times
    t = stage_times(counts, profile)
    return t[-1] / t[0]


def link_report(world_size: int, microbatches: int, links=("loopback", "10GbE", "1GbE"),
                steps: int = 3, clock: str = "A100") -> None:
    """The same 1F1B run over links: the same bytes, each message α + bytes/β later, on `clock`
    (paced A100 time on the real links by default; "wall": this CPU, raw, teaching presets)."""
    for link in links:
        r = parlab.run("pp-1f1b", world_size=world_size, steps=steps, microbatches=microbatches,
                       link=None if link == "loopback" else link, clock=clock)
        sends = [x for x in r.ledger if x["op"] == "send" and x["rank"] == 0]
        emulated = r.config.link
        per_message = emulated.cost(sends[0]["bytes_sent"]) if emulated else 0.0
        blocked = sum(e["t1"] - e["t0"] for e in r.timeline if e["kind"] == "wait"
                      and e["name"] == "wait recv") / steps / world_size
        unit = r.clock.unit if r.clock.paced else "ms"
        print(f"{link:9} {len(sends) // steps} sends/step/rank of {sends[0]['bytes_sent']:,} B, "
              f"α+n/β = {per_message * 1e3:7.3g} {unit} each; measured: blocked in recv "
              f"{blocked * 1e3:6.3g} {unit}/step/rank, bubble "
              f"{cost.measured_bubble(r.timeline):5.1%}, step {r.step_time() * 1e3:6.3g} {unit} "
              f"({r.clock.label})")
