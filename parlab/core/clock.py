"""Paced time: every timing lesson on a named accelerator's clock, whatever else this CPU is doing.

Every chapter is about time, but a few shared CPU cores make a poor clock: four ranks of a tiny
model contend with each other, with gloo's threads and with whatever else runs, so a bubble or an
overlap shows one run and hides the next. `parlab.run(..., clock="A100")` replaces the CPU's clock
by a deterministic one; `clock="wall"` (the default) keeps the raw machine.

How a paced run keeps time
- **Compute** (`Timeline.span(kind="compute")`, so every forward, backward, optimizer and pipeline
  F/B/W span): while the span runs, a dispatch mode (`parlab.core.pacer.WorkMeter`) counts the
  aten operators it executes and their FLOPs (`torch.utils.flop_counter`'s formulas: matmuls,
  convolutions, attention). The span then lasts exactly

      paced seconds = M × Σ_op (c0 + FLOPs_op / F_ref) / speed

  — a *reference machine* that pays c0 = 30 µs per operator and computes F_ref = 20 GFLOP/s (a
  defined reference, not a measurement of this machine: a conservative bound of what one core of
  this class of CPU does, measured 9 µs/op and 30–85 GFLOP/s on the tiny GPT, docs/measurements.md;
  this run's own rate: `parlab.core.link.cpu_flops`), times a margin M = max(4, world_size) so that
  the real work stays well inside its paced span even with more ranks than cores. The real work
  runs first, then the rank sleeps to the span's paced end. `speeds=` (chapter 11's stragglers)
  divides on top. The count is a function of the operators and shapes alone: the same span lasts
  the same time on an idle laptop, a busy CI machine, or beside two CPU-burning processes.
- **Communication**: every emulated link is the real link dilated by the same N (α·N, β/N;
  `parlab.core.link`), where N = M × F_acc / F_ref: the accelerator (`ACCELERATORS`, sustained
  F_acc) is taken to run every operator F_acc / F_ref times faster than the reference machine, so
  compute and communication are both N times slower than on the accelerator and their ratio is
  the accelerator's on the real link ("A100 time ×N"). A preset name under a paced clock means the
  real link (NVLink, 100Gb-IB, ...), not the teaching preset (real ÷ 100); "NVLink" means the
  clock's accelerator's own generation (V100: NVLink 2, A100: NVLink 3, H100: NVLink 4).
- A communication issued inside a compute span first settles the compute done so far (the message
  leaves when the paced computation that made it is over) and the span's clock restarts when it
  returns, so a tensor-parallel all-reduce inside forward is paid once, on the link.
- **Debt, not drift**: a rank whose real work (or a late wake-up from a sleep) runs past its paced
  end owes that lateness (`parlab.core.pacer.Pacer.late`); its paced now is the real time less the debt
  (`Pacer.now`), from which its next span starts and its next message leaves, and the slack of
  the spans after it pays the debt back. An op waiting on peers completes at their *paced* issue
  times, read from the launch's board (`parlab.core.board`), so one rank's lateness is not its
  peers' either. Issuing an asynchronous op is free on the paced clock.

- **The host runs ahead of its device**: outside every compute span the rank's paced clock stands
  still at its last paced event (a span's end, a message's completion) until its next span starts
  or message leaves — as a GPU's stream waits for nothing while the host that launches its work
  asynchronously does its bookkeeping ("CUDA semantics: asynchronous execution", PyTorch docs). The
  real time the host spends there (slicing a batch, flattening gradients, zero_grad, a process
  the machine descheduled) is debt, paid from the next spans' slack, not paced time: on a busy
  machine it was the one way contention still reached a paced step (27-38 ms of a 540 ms step
  under three test streams on 2 cores). Code that spends real time on purpose as the device's
  (`Timeline.real_time()`: a backward inside DDP's reducer, an emulated wire's sleep) says so.

Results (losses, parameters, bytes) never change: only time does. What is not paced: the real
time inside `real_time()` blocks. With no emulated link (`link=None`) a message costs nothing on
the paced clock (it completes at its peers' paced issue times; gloo's loopback time is not
paced): pace a comparison of communication on a link.

Simplification, stated: the accelerator is modelled as uniformly F_acc / F_ref faster than the
reference machine on every operator. A real A100 runs a model this small launch-bound, with its
operators' fixed costs ~10× below a CPU's rather than 7,500×; what the paced clock keeps exact is
the ratio of compute to communication for a model whose time is its FLOPs, the regime of the
papers' clusters. `RunResult.pace` reports any span whose real work overran its paced time (the
one way contention can still show), so a run can say it stayed honest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from parlab.core.link import ACCELERATORS, REAL, Accelerator, Link, preset_name, real

OP_SECONDS = 30e-6  # c0: the reference machine's fixed cost per operator
REFERENCE_FLOPS = 20e9  # F_ref: the reference machine's FLOP/s
OVERRUN_TOLERANCE_S = 1e-3  # a segment whose real work ends later than this past its paced end overran
MIN_MARGIN = 4  # M at world sizes ≤ 4: real work stays well inside its span beside two CPU burners


@dataclass(frozen=True)
class Clock:
    """What time a run keeps: the wall clock (`accelerator` None), or paced time on `accelerator`
    with margin `margin` (M) and dilation N = M × F_acc / F_ref."""

    accelerator: Accelerator | None = None
    margin: float = 1.0

    @property
    def paced(self) -> bool:
        return self.accelerator is not None

    @property
    def dilation(self) -> float:
        """N: paced seconds per accelerator second (1 on the wall clock)."""
        return self.margin * self.accelerator.flops / REFERENCE_FLOPS if self.paced else 1.0

    @property
    def name(self) -> str:
        return self.accelerator.name if self.paced else "wall"

    @property
    def label(self) -> str:
        return (f"{self.accelerator.name} time ×{self.dilation:,.0f}" if self.paced
                else "this CPU, raw")

    def seconds(self, ops: int, flops: float, speed: float = 1.0) -> float:
        """Paced seconds of a compute span of `ops` operators and `flops` FLOPs at `speed`."""
        return self.margin * (ops * OP_SECONDS + flops / REFERENCE_FLOPS) / speed

    def accelerator_seconds(self, paced_seconds: float) -> float:
        """What `paced_seconds` of this run's time are on the accelerator itself (÷ N)."""
        return paced_seconds / self.dilation

    def __str__(self) -> str:
        return self.label


