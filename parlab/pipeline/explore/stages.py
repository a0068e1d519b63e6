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


def partition_report(world_size: int = 2, microbatches: int = 4, steps: int = 4,
                     clock: str = "A100") -> dict:
    """Even vs balanced split of a model with a heavy head: profile (this CPU, raw: the profile
    the split is computed from), split, run on `clock` (paced A100 time by default), compare."""
    import torch

    from parlab.models import build_model, model_config
    from parlab.pipeline.partition import balanced_partition, profile_layers, stage_times
    from parlab.pipeline.stages import even_partition

    mc = model_config("gpt", HEAVY_HEAD)
    rows = COMMON_OPTIONS["batch_size"] // microbatches  # the default global batch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # profile as a rank computes: one thread
    try:
        profile = profile_layers(build_model("gpt", mc, 0), mc, rows)
    finally:
        torch.set_num_threads(threads)
    even = even_partition(mc.n_layer, world_size)
    balanced = balanced_partition(profile, world_size)
    block = statistics.median(profile["layers"])
    print(f"per-layer fwd+bwd (ms, this CPU, raw): blocks "
          f"{[round(t * 1e3, 2) for t in profile['layers']]}, embedding {profile['first'] * 1e3:.2f}, "
          f"head+loss {profile['last'] * 1e3:.2f}: the head costs {profile['last'] / block:.1f} "
          f"blocks (median block)")
    out = {}
    for label, counts in (("even", even), ("balanced", balanced)):
        predicted = stage_times(counts, profile)
        r = parlab.run("pp-1f1b", world_size=world_size, steps=steps, microbatches=microbatches,
                       model_config=HEAVY_HEAD, partition=list(counts), clock=clock)
        step = min(r.step_times[1:] or r.step_times)
        paced = cost.stage_compute(r.timeline)
        per_stage = [t["F"] + t["B"] for _, t in sorted(paced.items())]
        out[label] = {"counts": counts, "step_s": step, "stage_s": per_stage,
                      "bubble": cost.measured_bubble(r.timeline, stat="min")}
        print(f"{label:9} layers {counts}: predicted stage ms {[round(t * 1e3, 1) for t in predicted]}"
              f"; run ({r.clock.label}): stage F+B per micro-batch "
              f"{[float(f'{t * 1e3:.3g}') for t in per_stage]} {r.clock.unit}, fastest step "
              f"{step * 1e3:.3g} {r.clock.unit}, "
              f"least bubble {out[label]['bubble']:.1%}")
    ev = out["even"]["stage_s"]
    print(f"the even split's last stage ({even[-1]} blocks + head) took {ev[-1] / ev[0]:.1f}× its "
          f"first (embedding + {even[0]} blocks) in the run's time, against "
          f"{predicted_ratio(even, profile):.1f}× "
          "in the profile: the profile (this CPU, raw) and the run's clock price the head "
          "differently, so the split the profile chose is only as good as that agreement")
    gain = out["even"]["step_s"] / out["balanced"]["step_s"]
    print(f"balanced / even throughput: {gain:.2f}× ({r.clock.label}): "
          + ("the balanced split is faster, as its predicted stage times say" if gain > 1.0 else
             "the balanced split is NOT faster: the profile (this CPU, raw) priced the layers "
             "differently from the run's clock" if r.clock.paced else
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
        print(f"{link:9} {len(sends) // steps} sends/step/rank of {sends[0]['bytes_sent']:,} B, "
              f"α+n/β = {per_message * 1e3:5.1f} ms each; measured: blocked in recv "
              f"{blocked * 1e3:6.1f} ms/step/rank, bubble {cost.measured_bubble(r.timeline):5.1%}, "
              f"step {r.step_time() * 1e3:6.1f} ms ({r.clock.label})")
