"""What `parlab.run` returns: `RunResult`, the run assembled in the parent.

The losses (every rank's share summed), the assembled state, every rank's ledger records and
timeline, measured memory, wall and per-step times, and the `RunConfig` it ran; with the views a
notebook reads off it (`bytes_per_rank`, `ledger_frame`, `compare` against another run, `summary`,
`step_time`, and on a paced clock `pace`, what the virtual clocks counted). Assembled by
`parlab.engine.runner.run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parlab.engine.run_config import RunConfig


@dataclass
class RunResult:
    losses: list[float] | None  # None: a shapes-only run computes no numbers
    state: dict | None
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

    @property
    def over_memory(self) -> list[int]:
        """Paced runs: the ranks whose measured peak (parameters, gradients, optimizer state,
        communication buffers, activations) exceeds the clock's accelerator's memory — what a
        shapes-only run of a real model says of its plan (empty: every rank fits)."""
        limit = self.clock.accelerator.memory_bytes if self.clock.paced else None
        if limit is None:
            return []
        return [rank for rank, kinds in enumerate(self.memory) if sum(kinds.values()) > limit]

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
        if self.config.shapes_only or getattr(getattr(reference, "config", None), "shapes_only",
                                              False):
            raise ValueError("a shapes-only run (shapes_only=True) computed no losses and no "
                             "parameters, only shapes, bytes and virtual time: there is nothing to "
                             "compare; compare its ledger, step_times and memory instead")
        from parlab.engine.verify import compare
        return compare(self, reference, rtol)

    def summary(self) -> str:
        sent = self.bytes_per_rank()
        lines = [f"{self.config.scheme} on {self.config.world_size} rank(s), model "
                 f"{self.config.preset or self.config.model}, {self.config.steps} steps, {self.wall_s:.2f} s"
                 + ("" if self.config.precision == "fp32" else
                    f", {self.config.precision} (skipped steps: {self.skipped_steps})")]
        if self.clock.paced:
            lines.append(f"  clock: {self.clock.label} (virtual); step time "
                         f"{self.step_time() * 1e3:.4g} {self.clock.unit}")
        lines += [f"  step {i}: loss {loss:.6f}" for i, loss in enumerate(self.losses or [])]
        if self.losses is None:
            lines.append("  shapes only: no losses or parameters were computed")
        if getattr(self.config.model_config, "routing", None) == "even":  # gpt-moe's EvenPlan
            lines.append("  routing: even — every expert the same number of tokens, by their "
                         "places, not by the router's scores")
        lines += [f"  rank {r}: {b:,} bytes sent in {sum(1 for x in self.ledger if x['rank'] == r)}"
                  " comm ops" for r, b in enumerate(sent)]
        return "\n".join(lines)


    def save_trace(self, path):
        """Write the run's timeline as a Chrome/Perfetto trace (JSON: one event per span, one
        process per rank, one thread per kind) to `path`, e.g. "trace.json", to open in
        ui.perfetto.dev or chrome://tracing; the path written (`parlab.core.trace.save_trace`)."""
        from parlab.core.trace import save_trace

        return save_trace(self.timeline, path)

    @property
    def clock(self):
        """The run's `parlab.core.clock.Clock` (its `.label`: "A100 time" or "this CPU, raw")."""
        return self.config.clock

    @property
    def pace(self) -> dict:
        """A paced run's virtual clocks, over all ranks: compute segments priced (stretches of
        compute between communications), their seconds (`paced_s`), time added by code that
        prices its own work (`advanced_s`), operators and FLOPs counted, and the latest rank's
        final time (`end_s`). Empty on the wall clock."""
        stats = [out.pace for out in self.outputs if getattr(out, "pace", None)]
        if not stats:
            return {}
        return {"clock": stats[0]["clock"], "segments": sum(s["segments"] for s in stats),
                "paced_s": sum(s["paced_s"] for s in stats),
                "advanced_s": sum(s["advanced_s"] for s in stats),
                "ops": sum(s["ops"] for s in stats), "flops": sum(s["flops"] for s in stats),
                "end_s": max(s["end_s"] for s in stats)}

    def step_time(self, warmup: int = 1) -> float:
        """Median seconds per step, leaving out the first `warmup` steps (when there are more)."""
        import statistics
        times = self.step_times[warmup:] if len(self.step_times) > warmup else self.step_times
        return statistics.median(times) if times else float("nan")
