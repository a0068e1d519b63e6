"""What chapter 03 (tensor and sequence parallelism; resharding) runs: experiments, rank workers,
figures and the widget callback. Megatron-LM (Shoeybi et al. 2019), sequence parallelism
(Korthikanti et al., MLSys 2023), cross-mesh resharding (AlpaComm, Zhuang et al., MLSys 2023).
"""

from __future__ import annotations

import statistics

import torch

PAIRS = [("row", "col"), ("replicated", "row"), ("row", "replicated"),
         ("replicated", "replicated")]


# ----------------------------------------------------------------------------- step times
def _spec(name: str) -> tuple[str, dict]:
    """'torch-tp:sp' -> ('torch-tp', {'sp': True}), 'tp-sp:algo=ring' -> ('tp-sp', {'algo':
    'ring'}): a scheme with boolean options switched on or string options set."""
    scheme, *flags = name.split(":")
    return scheme, dict(flag.split("=", 1) if "=" in flag else (flag, True) for flag in flags)


def tp_rows(schemes=("tp", "tp-sp", "torch-tp", "torch-tp:sp"), degrees=(2, 4), steps: int = 4,
            link=None,
            model_config=None, batch_size: int = 8, repeats: int = 1,
            optimizer: str = "adamw", runs: dict | None = None, clock: str = "wall") -> list[dict]:
    """Step time, tp bytes per step and activation memory of each scheme at each degree, all
    round-robin in one run (ratios to `tp` at the same degree), and the check against single,
    on `clock` ("wall": this CPU, raw; an accelerator: paced time, `parlab.core.clock`).
    `runs`, when given, collects every RunResult: {(scheme, tp): [result per repeat]}."""
    import parlab

    common = dict(steps=steps + 1, link=link, model_config=model_config, batch_size=batch_size,
                  optimizer=optimizer, clock=clock)
    reference = parlab.run("single", **common)
    samples, results = {}, {}
    for _ in range(repeats):
        for tp in degrees:
            for scheme in schemes:
                name, options = _spec(scheme)
                result = parlab.run(name, world_size=tp, **common, **options)
                samples.setdefault((scheme, tp), []).append(result.step_time())
                results[(scheme, tp)] = result
                if runs is not None:
                    runs.setdefault((scheme, tp), []).append(result)
    rows = []
    for (scheme, tp), result in results.items():
        step = statistics.median(samples[(scheme, tp)])
        base = statistics.median(samples[("tp", tp)]) if ("tp", tp) in samples else step
        tp_bytes = sum(result.bytes_per_rank(phase=p)[0] for p in ("tp-forward", "tp-backward"))
        rows.append({"scheme": scheme, "tp": tp, "step_ms": step * 1e3, "vs_tp": step / base,
                     "tp_MB_per_step": tp_bytes / (steps + 1) / 1e6,
                     # a run that does not measure activations (torch-tp's DTensor) records 0: n/a
                     "activations_kB": result.memory[0].get("activations") / 1e3
                     if result.memory[0].get("activations") else float("nan"),
                     "match": result.compare(reference).match,
                     "max_param_diff": result.compare(reference).max_param_diff})
    rows.append({"scheme": "single", "tp": 1, "step_ms": reference.step_time()
                 * 1e3, "vs_tp": float("nan"), "tp_MB_per_step": 0.0,
                 "activations_kB": reference.memory[0]["activations"] / 1e3, "match": True,
                 "max_param_diff": 0.0})
    return rows


def ops_per_block(result, rank: int = 0) -> dict:
    """{(op, phase): count per block and step} of a tp / tp-sp run, from the ledger."""
    m, steps = result.config.model_config, result.config.steps
    counts = {}
    for r in result.ledger:
        if r["rank"] == rank and r["phase"] in ("tp-forward", "tp-backward"):
            counts[(r["op"], r["phase"])] = counts.get((r["op"], r["phase"]), 0) + 1
    return {k: v / (m.n_layer * steps) for k, v in sorted(counts.items())}


