"""Chapter 04's sections on what a stage holds and costs: activation memory per stage (GPipe holds
m micro-batches, 1F1B at most p − s: Narayanan et al., PipeDream-Flush, ICML 2021, §3), balanced
partitions of a model with a heavy head (PipeDream, Narayanan et al., SOSP 2019, §3.1: profile each
layer, split contiguously to minimise the slowest stage; profiled and run on one paced clock,
shapes only), and the same 1F1B run over links.
"""

from __future__ import annotations

import statistics

import parlab
from parlab.pipeline import cost

# A model with a heavy head on the A100: GPT-2's (padded) 50,304-token vocabulary on 4 blocks wide
# enough that FLOPs, not launches, price them; what the head costs in blocks is measured
# (`partition_report` prints the profile's ratio and the run's). Shapes only: no data.
WIDE_HEAD = {"n_layer": 4, "n_embd": 1024, "n_head": 16, "block_size": 512, "vocab_size": 50304}


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


def partition_report(world_size: int = 2, microbatches: int = 4, steps: int = 1,
                     clock: str = "A100", batch_size: int = 8) -> dict:
    """Even vs balanced split of `WIDE_HEAD` (a GPT-2-vocabulary head on 4 blocks of width 1024),
    on one clock: each layer's forward + backward priced on the paced `clock` (operators and FLOPs,
    `clock_profile`, shapes only), split by that profile (PipeDream §3.1's dynamic programme), and
    both splits run shapes-only on the same clock (`parlab.core.shapes`)."""
    from parlab.core.clock import resolve
    from parlab.core.shapes import shapes
    from parlab.models import model_config
    from parlab.pipeline.partition import balanced_partition, stage_times
    from parlab.pipeline.stages import even_partition

    paced = resolve(clock, world_size)
    if not paced.paced:
        raise ValueError(f"clock={clock!r}: the partition is profiled and run on a paced clock")
    mc = model_config("gpt", WIDE_HEAD)
    rows = batch_size // microbatches
    with shapes():
        profile = clock_profile(mc, rows, paced)
    where = paced.label
    print(f"GPT {WIDE_HEAD['n_layer']} blocks × {WIDE_HEAD['n_embd']} wide, {WIDE_HEAD['block_size']} "
          f"tokens, vocabulary {WIDE_HEAD['vocab_size']:,}, {rows} rows per micro-batch; per-layer "
          f"fwd+bwd ({paced.unit}, {where}: operators and FLOPs priced, shapes only): blocks "
          f"{[float(f'{t * 1e3:.3g}') for t in profile['layers']]}, embedding "
          f"{profile['first'] * 1e3:.3g}, head+loss {profile['last'] * 1e3:.3g}: the head costs "
          f"{_head_in_blocks(profile):.2f} blocks")
    even = even_partition(mc.n_layer, world_size)
    balanced = balanced_partition(profile, world_size)
    out = {"head_blocks": _head_in_blocks(profile), "head_blocks_raw": None,
           "profiled_on": where, "same": list(balanced) == list(even)}
    for label, counts in (("even", even), ("balanced", balanced)):
        predicted = stage_times(counts, profile)
        if label == "balanced" and out["same"]:
            out[label] = out["even"]
            print(f"{label:9} layers {counts}: the even split — by the profile there is nothing to "
                  "balance (not run twice)")
            continue
        r = parlab.run("pp-1f1b", world_size=world_size, steps=steps, microbatches=microbatches,
                       batch_size=batch_size, model_config=WIDE_HEAD, partition=list(counts),
                       clock=clock, shapes_only=True)
        step = min(r.step_times[1:] or r.step_times)  # paced: every step the same
        measured = cost.stage_compute(r.timeline, skip_first=steps > 1)
        per_stage = [t["F"] + t["B"] for _, t in sorted(measured.items())]
        out[label] = {"counts": counts, "step_s": step, "stage_s": per_stage,
                      "bubble": cost.measured_bubble(r.timeline, skip_first=steps > 1, stat="min")}
        print(f"{label:9} layers {counts}: predicted stage F+B per micro-batch "
              f"{[float(f'{t * 1e3:.3g}') for t in predicted]} {paced.unit}; run ({r.clock.label}, "
              f"shapes only): {[float(f'{t * 1e3:.3g}') for t in per_stage]} {r.clock.unit}, "
              f"fastest step {step * 1e3:.3g} {r.clock.unit}, least bubble {out[label]['bubble']:.1%}")
    ev = out["even"]["stage_s"]
    print(f"the even split's last stage ({even[-1]} blocks + head) took {ev[-1] / ev[0]:.2f}× its "
          f"first (embedding + {even[0]} blocks) in the run; the profile predicted "
          f"{predicted_ratio(even, profile):.2f}×")
    theory = cost.theory_bubble("1f1b", world_size, microbatches)
    gaps = {label: out[label]["bubble"] - theory for label in ("even", "balanced")}
    print(f"bubble at this width (paced, shapes only) beside (p−1)/(m+p−1) = {theory:.1%}: "
          + ", ".join(f"{label} split {out[label]['bubble']:.1%} ({gaps[label] * 100:+.1f} points: "
                      + ("agrees" if abs(gaps[label]) <= 0.05 else "does NOT agree") + ", ±5)"
                      for label in ("even", "balanced"))
          + " — the closed form assumes equal stages; the slowest stage sets the pace")
    out["theory"] = theory
    gain = out["even"]["step_s"] / out["balanced"]["step_s"]
    if out["same"]:
        print(f"balanced / even: the same split ({where}: the head costs {out['head_blocks']:.2f} "
              "blocks)")
    else:
        print(f"balanced / even throughput: {gain:.2f}× ({where}): "
              + ("the balanced split is faster, as its predicted stage times say" if gain > 1.0 else
                 "the balanced split is NOT faster: the profile priced the layers differently "
                 "from the run"))
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
