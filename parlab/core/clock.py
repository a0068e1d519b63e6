"""Virtual time: every timing lesson on a named accelerator's clock, and no rank ever sleeps.

`parlab.run(..., clock="A100")` keeps time the way simulators of real MPI programs do (SimGrid's
SMPI: Degomme et al., "Simulating MPI applications: the SMPI approach", IEEE TPDS 2017): the real
code runs as fast as this CPU allows, and each rank's time is a number it *computes*. Compute
spans cost the roofline price of the aten kernels they run (Williams, Waterman & Patterson,
"Roofline", CACM 2009):

    seconds = Σ_kernel (launch_s + max(FLOPs / F_acc, bytes / HBM_acc)) / speed

and a message or collective completes at the α-β time of its link after its last peer posted
(`parlab.core.board`, `parlab.core.comm`). Between spans the clock stands still. Results never
change, only time; runs are bit-reproducible (`tests/test_clock.py`). `clock="wall"` (the
default) keeps the raw machine.

Simplifications (no fusion, no cache, one launch cost, receives from several senders not
serialised, one start per collective) and how a rank keeps time: docs/core.md, `parlab.core.clock`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from parlab.core.link import ACCELERATORS, REAL, Accelerator, Link, preset_name, real


@dataclass(frozen=True)
class Work:
    """What a compute span ran, as the meter counts it (`parlab.core.pacer.count_work`): every
    aten operator (`ops`), their FLOPs, and each operator that launches a kernel — not a view,
    which only makes metadata, nor an empty allocation — as (FLOPs, bytes read and written), in
    the order they ran. `Clock.price` turns it into accelerator seconds."""

    ops: int = 0
    flops: float = 0.0
    kernels: tuple = ()  # ((FLOPs, bytes), ...) one per kernel

    def __add__(self, other: Work) -> Work:
        return Work(self.ops + other.ops, self.flops + other.flops, self.kernels + other.kernels)


@dataclass(frozen=True)
class Clock:
    """What time a run keeps: the wall clock (`accelerator` None), or virtual time on
    `accelerator`, in its own seconds."""

    accelerator: Accelerator | None = None
    # paced: each rank's pacer also keeps every priced segment's `Work` (its stats' "work"), a
    # trace that can be re-priced on another accelerator (`parlab.planner.trace_replay`)
    keep_work: bool = False

    @property
    def paced(self) -> bool:
        return self.accelerator is not None

    @property
    def name(self) -> str:
        return self.accelerator.name if self.paced else "wall"

    @property
    def label(self) -> str:
        return f"{self.accelerator.name} time" if self.paced else "this CPU, raw"

    @property
    def unit(self) -> str:
        """How a duration on this clock is read: "A100 ms" / "CPU ms"."""
        return f"{self.accelerator.name} ms" if self.paced else "CPU ms"

    def seconds(self, ops: int, flops: float, speed: float = 1.0) -> float:
        """Accelerator seconds of `ops` kernels that are all compute-bound with `flops` FLOPs in
        all, at `speed`: ops·launch_s + FLOPs / F (the analytic models' price of a count; a
        counted span is priced per operator, with its bytes: `price`). ValueError on the wall
        clock, which prices nothing."""
        acc = self._accelerator()
        return (ops * acc.launch_s + flops / acc.flops) / speed

    def price(self, work: Work, speed: float = 1.0) -> float:
        """Accelerator seconds of the counted `work` at `speed`: its kernels on the roofline,
        Σ_k (launch_s + max(FLOPs_k / F, bytes_k / HBM bandwidth)) / speed (views free)."""
        acc = self._accelerator()
        launch, rate, bandwidth = acc.launch_s, acc.flops, acc.hbm_Bps
        if bandwidth is None:  # an accelerator without a memory bandwidth: FLOPs alone
            return sum(launch + flops / rate for flops, _ in work.kernels) / speed
        return sum(launch + max(flops / rate, nbytes / bandwidth)
                   for flops, nbytes in work.kernels) / speed

    def _accelerator(self) -> Accelerator:
        if self.accelerator is None:
            raise ValueError("the wall clock prices no compute: Clock.seconds / Clock.price need "
                             "a paced clock (parlab.core.clock.resolve('A100'))")
        return self.accelerator

    def __str__(self) -> str:
        return self.label


WALL = Clock()


def resolve(clock, world_size: int = 1) -> Clock:
    """`clock=` of `parlab.run`: "wall", an accelerator's name ("A100", "H100", "V100"), an
    `Accelerator`, or a `Clock`; ValueError names anything else."""
    if isinstance(clock, Clock):
        return clock
    if isinstance(clock, Accelerator):
        if not (clock.flops > 0 and math.isfinite(clock.flops)):
            raise ValueError(f"clock={clock!r}: its flops must be a finite number > 0")
        if not (clock.launch_s >= 0 and math.isfinite(clock.launch_s)):
            raise ValueError(f"clock={clock!r}: its launch_s must be a finite number >= 0")
        return Clock(clock)
    if clock == "wall":
        return WALL
    if isinstance(clock, str) and clock in ACCELERATORS:
        return Clock(ACCELERATORS[clock])
    raise ValueError(f"clock={clock!r} must be 'wall', one of {sorted(ACCELERATORS)} (virtual time "
                     "on that accelerator) or a parlab.core.link.Accelerator")


# ----------------------------------------------------------------------------- links
def pace_link(link, clock: Clock):
    """The link a paced run prices: the real link. A preset name or preset Link stands for its
    real link (`parlab.core.link.REAL`), not its teaching value (real ÷ 100), and "NVLink" for the
    clock's accelerator's own generation; any other Link is taken as real; a `Topology` is paced
    pair by pair. Unchanged on the wall clock."""
    from parlab.core.topology import Topology

    if not clock.paced or link is None:
        return link
    if isinstance(link, Topology):
        return Topology(tuple(tuple(pace_link(p, clock) for p in row) for row in link.links),
                        f"{link.name}, {clock.label}", link.nodes)
    if link.dilation != 1.0:
        raise ValueError(f"link={link.name!r} is already dilated (×{link.dilation:,.0f}); with "
                         f"clock={clock.name!r} pass the real link: virtual time needs no dilation")
    name = preset_name(link)
    if name in REAL:
        return real_link(name, clock.accelerator)
    return link


def real_link(name: str, accelerator=None) -> Link:
    """The real link `name`, for a paced run: `parlab.run(..., link=real_link("1GbE"))` is what a
    preset name already means under a paced clock. "NVLink" is `accelerator`'s own generation
    (`parlab.core.link.nvlink_for`: the A100's NVLink 3 when none is given)."""
    link = real(name, accelerator)
    return Link(link.latency_s, link.bandwidth_Bps, f"{link.name} (real)")