# ----------------------------------------------------------------------------- resharding
def reshard_worker(rank, world_size, shape, pairs, methods, repeats, link, ordered=False):
    """Sources ranks [0, m), destinations [m, N), m = N/2; every pair and method, `repeats`
    times. Returns this rank's seconds and sent / received elements per (pair, method)."""
    from parlab.core.comm import Comm
    from parlab.tensor_parallel import reshard

    tx = Comm(link=link)
    rx = Comm(ledger=tx.ledger, timeline=tx.timeline, link=link, name="world-rx")
    m = world_size // 2
    src, dst = list(range(m)), list(range(m, world_size))
    full = reshard.full_tensor(shape)
    out = {"rows": []}
    for src_layout, dst_layout in pairs:
        local = full
        if rank in src:
            r0, r1, c0, c1 = reshard.region(shape, src_layout, rank, m)
            local = full[r0:r1, c0:c1].clone()
        for method in methods:
            seconds = []
            for _ in range(repeats + 1):  # the first is a warm-up, dropped below
                before = len(tx.ledger.records)
                result, s = reshard.timed_reshard(tx, rx, local, shape, src_layout, src,
                                                  dst_layout, dst, method, ordered=ordered)
                seconds.append(s)
                mine = [r for r in tx.ledger.records[before:] if r["phase"] == "reshard"]
            if rank in dst:
                r0, r1, c0, c1 = reshard.region(shape, dst_layout, rank - m, world_size - m)
                assert torch.equal(result, full[r0:r1, c0:c1]), (src_layout, dst_layout, method)
            out["rows"].append({"pair": f"{src_layout}→{dst_layout}", "method": method,
                                "seconds": seconds[1:],
                                "sent": sum(r["bytes_sent"] for r in mine),
                                "recv": sum(r["bytes_recv"] for r in mine)})
    return out


def reshard_experiment(world_size: int = 4, shape=(128, 128), link=None, pairs=PAIRS,
                       methods=None, repeats: int = 3, ordered: bool = False) -> list[dict]:
    """Measured time (slowest rank, median of repeats) and bytes of every method per layout
    pair, beside two estimates of its plan on an emulated link: `predicted_ms`, the busiest rank's
    α-β time plus the chain's fill (`reshard.predicted_seconds`), and `nic_model_ms`, the plan run in
    its order on the per-host NIC model AlpaComm's order search minimises
    (`reshard.scheduled_seconds`; one host per rank here). On loopback there is no
    prediction (NaN): a ping-pong here measures α ≈ 2-5 ms of scheduler wake-up on the shared
    cores and no measurable β at these sizes, and overlapping async messages do not each pay
    that α, so the model has nothing honest to say. `ordered=True` runs each rank's transfers one at
    a time in plan order, a hop starting when both ends reach it (`reshard._run_ordered`: Alpa's
    runtime, where the send order matters); the default issues everything at once."""
    from parlab.core.launch import launch
    from parlab.core.link import resolve
    from parlab.tensor_parallel import reshard

    methods = methods or reshard.METHODS
    link = resolve(link)
    outs = launch(reshard_worker, world_size, tuple(shape), list(pairs), list(methods), repeats,
                  link, ordered, link=link)
    m = world_size // 2
    rows = []
    for i, row in enumerate(outs[0]["rows"]):
        src_layout, dst_layout = row["pair"].split("→")
        per_rank = [o["rows"][i] for o in outs]
        seconds = [max(r["seconds"][k] for r in per_rank) for k in range(repeats)]
        plan = reshard.plan(shape, src_layout, list(range(m)), dst_layout,
                            list(range(m, world_size)), row["method"])
        rows.append({"pair": row["pair"], "method": row["method"],
                     "measured_ms": statistics.median(seconds) * 1e3,
                     "predicted_ms": reshard.predicted_seconds(plan, link.latency_s,
                                                               link.bandwidth_Bps) * 1e3
                     if link else float("nan"),
                     "nic_model_ms": reshard.scheduled_seconds(plan, link.latency_s,
                                                               link.bandwidth_Bps) * 1e3
                     if link else float("nan"),
                     "max_sent_kB": max(r["sent"] for r in per_rank) / 1e3,
                     "total_kB": sum(r["sent"] for r in per_rank) / 1e3})
    for row in rows:  # speed-up of each method over send-recv on the same pair
        naive = next(r for r in rows if r["pair"] == row["pair"] and r["method"] == "send-recv")
        row["speedup"] = naive["measured_ms"] / row["measured_ms"]
    return rows


