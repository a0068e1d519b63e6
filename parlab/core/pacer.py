"""One rank's virtual clock (`Pacer`) and what it counts (`WorkMeter`): the mechanism behind
`parlab.core.clock`'s virtual time, whose docstring says the rules (a compute span advances the
rank's time by its counted kernels' roofline price on the accelerator; the clock stands still
between spans; a communication completes at a computed time). `parlab.core.trace.Timeline` drives
a rank's `Pacer`; `count_work` counts a function the way a span would, for the models that price
work without a launch.

Nothing here reads a clock or sleeps: the rank's time is `Pacer.t`, a number.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

from parlab.core.clock import Clock, Work

_FREE: set = set()  # operators that launch no kernel (filled on first use)


def operator_work(func, args, kwargs, out) -> tuple[float, int | None]:
    """(FLOPs, bytes read and written) of one aten operator as the paced clock prices it; bytes
    None for an operator that launches no kernel — a view (it only makes metadata) or an empty
    allocation. FLOPs are `torch.utils.flop_counter`'s formulas; bytes PyTorch's own count
    (`torch.utils._runtime_estimation.get_num_bytes`: every input and output tensor once, a
    broadcast dimension of stride 0 not counted)."""
    from torch.utils.flop_counter import flop_registry

    if not _FREE:
        import torch
        from torch.utils._runtime_estimation import _VIEW_OPS

        aten = torch.ops.aten
        _FREE.update(_VIEW_OPS, {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty,
                                   aten.new_empty_strided})
    packet = func._overloadpacket
    count = flop_registry.get(packet)
    flops = count(*args, **kwargs, out_val=out) if count is not None else 0
    if func.is_view or packet in _FREE:
        return flops, None
    return flops, _tensor_bytes((args, kwargs, out))


def _tensor_bytes(tree) -> int:
    """`get_num_bytes` summed over every tensor in an operator's nested arguments and result:
    what `sum(get_num_bytes(t) for t in tree_leaves(tree) if isinstance(t, Tensor))` gives, without
    torch's generic pytree walk (a third of a paced rank's pricing time). An aten operator's
    arguments nest only in tuples (named ones and torch.return_types included), lists and dicts."""
    from torch import Tensor
    from torch.utils._runtime_estimation import get_num_bytes

    total, stack = 0, [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, Tensor):
            total += get_num_bytes(node)
        elif isinstance(node, (tuple, list)):
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())
    return total


def _work_meter_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class WorkMeter(TorchDispatchMode):
        """Counts the aten operators run under it, their FLOPs, and each kernel's (FLOPs, bytes)
        (`operator_work`), communication ops excluded."""

        def __init__(self):
            super().__init__()
            self.ops, self.flops, self.kernels = 0, 0, []
            self.counting = True  # False while a communication runs (its reductions are the link's)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if self.counting and func.namespace == "aten":
                flops, nbytes = operator_work(func, args, kwargs, out)
                self.ops += 1
                self.flops += flops
                if nbytes is not None:
                    self.kernels.append((flops, nbytes))
            return out

        def take(self) -> Work:
            """The work counted since the last take, and start again from nothing."""
            work = Work(self.ops, self.flops, tuple(self.kernels))
            self.ops, self.flops, self.kernels = 0, 0, []
            return work

    return WorkMeter


_METER = None
_OPEN_SPANS = [0]  # outermost compute spans open in this process (the heartbeat reads it)


def counting() -> bool:
    """Whether a paced compute span is counting operators in this process now: the heartbeat
    (`parlab.core.rank_process.thread_stack`) then leaves the main thread's frames alone."""
    return _OPEN_SPANS[0] > 0


def work_meter():
    """A fresh `WorkMeter` (a TorchDispatchMode; its class is built once, on first use)."""
    global _METER
    if _METER is None:
        _METER = _work_meter_class()
    return _METER()


def count_work(fn) -> Work:
    """The `Work` that `fn()` runs, as a paced compute span counts it: what the paced planner's
    profile (`parlab.planner.counted_profile`) and the heterogeneous chapter's paced rates
    (`parlab.heterogeneous.paced_model`) price with `Clock.price` instead of timing."""
    meter = work_meter()
    with meter:
        fn()
    return meter.take()


