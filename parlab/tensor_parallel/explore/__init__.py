"""What chapter 03's parts 4-8 and 11 run (tensor and sequence parallelism): correctness, the
ledger against the formula, memory, step times beside PyTorch's, the widget callback.
Megatron-LM (Shoeybi et al. 2019), sequence parallelism (Korthikanti et al., MLSys 2023).
Part 9 (resharding, paced) is `explore.reshard_paced` and `explore.reshard_paced_show`, the
figures of parts 1 and 10 `explore.figures`.
"""

from __future__ import annotations

import statistics


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
        rows.append({"scheme": scheme, "tp": tp, "clock": result.clock.label,
                     "step_ms": step * 1e3, "vs_tp": step / base,
                     "tp_MB_per_step": tp_bytes / (steps + 1) / 1e6,
                     # a run that does not measure activations (torch-tp's DTensor) records 0: n/a
                     "activations_kB": result.memory[0].get("activations") / 1e3
                     if result.memory[0].get("activations") else float("nan"),
                     "match": result.compare(reference).match,
                     "max_param_diff": result.compare(reference).max_param_diff})
    rows.append({"scheme": "single", "tp": 1, "clock": reference.clock.label,
                 "step_ms": reference.step_time()
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


def print_rows(rows: list[dict]) -> None:
    """A table of rows; a column with no value at all (a prediction on loopback) is left out,
    a missing cell (a measurement the run did not make) prints as "n/a", never 0."""
    import pandas as pd
    frame = pd.DataFrame(rows).dropna(axis="columns", how="all")
    with pd.option_context("display.width", 140, "display.precision", 3):
        print(frame.to_string(index=False, na_rep="n/a"))


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
    """Measured activation bytes per rank (one step) beside `parlab.tensor_parallel.cost.activation_bytes`,
    each row with its `sequence_parallel` and `regather` flags (what the run's options were)."""
    import parlab
    from parlab.engine.registry import get_scheme
    from parlab.tensor_parallel.cost import activation_bytes

    rows = []
    for scheme, options in [("single", {}), ("tp", {}), ("tp-sp", {"regather": False}),
                            ("tp-sp", {})]:
        n = 1 if scheme == "single" else world_size
        result = parlab.run(scheme, world_size=n, steps=1, **options)
        tp = result.outputs[0].extras.get("tp", 1)
        sp = get_scheme(scheme).sequence_parallel
        formula = activation_bytes(result.config.model_config, result.config.batch_size
                                   // result.outputs[0].extras.get("dp", 1), tp, sp,
                                   options.get("regather", True))
        label = scheme + ("" if options.get("regather", True) else " (keep gathered)")
        rows.append({"scheme": label, "tp": tp, "measured_bytes": result.memory[0]["activations"],
                     "formula_bytes": formula, "sequence_parallel": sp,
                     "regather": options.get("regather", True)})
    return rows


def panel(world_size: int, link: str, sp: bool, steps: int = 2, clock: str = "A100") -> None:
    """Widget callback: tp or tp-sp on `world_size` ranks over `link`, against single, on `clock`
    (paced time of that accelerator on the real link: "NVLink" is its own generation)."""
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
    print(f"step time {result.step_time(warmup=0) * 1e3:.3g} {result.clock.unit} on {link} "
          f"({result.clock.label})")


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
