"""Backup workers: the step uses the first N−b gradients to arrive and drops the stragglers'.

Chen, Pan, Monga, Bengio & Jozefowicz, "Revisiting Distributed Synchronous SGD" (2016): with b
backup workers a synchronous step waits for the fastest N−b of N gradients, so the tail of slow
workers stops setting the pace. The update, (1/(N−b)) Σ_{r used} ∇L_r, is an unbiased gradient of
a smaller batch (rows are i.i.d.): not `single`'s, so the scheme is not exact; b = 0 equals `single`.

Arrival is emulated from `speeds=` (parlab.core.speeds): a_r = start + c/s_r, c the work's CPU
seconds (wall clock) or its accelerator price (paced clock); the ranks all-gather the N arrival
times (conservative synchronisation, Chandy & Misra 1979) and all pick the same N−b earliest,
then one all-reduce (op=sum) of the weighted gradients. The argument and the emulation in full:
docs/heterogeneous.md, `parlab.heterogeneous.backup`.
"""

from __future__ import annotations

import time

import torch

from parlab.core import speeds as speeds_mod
from parlab.core.pacer import work_meter
from parlab.heterogeneous.weighted import WeightedShards


class BackupWorkers(WeightedShards):
    """Even shards; each step's gradient is the mean over the first N−b ranks to finish."""

    def __init__(self, ctx, model, optimizer, rows: list[int], backups: int):
        super().__init__(ctx, model, optimizer, rows)
        self.backups = backups
        self.used_per_step: list[list[int]] = []

    def forward_backward(self, step: int, batch) -> float:
        ctx, timeline, pacer = self.ctx, self.ctx.timeline, self.ctx.timeline.pacer
        if pacer is None:  # the wall clock: the work's CPU seconds ÷ speed (parlab.core.speeds)
            t_start, cpu_start = time.perf_counter(), time.thread_time()
            with timeline.span("forward", step=step), self.meter:
                loss = self.loss(batch)  # mean over this rank's B/N rows
            with timeline.span("backward", step=step), self.meter:
                loss.backward()  # ∇L_r, weighted once the used ranks are known
            t_real = time.perf_counter()
            cpu = time.thread_time() - cpu_start
            arrival = max(t_real, t_start + cpu / speeds_mod.speed_of(ctx.cfg, ctx.rank))
            start = t_real  # the emulated rest of the compute, after the real part
        else:
            # Paced: the work is priced, not timed (`Clock.price`, as a compute span
            # is), from the rank's virtual now; no span here (a span would move the rank's time
            # to its own end, where a dropped rank stops at the cutoff instead). The real time it
            # takes is host time, on a clock that stands still.
            t_start = start = timeline.now()
            meter = work_meter()
            with meter:
                with self.meter:
                    loss = self.loss(batch)  # mean over this rank's B/N rows
                with self.meter:
                    loss.backward()  # ∇L_r, weighted once the used ranks are known
            arrival = t_start + pacer.clock.price(meter.take(), pacer.speed)
        with ctx.ledger.label(phase="arrivals"):
            times = ctx.comm.all_gather(torch.tensor([arrival], dtype=torch.float64))  # (N,) fp64
        n = ctx.world_size
        order = sorted(range(n), key=lambda r: (float(times[r]), r))
        used = sorted(order[:n - self.backups])
        cutoff = float(times[order[n - self.backups - 1]])  # the (N−b)-th arrival ends the compute
        self.used_per_step.append(used)
        wake = arrival if ctx.rank in used else cutoff
        if pacer is not None:
            timeline.wait_until(wake)  # busy (or abandoning its work) until then: virtual time
            end = wake
        else:
            speeds_mod.sleep_until(wake)  # the emulated rest of the compute, in real time
            end = max(start, time.perf_counter())
        timeline.add("compute", "backward" if ctx.rank in used else "abandoned", start, end,
                     step=step, emulated=True)
        used_rows = sum(self.rows[r] for r in used)
        self.weight = self.rows[ctx.rank] / used_rows if ctx.rank in used else 0.0  # b_r / Σ_used b
        return loss.item() * self.weight

    def sync(self, step: int) -> None:
        flat = self.flat_grad() * self.weight  # (Ψ,) b_r/Σ_used b · ∇L_r, zeros if dropped
        with self.ctx.ledger.label(phase=self.phase):
            self.ctx.comm.all_reduce(flat, op="sum")  # (Ψ,) the mean over the used ranks' rows
        self.unflatten(flat)

    def extras(self) -> dict:
        return {"rows": self.rows, "used": self.used_per_step}