# ----------------------------------------------------------------------------- the pacer
@dataclass
class Pacer:
    """One rank's virtual clock, in accelerator seconds (`t`).

    `enter()` / `exit()` bracket a compute span (nested spans count once, in the outermost);
    `settle()` prices the compute counted so far and advances `t` by it (before a communication
    leaves, so the message leaves when the computation that made it is over); `resume(at)` goes on
    counting after the communication, from max(t, at); `advance(s)` adds time its caller priced
    (an emulated wire, PyTorch's own reducer)."""

    clock: Clock
    speed: float = 1.0
    t: float = 0.0  # the rank's virtual now
    depth: int = 0
    meter: object = None
    paced_s: float = 0.0  # compute priced so far
    spans: int = 0  # compute segments priced (stretches of compute between communications)
    ops: int = 0
    kernels: int = 0
    flops: float = 0.0
    advanced_s: float = 0.0  # time added by `advance` (priced by its caller)
    collecting: bool = True  # whether the garbage collector ran before the current span
    work: list | None = None  # clock.keep_work: (start, end, Work) of every priced segment

    def now(self) -> float:
        return self.t

    def enter(self) -> None:
        self.depth += 1
        if self.depth == 1:
            # no cyclic garbage collection inside a span: a collection runs finalizers in the
            # thread whose allocation triggered it, and one that ran an operator on this thread
            # would be counted or not by another thread's timing (a heartbeat's allocations)
            self.collecting = gc.isenabled()
            gc.disable()
            self.meter = work_meter()
            _OPEN_SPANS[0] += 1
            self.meter.__enter__()

    def exit(self) -> float | None:
        """Leave a compute span; the outermost prices it and returns its end (None: an inner
        span, or no operator ran in its last segment)."""
        end = None
        if self.depth == 1:
            self.meter.__exit__(None, None, None)
            _OPEN_SPANS[0] -= 1
            end = self.settle()
            self.meter = None
            if self.collecting:
                gc.enable()
        self.depth -= 1
        return end

    def settle(self) -> float | None:
        """Advance `t` by the price of the compute counted since the last settle; return the new
        `t` (None: no operator ran since, or not inside a span)."""
        if self.depth == 0 or self.meter is None:
            return None
        work = self.meter.take()
        self.meter.counting = False
        if work.ops == 0:
            return None
        seconds = self.clock.price(work, self.speed)
        if self.clock.keep_work:
            self.work = [] if self.work is None else self.work
            self.work.append((self.t, self.t + seconds, work))
        self.t += seconds
        self.paced_s += seconds
        self.spans += 1
        self.ops += work.ops
        self.kernels += len(work.kernels)
        self.flops += work.flops
        return self.t

    def resume(self, at: float | None = None) -> None:
        """A communication was issued or returned: the rank's time is max(t, `at`) (its
        completion), and a span around it counts compute again."""
        if at is not None:
            self.t = max(self.t, at)
        if self.depth > 0 and self.meter is not None:
            self.meter.counting = True

    def wait_until(self, at: float) -> None:
        """The rank waited for something that is free at virtual time `at` (a peer's message, the
        one processor two jobs share): its time is at least that."""
        self.t = max(self.t, at)

    def advance(self, seconds: float) -> None:
        """Add `seconds` its caller priced (an emulated wire's α + n/β, a reducer the meter
        cannot see): the rank was busy that long."""
        if not (seconds >= 0 and seconds < float("inf")):
            raise ValueError(f"seconds={seconds!r} must be a finite number >= 0")
        self.settle()
        self.t += seconds
        self.advanced_s += seconds
        if self.depth > 0 and self.meter is not None:
            self.meter.counting = True

    def stats(self) -> dict:
        return {"clock": self.clock.label, "segments": self.spans, "paced_s": self.paced_s,
                "advanced_s": self.advanced_s, "ops": self.ops, "kernels": self.kernels,
                "flops": self.flops,
                "end_s": self.t, **({"work": self.work or []} if self.clock.keep_work else {})}
