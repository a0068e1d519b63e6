"""The ZeRO stages as one engine: which model states a rank keeps whole, which it keeps 1/N of.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
SC 2020, §5: stage 1 (P_os) shards the optimizer state, stage 2 (P_os+g) also the gradients,
stage 3 (P_os+g+p) also the parameters. Units are cut as in `parlab.zero.shard`; stage 1
reduce-scatters a full flat gradient buffer after backward, stage 2 each unit's gradients as soon
as they are complete, stage 3 gathers a unit's parameters around its forward and again in its
backward (`GatherForBackward`; the order of FSDP, Zhao et al. VLDB 2023, Fig. 4). `prefetch=True`
(FSDP's prefetch, §3.3.2-§3.3.3) issues the next unit's all-gather and each reduce-scatter early:
the same bytes, the result unchanged, the next unit alive at once (`gathered_peak_bytes`).
Activation checkpointing composes. Each stage step by step: docs/zero.md,
`parlab.zero.zero_engine`.
"""

from __future__ import annotations

import torch

from parlab.core.cost import FP32_BYTES
from parlab.core.memory import optimizer_state_tensors, tensor_bytes
from parlab.zero.shard import FlatUnit, unit_modules

STAGES = (1, 2, 3)


def gathered_peak_bytes(order_numels: list[int], root_numel: int, prefetch: bool,
                        bytes_per: int = FP32_BYTES) -> int:
    """ZeRO-3's most gathered parameter bytes alive at once (padded unit sizes, in the order the
    units run): the root, gathered for the whole pass, plus one unit, or with prefetch the two
    consecutive units that are alive together (the current one and the next, already gathering)."""
    if not order_numels:
        return root_numel * bytes_per
    if not prefetch or len(order_numels) == 1:
        return (root_numel + max(order_numels)) * bytes_per
    pairs = max(a + b for a, b in zip(order_numels, order_numels[1:]))
    return (root_numel + pairs) * bytes_per


class GatherForBackward(torch.autograd.Function):
    """ZeRO-3's second all-gather, placed where backward enters a unit.

    Forward: identity on the unit's output, nothing moves. Backward: before the gradient flows into
    the unit, all-gather its parameters ((N-1)/N·P elements sent per rank); the gradient passes
    through unchanged."""

    @staticmethod
    def forward(ctx, output, unit):
        ctx.unit = unit
        return output.view_as(output)  # (same shape as the unit's output)

    @staticmethod
    def backward(ctx, grad):
        ctx.unit.engine.enter_backward(ctx.unit)
        return grad, None


class ShardedUnit(FlatUnit):
    """A FlatUnit plus the state the engine keeps for it on this rank."""

    def __init__(self, engine, *args):
        super().__init__(*args)
        self.engine = engine
        self.flat = None  # full flat parameters (stages 1, 2: persistent; stage 3: while gathered)
        self.flat_grad = None  # stage 1: the full flat gradient buffer
        self.shard = None  # this rank's (padded/N,) parameters: what the optimizer updates
        self.pending = 0  # parameters whose gradient has not arrived yet this backward
        self.in_backward = False
        self.gathering = None  # stage 3: the Handle of an all-gather in flight (a prefetch)
        self.scattering = None  # stage 3 with prefetch: the Handle of its gradient reduce-scatter