def print_rows(rows: list[dict]) -> None:
    """A table of rows; a column with no value at all (a prediction on loopback) is left out,
    a missing cell (a measurement the run did not make) prints as "n/a", never 0."""
    import pandas as pd
    frame = pd.DataFrame(rows).dropna(axis="columns", how="all")
    with pd.option_context("display.width", 140, "display.precision", 3):
        print(frame.to_string(index=False, na_rep="n/a"))


def explain_reshard(rows: list[dict], shape=(128, 128), world_size: int = 4, link=None) -> None:
    """Where a smarter method measured slower than send-recv, say why from its plan: the bytes
    the busiest rank moves, the messages it sends (a broadcast chain sends each cell in chunks),
    and the chain's fill (one chunk per extra hop), each priced at the link's α and β."""
    from parlab.core.link import resolve
    from parlab.tensor_parallel import reshard

    link = resolve(link)
    m = world_size // 2
    src, dst = list(range(m)), list(range(m, world_size))
    for row in rows:
        if row["method"] == "send-recv" or row["speedup"] >= 1:
            continue
        a, b = row["pair"].split("→")
        base = next(r for r in rows if r["pair"] == row["pair"] and r["method"] == "send-recv")

        (mine_el, mine_msgs), (base_el, base_msgs) = (
            max((v["sent"], v["msgs_sent"]) for v in
                reshard.traffic(reshard.plan(shape, a, src, b, dst, method)).values())
            for method in (row["method"], "send-recv"))
        plans = [reshard.plan(shape, a, src, b, dst, method) for method in (row["method"], "send-recv")]
        regions = [reshard.region(shape, a.strip(), i, m) for i in range(m)]
        replicated = len(set(regions)) < len(regions)  # sources holding the same region
        if reshard.traffic(plans[0]) == reshard.traffic(plans[1]) and \
                max(len(t.dsts) for t in plans[0]) == 1:
            print(f"{row['pair']}: {row['method']} measured {row['measured_ms']:.1f} ms vs send-recv "
                  f"{base['measured_ms']:.1f} ms, but its plan moves send-recv's bytes (one needer "
                  "per cell; " + ("several holders, but both methods send each cell from its first"
                                  if replicated else "one holder")
                  + "; an order that differs changes nothing when every message is issued at "
                  "once): the difference is the shared machine's noise.")
            continue
        line = (f"{row['pair']}: {row['method']} measured {row['measured_ms']:.1f} ms vs send-recv "
                f"{base['measured_ms']:.1f} ms ({1 / row['speedup']:.2f}× slower). Its busiest rank "
                f"moves {4 * mine_el:,} B in {mine_msgs} messages, send-recv's {4 * base_el:,} B in "
                f"{base_msgs}")
        if mine_el >= base_el:
            line += (f": no bytes saved — every cell is held by several of the {m} sources, yet "
                     f"{row['method']}'s plan leaves its busiest rank as many bytes as send-recv's"
                     if replicated else ": no bytes saved (each cell has one holder: nothing to "
                     "balance)")
        if link:
            extra = (mine_msgs - base_msgs) * link.latency_s * 1e3
            fill = row["predicted_ms"] - base["predicted_ms"] - extra
            line += (f"; the chain makes the second destination wait for the first to receive each "
                     f"chunk before forwarding it (fill {fill:.1f} ms"
                     + (f", + {extra:.1f} ms of α for the extra messages" if extra else "")
                     + f"): predicted {row['predicted_ms'] - base['predicted_ms']:+.1f} ms, measured "
                     f"{row['measured_ms'] - base['measured_ms']:+.1f} ms. Chains pay when they save "
                     "bytes on the busiest rank (replicated sources), not here.")
        else:
            import os
            cores = len(os.sched_getaffinity(0))
            line += (f"; on loopback each hop of the chain and each message costs a process wake-up, "
                     f"and {world_size} ranks share {cores} cores"
                     + (" (oversubscribed: a rank waits for a core)" if world_size > cores else "")
                     + ": that is what was measured, not bandwidth.")
        print(line)