WALL = Clock()


def resolve(clock, world_size: int) -> Clock:
    """`clock=` of `parlab.run`: "wall", an accelerator's name ("A100", "H100", "V100"), an
    `Accelerator`, or a `Clock`; ValueError names anything else."""
    if isinstance(clock, Clock):
        return clock
    margin = float(max(MIN_MARGIN, world_size))
    if isinstance(clock, Accelerator):
        if not (clock.flops > 0 and math.isfinite(clock.flops)):
            raise ValueError(f"clock={clock!r}: its flops must be a finite number > 0")
        return Clock(clock, margin)
    if clock == "wall":
        return WALL
    if isinstance(clock, str) and clock in ACCELERATORS:
        return Clock(ACCELERATORS[clock], margin)
    raise ValueError(f"clock={clock!r} must be 'wall', one of {sorted(ACCELERATORS)} (paced time on "
                     "that accelerator) or a parlab.core.link.Accelerator")


# ----------------------------------------------------------------------------- links
def pace_link(link, clock: Clock):
    """The link a paced run emulates: the real link, α·N and β/N. A preset name or preset Link
    stands for its real link (`parlab.core.link.REAL`), not its teaching value (real ÷ 100); any
    other Link is taken as real; a `Topology` is paced pair by pair. Unchanged on the wall clock."""
    from parlab.core.topology import Topology

    if not clock.paced or link is None:
        return link
    if isinstance(link, Topology):
        return Topology(tuple(tuple(pace_link(p, clock) for p in row) for row in link.links),
                        f"{link.name}, {clock.label}", link.nodes)
    if link.dilation != 1.0:
        raise ValueError(f"link={link.name!r} is already dilated (×{link.dilation:,.0f}); with "
                         f"clock={clock.name!r} pass the real link: the clock dilates it")
    n = clock.dilation
    name = preset_name(link)
    if name in REAL:  # a teaching preset stands for its real link; "NVLink": the clock's generation
        real = real_link(name, clock.accelerator)
        return Link(real.latency_s * n, real.bandwidth_Bps / n,
                    f"{real.name[:-len(' (real)')]} as an {clock.name} sees it, time ×{n:,.0f}", n)
    return Link(link.latency_s * n, link.bandwidth_Bps / n, f"{link.name}, {clock.label}", n)


def real_link(name: str, accelerator=None) -> Link:
    """The real (undilated) link `name`, for a paced run: `parlab.run(..., link=real_link("1GbE"))`
    is what a preset name already means under a paced clock. "NVLink" is `accelerator`'s own
    generation (`parlab.core.link.nvlink_for`: the A100's NVLink 3 when none is given)."""
    link = real(name, accelerator)
    return Link(link.latency_s, link.bandwidth_Bps, f"{link.name} (real)")
