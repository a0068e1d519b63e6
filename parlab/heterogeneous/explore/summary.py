"""Notebook 11's measured summary and its "When to use it (from this run)": every figure printed
from this run's results (the sharding measurement of `explore.measure_shardings`, the backup sweep
of `explore.backup_sweep`, the two-node run of `explore.measure_topology`, the hetero-tp and HAP
step times of `explore.tp.measure_tp_shardings` and `explore.hap.measure_against_fixed`, the
searched program at GPT-2 XL's width and at the tiny one of `explore.hap_real`), each with its
verdict computed from the same run, never typed into markdown. The threshold: HAP's LP (Zhang et
al., EuroSys 2024) with this run's f and speeds (`shares.solve_lp`)."""

from __future__ import annotations

from parlab.heterogeneous import explore as ex
from parlab.heterogeneous import shares


def summary(measured: list[dict], sweep: list[dict]) -> None:
    by = {r["shard"]: r for r in measured}
    print(f"hetero-dp ({measured[0]['clock']}): step {by['even']['step_ms']:.1f} ms with even shares "
          f"{by['even']['rows']}, {by['proportional']['step_ms']:.1f} ms proportional "
          f"{by['proportional']['rows']}, {by['lp']['step_ms']:.1f} ms with the LP's {by['lp']['rows']} "
          f"(model {by['lp']['model_speedup']:.2f}× LP vs even; f = {measured[0]['fixed_rows']:.1f} rows)")
    ex.verdict(measured)
    if len(sweep) > 1:
        b0, b1 = sweep[0], sweep[1]
        faster = b0["step_ms"] / b1["step_ms"]
        print(f"backup workers: b={b1['backups']} steps {faster:.2f}× as fast as b=0, final loss "
              f"{b1['final_loss']:.4f} vs single {b1['single_loss']:.4f}; ranks ever dropped {b1['dropped']}")
        ok = faster > 1 and b1["dropped"]
        print("  verdict: " + ("the straggler was dropped and the step is shorter, as expected" if ok else
                               "NOT shorter: the dropped rank was not the bottleneck of this run"))
    else:
        print("backup workers: one rank, nothing to drop")


def no_rows_below(speeds, batch: int, fixed_rows: float) -> float | None:
    """The speed, as a fraction of the fastest, below which the slowest device gets no rows from
    HAP's LP: f / T*, T* the LP's step (in row-times) on the other devices alone — it would spend
    f/s ≥ T* on the work that does not shrink with the batch. None with a single device."""
    others = sorted(speeds)[1:]
    if not others:
        return None
    _, t_star = shares.solve_lp(batch, others, fixed_rows)
    return fixed_rows / t_star / max(speeds)


def shares_bullet(measured: list[dict], speeds) -> str:
    """Shares by speed: the LP's and proportional shares' speedups over even, measured, and the
    speed below which the LP gives a device nothing (`no_rows_below`), against what it gave."""
    by = {r["shard"]: r for r in measured}
    lp, prop = by["lp"], by["proportional"]
    slowest = min(range(len(speeds)), key=lambda r: speeds[r])
    floor = no_rows_below(speeds, sum(lp["rows"]), lp["fixed_rows"])
    line = (f"- shares by speed whenever the devices' speeds differ: at speeds {list(speeds)} the LP's "
            f"{lp['rows']} stepped {lp['speedup']:.2f}× as fast as even shares "
            f"({'faster' if lp['speedup'] > 1 else 'NOT faster here: see the verdict above'}), "
            f"proportional {prop['speedup']:.2f}×")
    if floor is not None:
        relative = speeds[slowest] / max(speeds)
        got = lp["rows"][slowest]
        agrees = (got == 0) == (relative < floor)
        line += (f"; with f = {lp['fixed_rows']:.1f} rows of work that does not shrink with the batch, "
                 f"the slowest device helps only if its b = s·T − f > 0 at a T below the others' own "
                 f"T*_others, i.e. s > f/T*_others = {floor:.2f}× the fastest (this f, batch and "
                 f"cluster only: the threshold moves with all three): the slowest here, at "
                 f"{relative:.2f}×, {'is' if relative < floor else 'is not'} below it and got {got} rows "
                 f"({'as derived' if agrees else 'NOT as derived: whole rows moved it'})")
    return line