# ----------------------------------------------------------------------------- notebook helpers
def correctness(world_size: int, steps: int) -> list[str]:
    """`match` of tp, tp-sp (and dp × tp when it exists) against single: deterministic lines."""
    import parlab

    reference = parlab.run("single", steps=steps)
    runs = [("tp", {}), ("tp-sp", {}), ("tp", {"vocab_parallel": True})]
    if world_size >= 4:
        runs.append(("tp", {"tp": 2}))  # 2-D: dp × tp
    lines = []
    for scheme, options in runs:
        result = parlab.run(scheme, world_size=world_size, steps=steps, **options)
        out = result.outputs[0]
        extra = " (vocab-parallel head)" if options.get("vocab_parallel") else ""
        lines.append(f"{scheme:<6} dp={out.extras['dp']} × tp={out.extras['tp']}{extra}: match: "
                     f"{result.compare(reference).match}")
    return lines


def ledger_vs_formula(result) -> list[dict]:
    """Bytes each rank sent per training step and ledger phase beside
    `parlab.tensor_parallel.cost.closed_form_bytes` (the run's totals ÷ its steps; equal means the
    totals are equal to the byte)."""
    from parlab.core.cost import element_bytes
    from parlab.tensor_parallel.cost import closed_form_bytes

    cfg = result.config
    rows = []
    for rank, out in enumerate(result.outputs):
        expect = closed_form_bytes(cfg.model_config, cfg.batch_size // out.extras["dp"], out.extras["tp"],
                                   rank % out.extras["tp"], cfg.steps, cfg.scheme != "tp",
                                   cfg.options.get("regather", False),
                                   element_size=element_bytes(cfg.precision))
        for phase, formula in expect.items():
            measured = result.bytes_per_rank(phase=phase)[rank]
            rows.append({"rank": rank, "phase": phase, "ledger_bytes": measured // cfg.steps,
                         "formula_bytes": formula // cfg.steps, "equal": measured == formula})
    return rows


def sp_vs_tp_bytes(tp: int, batch_size: int | None = None, model_config=None) -> dict:
    """Why tp-sp sends more than tp per step, from the closed forms (rank 0, one step): forward
    the same (a ring all-reduce is a reduce-scatter plus an all-gather); backward + 2 all-gathers
    per block that rebuild the column inputs Megatron-SP does not keep (`regather=True`: bytes
    for memory); + one all-reduce of the replicated LayerNorm / embedding gradients."""
    from parlab.engine.runner import make_config
    from parlab.tensor_parallel.cost import closed_form_bytes

    cfg = make_config("tp", world_size=tp, model_config=model_config,
                      **({"batch_size": batch_size} if batch_size else {}))
    m, batch_size = cfg.model_config, cfg.batch_size
    tp_b = closed_form_bytes(m, batch_size, tp, 0, 1, False)
    sp_b = closed_form_bytes(m, batch_size, tp, 0, 1, True, regather=True)
    keep = closed_form_bytes(m, batch_size, tp, 0, 1, True, regather=False)
    total = sum(tp_b.values())
    return {"tp": tp_b, "tp-sp": sp_b, "tp-sp keep gathered": keep,
            "ratio": sum(sp_b.values()) / total, "ratio_keep": sum(keep.values()) / total,
            "regather": sp_b["tp-backward"] - keep["tp-backward"], "grad_sync": sp_b["sp-grad-sync"]}


def print_sp_vs_tp(tp: int, batch_size: int | None = None) -> None:
    """`sp_vs_tp_bytes`, printed: where tp-sp's extra bytes go."""
    d = sp_vs_tp_bytes(tp, batch_size)
    print(f"per step, rank 0: tp sends {sum(d['tp'].values()):,} B, tp-sp {sum(d['tp-sp'].values()):,} B "
          f"= {d['ratio']:.2f}× tp")
    print(f"  forward: {d['tp']['tp-forward']:,} vs {d['tp-sp']['tp-forward']:,} B — the same bytes")
    print(f"  backward: + {d['regather']:,} B, the 2 all-gathers per block that rebuild the column "
          "inputs instead of keeping them (memory bought with bytes)")
    print(f"  + {d['grad_sync']:,} B: the all-reduce of the replicated parameters' gradients, each "
          "rank having seen T/tp tokens")
    print(f"keeping the gathered inputs (regather=False) would send {d['ratio_keep']:.2f}× tp")


def memory_rows(world_size: int) -> list[dict]:
    """Measured activation bytes per rank (one step) beside `parlab.tensor_parallel.cost.activation_bytes`."""
    import parlab
    from parlab.tensor_parallel.cost import activation_bytes

    rows = []
    for scheme, options in [("single", {}), ("tp", {}), ("tp-sp", {"regather": False}),
                            ("tp-sp", {})]:
        n = 1 if scheme == "single" else world_size
        result = parlab.run(scheme, world_size=n, steps=1, **options)
        tp = result.outputs[0].extras.get("tp", 1)
        formula = activation_bytes(result.config.model_config, result.config.batch_size
                                   // result.outputs[0].extras.get("dp", 1), tp, scheme == "tp-sp",
                                   options.get("regather", True))
        label = scheme + ("" if options.get("regather", True) else " (keep gathered)")
        rows.append({"scheme": label, "tp": tp, "measured_bytes": result.memory[0]["activations"],
                     "formula_bytes": formula})
    return rows


def panel(world_size: int, link: str, sp: bool, steps: int = 2, clock: str = "A100") -> None:
    """Widget callback: tp or tp-sp on `world_size` ranks over `link`, against single, on `clock`
    (paced A100 time on the real link by default; "wall": this CPU, raw, the teaching preset)."""
    import parlab

    scheme = "tp-sp" if sp else "tp"
    result = parlab.run(scheme, world_size=world_size, steps=steps,
                        link=None if link == "loopback" else link, clock=clock)
    reference = parlab.run("single", steps=steps)
    out = result.outputs[0]
    per_step = sum(result.bytes_per_rank(phase=p)[0] for p in ("tp-forward", "tp-backward"))
    print(f"{scheme}: dp={out.extras['dp']} × tp={out.extras['tp']}, "
          f"match vs single: {result.compare(reference).match}")
    print(f"rank 0 sends {per_step / steps:,.0f} activation bytes per step; "
          f"activations held: {result.memory[0]['activations']:,} bytes")
    print(f"step time {result.step_time(warmup=0) * 1e3:.0f} ms on {link} ({result.clock.label})")


def predicted_vs_measured(world_size: int, link: str, steps: int = 3, clock: str = "A100",
                          tolerance: float = 0.25) -> list[dict]:
    """Step time of tp on `link` beside the α-β model: tp's measured step on one rank ÷ tp (all
    compute splits, the optimistic part) + 4 ring all-reduces of (B, T, C) per block on the link, on
    `clock` (paced A100 time on the real link by default: `parlab.core.clock`), each row with its
    verdict (within `tolerance` of the model, or why not)."""
    import parlab
    from parlab.core import cost

    single = None  # tp on one rank: the same operators as at every degree, nothing sent
    rows = []
    for tp in sorted({1, world_size}):
        result = parlab.run("tp", world_size=tp, steps=steps + 1,
                            link=None if link == "loopback" else link, clock=clock)
        link_obj = result.config.link
        m, B = result.config.model_config, result.config.batch_size
        comm = 0.0
        if link_obj is not None and tp > 1:
            nbytes = B * m.block_size * m.n_embd * 4
            comm = 4 * m.n_layer * cost.all_reduce_time(nbytes, tp, link_obj.latency_s,
                                                        link_obj.bandwidth_Bps)
        single = single or result.step_time()
        measured, predicted = result.step_time(), single / tp + comm
        ok = abs(measured / predicted - 1) <= tolerance
        why = ""
        if not ok:
            why = ("this CPU, raw: ranks contend for its cores" if not result.clock.paced else
                   "slower than the model: not all compute splits by tp — every rank runs as many "
                   "operators as one (a tiny model's time is mostly its per-operator cost) and the "
                   "embeddings, norms and loss whole" if measured > predicted else
                   "faster than the model")
        rows.append({"tp": tp, "link": link, "clock": result.clock.label,
                     "measured_ms": measured * 1e3, "predicted_ms": predicted * 1e3,
                     "of_which_comm_ms": comm * 1e3,
                     "verdict": ("agrees" if ok else "does NOT agree") + f" (±{tolerance:.0%})"
                     + (f": {why}" if why else "")})
    return rows

