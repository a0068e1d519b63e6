"""What `parlab.run` returns: `RunResult`, the run assembled in the parent.

The losses (every rank's share summed), the assembled state, every rank's ledger records and
timeline, measured memory, wall and per-step times, and the `RunConfig` it ran; with the views a
notebook reads off it (`bytes_per_rank`, `ledger_frame`, `compare` against another run, `summary`,
`step_time`, and on a paced clock `pace`, the honesty check of paced time). Assembled by
`parlab.engine.runner.run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parlab.engine.run_config import RunConfig


@dataclass
class RunResult:
    losses: list[float]
    state: dict
    ledger: list[dict]
    timeline: list[dict]
    memory: list[dict]
    wall_s: float
    config: RunConfig
    step_times: list[float] = field(default_factory=list)  # seconds per step, the slowest rank's
    outputs: list = field(default_factory=list, repr=False)  # every rank's RankResult

    @property
    def nonfinite(self) -> list[dict]:
        """on_nonfinite="record": every rank's first non-finite loss, gradient or final
        parameter, as {"step", "rank", "loss", "tensor", "where"} (empty when the run stayed
        finite); "where" says what was not finite: the loss, this rank's own gradient (it was
        born there) or the gradient after the sync (a peer's: `parlab.core.launch.CAUSED_BY_PEER`)."""
        return [event for out in self.outputs for event in getattr(out, "nonfinite", [])]

    @property
    def diverged(self) -> bool:
        """Whether a NaN or an infinity was recorded (on_nonfinite="record"; "raise" never returns one)."""
        return bool(self.nonfinite)

    @property
    def skipped_steps(self) -> list[int]:
        """fp16-mixed: the steps whose update was skipped (gradient overflow; the same on every
        rank: the decision is all-reduced)."""
        return list(self.outputs[0].skipped) if self.outputs else []

    @property
    def loss_scales(self) -> list[float]:
        """fp16-mixed: the loss scale S each step used (empty otherwise)."""
        return list(self.outputs[0].loss_scales) if self.outputs else []

    def bytes_per_rank(self, key: str = "bytes_sent", **match) -> list[int]:
        """Sum of `key` over ledger records matching `match` (op=..., phase=...), per rank."""
        totals = [0] * self.config.world_size
        for r in self.ledger:
            if all(r.get(k) == v for k, v in match.items()):
                totals[r["rank"]] += r[key]
        return totals

    def ledger_frame(self):
        import pandas as pd
        return pd.DataFrame(self.ledger)

    def compare(self, reference: RunResult, rtol: float | None = None):
        from parlab.engine.verify import compare
        return compare(self, reference, rtol)

    def summary(self) -> str:
        sent = self.bytes_per_rank()
        lines = [f"{self.config.scheme} on {self.config.world_size} rank(s), model "
                 f"{self.config.model}, {self.config.steps} steps, {self.wall_s:.2f} s"
                 + ("" if self.config.precision == "fp32" else
                    f", {self.config.precision} (skipped steps: {self.skipped_steps})")]
        if self.clock.paced:
            pace = self.pace
            lines.append(f"  clock: {self.clock.label}; step time {self.step_time():.4f} s paced "
                         f"= {self.clock.accelerator_seconds(self.step_time()) * 1e6:.1f} µs on the "
                         f"{self.clock.name}; contention overran {pace['overrun_share']:.1%} of "
                         "paced compute")
        lines += [f"  step {i}: loss {loss:.6f}" for i, loss in enumerate(self.losses)]
        lines += [f"  rank {r}: {b:,} bytes sent in {sum(1 for x in self.ledger if x['rank'] == r)}"
                  " comm ops" for r, b in enumerate(sent)]
        return "\n".join(lines)


    @property
    def clock(self):
        """The run's `parlab.core.clock.Clock` (its `.label`: "A100 time ×N" or "this CPU, raw")."""
        return self.config.clock

    @property
    def pace(self) -> dict:
        """A paced run's honesty check, over all ranks: compute segments (stretches of compute
        between communications), how many overran their paced time (real work, or this rank
        descheduled, longer than the paced span), the seconds they added, and that as a share of
        all paced compute (`overrun_share`): a debt the slack of later spans pays back
        (`parlab.core.clock`), so it moves paced time only while unpaid — `late_s`, the largest
        debt a rank ended with; `real_waits`, the waits charged the real time because a peer's
        paced time was not on the board (0 on a launch with an emulated link). Empty on the wall
        clock."""
        stats = [out.pace for out in self.outputs if getattr(out, "pace", None)]
        if not stats:
            return {}
        paced = sum(s["paced_s"] for s in stats)
        overrun = sum(s["overrun_s"] for s in stats)
        return {"clock": stats[0]["clock"], "segments": sum(s["segments"] for s in stats),
                "overruns": sum(s["overruns"] for s in stats), "paced_s": paced,
                "overrun_s": overrun, "overrun_share": overrun / paced if paced else 0.0,
                "worst_real_over_paced": max(s["worst_real_over_paced"] for s in stats),
                "real_waits": sum(s.get("real_waits", 0) for s in stats),
                "late_s": max(s.get("late_s", 0.0) for s in stats)}

    def step_time(self, warmup: int = 1) -> float:
        """Median seconds per step, leaving out the first `warmup` steps (when there are more)."""
        import statistics
        times = self.step_times[warmup:] if len(self.step_times) > warmup else self.step_times
        return statistics.median(times) if times else float("nan")