class ZeroEngine:
    """Shard `model`'s states over `comm` at ZeRO `stage`; train with forward/backward/step."""

    def __init__(self, model: torch.nn.Module, comm, stage: int, on_gather=None, on_release=None,
                 prefetch: bool = False, algo: str = "gloo"):
        if stage not in STAGES:
            raise ValueError(f"stage={stage!r} must be one of {STAGES}")
        self.model, self.comm, self.stage = model, comm, stage
        self.algo = algo  # "gloo" or "ring": who runs the all-gathers and reduce-scatters
        self.prefetch = prefetch and stage == 3
        self.forward_order: list = []  # units by pre-forward, recorded in the first forward
        self._recording: list = []  # this forward's pre-forward order, while it is recorded
        self._post_order: list = []  # this forward's post-forward order (backward runs it reversed)
        self.on_gather, self.on_release = on_gather, on_release
        # frozen parameters are not trained: they stay whole on every rank, outside the flat units
        # (FSDP's `ignored_params`), so no optimizer state, no weight decay, no bytes
        trainable = [(name, module, [(n, p) for n, p in params if p.requires_grad])
                     for name, module, params in unit_modules(model)]
        self.units = [ShardedUnit(self, name, module, params, comm.size, comm.rank)
                      for name, module, params in trainable if params]
        self.gathered_bytes = 0  # stage 3: bytes of gathered parameters alive now
        self.gathered_peak = 0
        self._handles = []
        for unit in self.units:
            flat = unit.flatten(unit.params)  # (padded,) the initial weights, same on every rank
            if stage == 3:
                unit.shard = flat[unit.lo:unit.hi].clone()  # (padded/N,) the only copy kept
                unit.release()
            else:
                unit.flat = flat
                unit.bind(flat)
                unit.shard = flat[unit.lo:unit.hi]  # (padded/N,) a view: updating it updates flat
            if stage == 1:
                unit.flat_grad = torch.zeros(unit.padded, dtype=flat.dtype)  # (padded,)
                unit.bind_grads(unit.flat_grad)
            if stage >= 2:
                for p in unit.params:
                    self._handles.append(p.register_post_accumulate_grad_hook(
                        lambda p, unit=unit: self._grad_arrived(unit)))
            if stage == 3:
                self._handles.append(unit.module.register_forward_pre_hook(
                    lambda module, args, unit=unit: self._pre_forward(unit)))
                self._handles.append(unit.module.register_forward_hook(
                    lambda module, args, out, unit=unit: self._post_forward(unit, out)))

    @property
    def shards(self) -> list[torch.Tensor]:
        return [unit.shard for unit in self.units]

    # ------------------------------------------------------------------ stage 3: parameters
    def start_gather(self, unit: ShardedUnit, phase: str) -> None:
        """Issue the unit's all-gather; its (padded,) output counts as gathered from now on."""
        if unit.flat is not None or unit.gathering is not None:
            return
        unit.gathering = self.comm.all_gather(unit.shard, phase=phase, algo=self.algo,
                                              async_op=True)  # (padded,) from N × (padded/N,)
        self.gathered_bytes += unit.shard.numel() * self.comm.size * unit.shard.element_size()
        self.gathered_peak = max(self.gathered_peak, self.gathered_bytes)

    def gather(self, unit: ShardedUnit, phase: str) -> None:
        """The unit's full parameters, bound: waits for its prefetch, or gathers now."""
        self.start_gather(unit, phase)
        if unit.gathering is None:
            return
        full = unit.gathering.wait()  # (padded,)
        unit.gathering = None
        unit.flat = full
        unit.bind(full)
        if self.on_gather is not None:
            self.on_gather(full)

    def _prefetch_after(self, unit: ShardedUnit, order: list, phase: str) -> None:
        """Start gathering the unit that runs after `unit` in `order` (FSDP's prefetch)."""
        if unit in order and (i := order.index(unit)) + 1 < len(order):
            self.start_gather(order[i + 1], phase)

    def release(self, unit: ShardedUnit) -> None:
        if unit.flat is None:
            return
        if self.on_release is not None:
            self.on_release(unit.flat)
        self.gathered_bytes -= unit.flat.numel() * unit.flat.element_size()
        unit.flat = None
        unit.release()

    def _pre_forward(self, unit: ShardedUnit) -> None:
        if unit.flat is None:  # a recomputation (activation checkpointing) finds it gathered
            self.gather(unit, "param-gather-fwd")
        if unit.in_backward:
            return
        if not self.forward_order:
            self._recording.append(unit)
        if self.prefetch:
            self._prefetch_after(unit, self.forward_order, "param-gather-fwd")

    def _post_forward(self, unit: ShardedUnit, out):
        if unit.in_backward:  # a recomputation: keep the parameters for the backward under way
            return out
        if not torch.is_tensor(out):
            raise TypeError(f"ZeRO-3 unit {unit.name} returned {type(out).__name__}, not a tensor")
        self.release(unit)
        self._post_order.append(unit)
        return GatherForBackward.apply(out, unit)

    def enter_backward(self, unit: ShardedUnit) -> None:
        unit.in_backward = True
        if unit.flat is None:
            self.gather(unit, "param-gather-bwd")
        if self.prefetch:
            self._prefetch_after(unit, self._post_order[::-1], "param-gather-bwd")

    # ------------------------------------------------------------------ gradients
    def _grad_arrived(self, unit: ShardedUnit) -> None:
        unit.pending -= 1
        if unit.pending == 0:
            self._reduce_scatter(unit)

    def _reduce_scatter(self, unit: ShardedUnit) -> None:
        """Average the unit's gradient over ranks, keep this rank's chunk as the shard's grad."""
        flat_grad = unit.flat_grad if self.stage == 1 else unit.flatten([p.grad for p in
                                                                         unit.params])
        if self.prefetch:  # FSDP: the reduce-scatter travels while backward goes on
            unit.scattering = self.comm.reduce_scatter(flat_grad, op="avg", async_op=True,
                                                       algo=self.algo,
                                                       phase="grad-reduce-scatter")  # (padded/N,)
            for p in unit.params:
                p.grad = None
            unit.in_backward = False
            self.release(unit)
            return
        shard_grad = self.comm.reduce_scatter(flat_grad, op="avg", algo=self.algo,
                                              phase="grad-reduce-scatter")  # (padded/N,)
        if self.stage == 1:
            unit.flat_grad[unit.lo:unit.hi].copy_(shard_grad)  # (padded/N,) own chunk, averaged
            unit.shard.grad = unit.flat_grad[unit.lo:unit.hi]
            return
        unit.shard.grad = shard_grad
        for p in unit.params:
            p.grad = None
        if self.stage == 3:
            unit.in_backward = False
            self.release(unit)

    def start_step(self) -> None:
        for unit in self.units:
            unit.pending = len(unit.params)
        if self._recording and not self.forward_order:
            self.forward_order = self._recording  # the first forward's order, kept from now on
        self._post_order = []

    def end_backward(self) -> None:
        """Stage 1 reduce-scatters here; stages 2, 3 reduce the units that backward left pending
        (parameters that got no gradient this step count as zeros). Every rank must leave the
        same units pending — the same parameters unused — or the collectives would be issued in
        different orders; the data-parallel library (`parlab.data_parallel.api`) handles
        parameters unused on some ranks only."""
        for unit in self.units:
            if self.stage == 1 or unit.pending:
                self._reduce_scatter(unit)
        for unit in self.units:
            if unit.scattering is not None:
                unit.shard.grad = unit.scattering.wait()  # (padded/N,) this rank's averaged chunk
                unit.scattering = None

    def after_step(self) -> None:
        """Stages 1, 2: all-gather the updated shards into the full parameters."""
        if self.stage == 3:
            return
        for unit in self.units:
            full = self.comm.all_gather(unit.shard, phase="param-all-gather",
                                        algo=self.algo)  # (padded,)
            unit.flat.copy_(full)

    def zero_grad(self) -> None:
        for unit in self.units:
            unit.shard.grad = None
            if unit.flat_grad is not None:
                unit.flat_grad.zero_()
                unit.bind_grads(unit.flat_grad)

    # ------------------------------------------------------------------ measurement
    def memory(self, optimizer) -> dict:
        """Bytes this rank holds now (live tensors, padding included; views counted once)."""
        params = list(self.model.parameters()) + self.shards
        grads = [p.grad for p in params if p.grad is not None]
        return {"params": tensor_bytes(params), "grads": tensor_bytes(grads),
                "optimizer": tensor_bytes(optimizer_state_tensors(optimizer)),
                "gathered_peak": self.gathered_peak,
                "padding": sum((u.padded - u.numel) * u.shard.element_size() for u in self.units)}
