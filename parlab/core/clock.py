"""Virtual time: every timing lesson on a named accelerator's clock, and no rank ever sleeps.

Every chapter is about time, but a few shared CPU cores make a poor clock: four ranks of a tiny
model contend with each other, with gloo's threads and with whatever else runs, so a bubble or an
overlap shows one run and hides the next. `parlab.run(..., clock="A100")` keeps time the way
simulators of real MPI programs do (SimGrid's SMPI: Degomme et al., "Simulating MPI applications:
the SMPI approach", IEEE TPDS 2017): the real code runs as fast as this CPU allows, and each rank's
time is a number it *computes*, never a clock it reads or sleeps on. `clock="wall"` (the default)
keeps the raw machine, for lessons about this CPU itself.

How a rank keeps virtual time (`parlab.core.pacer.Pacer`, one per rank)
- **Compute** (`Timeline.span(kind="compute")`: every forward, backward, optimizer and pipeline
  F/B/W span): a dispatch mode counts the aten operators the span executes, each one's FLOPs
  (`torch.utils.flop_counter`'s formulas: matmuls, convolutions, attention) and the bytes it reads
  and writes (`torch.utils._runtime_estimation.get_num_bytes`: every input and output once), and
  the rank's time advances by the roofline price of its kernels (Williams, Waterman & Patterson,
  "Roofline", CACM 2009):

      seconds = Σ_kernel (launch_s + max(FLOPs / F_acc, bytes / HBM_acc)) / speed

  on the named accelerator (`parlab.core.link.ACCELERATORS`): `launch_s` its fixed cost per kernel
  (a launch, ~4 µs), F_acc the FLOP/s it sustains in training, HBM_acc its memory's bandwidth
  (datasheet), each with its source in `parlab.core.link` and docs/accelerators.md; a view or an
  empty allocation launches no kernel and is free; `speeds=` (chapter 11's stragglers) divides. A
  matmul at a real model's size is compute-bound; a layer norm, a softmax or the optimizer's
  element-wise update is memory-bound (`parlab.core.roofline` compares these prices with PyTorch's
  own estimator). The count is a function of the operators and shapes alone, so a span lasts the
  same on an idle laptop, a busy CI machine, or beside two CPU-burning processes — to the last bit.
- **Issuing** an asynchronous op is free. **A message or collective** completes at a computed time
  (`parlab.core.comm`, `parlab.core.board`): every rank posts, when it issues an op, the virtual
  time its link could start it — max(issue time, when the link direction it uses is free: messages
  sharing a direction are serialised, so contention is modelled) — on a board the ranks of a launch
  share. A collective starts when the last participant could (max of their posts) and takes the
  link's α-β time (`parlab.core.link.Link.cost`: k·α + bytes/β); a send completes when its bytes
  have left (eager, as a buffered send); a receive when they have arrived (the sender's post + α +
  n/β) or when it is posted, if later. A rank really blocks until its peers have posted (that costs
  no virtual time), and `wait()` advances it to max(now, completion). With no emulated link
  (`link=None`) communication is free and an op completes at its peers' posts.
- Between spans the clock stands still: the host's bookkeeping (slicing a batch, flattening
  gradients, a process the machine descheduled) is no device time, as a GPU's stream waits for
  nothing while the host that launches its work asynchronously does its bookkeeping ("CUDA
  semantics: asynchronous execution", PyTorch docs). Work the meter cannot see (PyTorch's own DDP
  reducer, an emulated wire) is priced by its code and added with `Pacer.advance`.

Results (losses, parameters, bytes) never change: only time does, and paced results are in the
accelerator's own seconds ("A100 ms"). Runs are bit-reproducible: the same configuration gives
the same timeline, every span and every message, whatever the machine does meanwhile
(`tests/test_clock.py`).

Simplifications, stated: every kernel costs the same launch time, its FLOPs run at the accelerator's
sustained rate and its bytes at the datasheet bandwidth, with no fusion (each aten operator is one
kernel, as in eager PyTorch) and no cache (every tensor crosses HBM); a rank's incoming messages
from several senders are not serialised against each other (each message occupies its sender's
outgoing direction; a collective both directions of every participant); a collective's participants
share one start. Without a board (a launch by torchrun across machines) a rank prices each op from
its own post alone.
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