def backup_bullet(measured: list[dict], sweep: list[dict]) -> str | None:
    """Backup workers against the LP's shares: each one's speedup over even shares (b = 0), which
    was larger, and the loss backup workers paid against `single`; None without a b > 0 run."""
    if len(sweep) < 2:
        return None
    b0, b1 = sweep[0], sweep[1]
    backup = b0["step_ms"] / b1["step_ms"]
    lp = {r["shard"]: r for r in measured}["lp"]["speedup"]
    gap = b1["final_loss"] / b1["single_loss"] - 1
    winner = ("LP shares won and stay exact: with known, steady speeds, prefer shares by speed" if lp > backup
              else "backup workers won: dropping the straggler beat re-sharding in this run")
    return (f"- backup workers (b = {b1['backups']}) stepped {backup:.2f}× as fast as b = 0, the LP's shares "
            f"{lp:.2f}× as fast as even — {winner}; backup workers pay where speeds are unknown or change "
            f"from step to step (they need no estimate), at a smaller batch: final loss {gap:+.2%} "
            f"against single here")


def link_bullet(two: list[dict]) -> str | None:
    """The slow link between nodes: the modelled all-reduce's share of the measured step on one
    node and on two, and the step's growth — shares by speed cannot shrink it; None without both
    runs."""
    by = {r["cluster"]: r for r in two}
    if not {"one node", "two nodes"} <= set(by):
        return None
    one, split = by["one node"], by["two nodes"]
    return (f"- shares fix slow devices, not slow links: on two nodes the all-reduce crossed "
            f"{split['link'].split(' (')[0]} and its model ({split['comm_ms']:.1f} ms) was "
            f"{split['comm_ms'] / split['step_ms']:.0%} of the step (one node: "
            f"{one['comm_ms'] / one['step_ms']:.0%}), the step {split['step_ms'] / one['step_ms']:.2f}× "
            f"one node's with the same rows {split['rows']}: once that share is large, send fewer bytes "
            f"across the slow link (chapter 08) rather than re-shard")


def tensor_bullet(tp_rows: list[dict], hap_rows: list[dict], real: dict | None = None,
                  tiny: dict | None = None, why: dict | None = None) -> str:
    """Tensor parallelism on unequal devices: hetero-tp's LP over even shares and the searched
    program over the fixed one (measured, direction computed), and the searched program's gain
    over replicating everything at GPT-2 XL's width and at the tiny one (`explore.hap_real.gain`),
    with the operators it kept replicated and why (`explore.hap_real.reasons`)."""
    tp = {r["shard"]: r for r in tp_rows}
    hap, fixed = hap_rows
    searched = fixed["step_ms"] / hap["step_ms"]
    shared = f"hetero-tp's LP shares stepped {tp['lp']['speedup']:.2f}× as fast as even ones"
    lead = (f"cut every layer by speed too: {shared}" if tp["lp"]["speedup"] > 1 else
            f"{shared}, NOT faster in this run (section 6's diagnosis says why)")
    line = (f"- in tensor parallelism, {lead}; HAP's searched program ran {searched:.2f}× as fast as the "
            f"fixed Megatron block ({'the search paid' if searched > 1 else 'the search did NOT pay here'})")
    if real is not None and tiny is not None and real["sharded"] == 0:
        line += ("; at GPT-2 XL's width on this clock the search replicated every operator (no "
                 "resharding paid for the slow device's share): no program lesson from this pair")
    elif real is not None and tiny is not None:
        pays = real["gain"] > 1.1 and tiny["gain"] < 1.1
        line += (f"; at GPT-2 XL's width on an A100 + V100 the search sharded {real['sharded']} of 7 "
                 f"operators ({real['program']!r}, the V100's share {real['slow_share']:.2f}), "
                 f"{real['gain']:.2f}× over replicating everything, on the tiny GPT "
                 f"{tiny['gain']:.2f}× (the V100's share {tiny['slow_share']:.2f}) — "
                 + ("search the program where matmuls' FLOPs, not launches, set the time" if pays else
                    "NOT the contrast expected in this run"))
        kept = [r for r in (why or {}).get("ops", []) if r["choice"] == "rep"]
        if kept:
            line += "; kept replicated there: " + ", ".join(
                f"{r['op']} ({r['alternative']} would save {r['would_save_ms']:.1f} ms of compute and "
                f"add {r['would_add_ms']:.1f} ms of communication)" for r in kept)
    return line


def when_to_use(measured: list[dict], speeds, sweep: list[dict], two: list[dict], tp_rows: list[dict],
                hap_rows: list[dict], real: dict | None = None, tiny: dict | None = None,
                why: dict | None = None) -> None:
    """Print "When to use it (from this run):" — shares by speed, backup workers, the slow link,
    tensor parallelism's shares and program — each with its threshold from this run."""
    print("When to use it (from this run):")
    for line in (shares_bullet(measured, speeds), backup_bullet(measured, sweep), link_bullet(two),
                 tensor_bullet(tp_rows, hap_rows, real, tiny, why)):
        if line:
            print(line)
