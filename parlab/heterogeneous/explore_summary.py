"""Notebook 11's measured summary: every figure printed from this run's results (the sharding
measurement of `explore.measure_shardings` and the backup sweep of `explore.backup_sweep`), each
with its verdict computed from the same run, never typed into markdown."""

from __future__ import annotations

from parlab.heterogeneous import explore as ex


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
