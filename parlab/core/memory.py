"""Measured memory per rank: bytes of parameters, gradients, optimizer state and activations.

Nothing here evaluates a formula: it sums the bytes of the tensors a rank really holds.
Tensors that share storage (views, tied weights) count once. Activations are the tensors autograd
saves for backward, seen through `torch.autograd.graph.saved_tensors_hooks` (the mechanism
activation checkpointing and offloading are built on): `ActivationMeter` adds a tensor's storage
when it is saved and subtracts it when the last saved reference dies, and keeps the peak — the
number that ZeRO's and Megatron's activation formulas predict (Korthikanti et al. 2022, §4).
Parameters saved for backward are not activations and are left out.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import torch

from parlab.core.shapes import is_fake


def storage_key(t: torch.Tensor) -> int:
    """Which storage `t` views (views and tied weights share it): its data's address; a fake
    tensor's (shapes-only, `parlab.core.shapes`) has no data, so its storage's own identity."""
    storage = t.untyped_storage()
    return storage._cdata if is_fake(t) else storage.data_ptr()


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (a storage shared by views counts once)."""
    seen, total = set(), 0
    for t in tensors:
        if t is None or not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        key = storage_key(t)
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def optimizer_state_tensors(optimizer) -> list[torch.Tensor]:
    """The optimizer's state tensors, and in mixed precision its fp32 master weights
    (`parlab.core.precision.MasterWeights`: the ZeRO paper counts them as optimizer state, K=12)."""
    masters = list(getattr(optimizer, "master_weights", {}).values())
    return [v for state in optimizer.state.values() for v in state.values()
            if isinstance(v, torch.Tensor) and v.numel() > 1] + masters  # skip scalar step counters


def model_memory(params: Iterable[torch.Tensor], optimizer=None, extra_grads=()) -> dict:
    """Bytes of parameters, their gradients and the optimizer state a rank holds right now."""
    params = list(params)
    grads = [p.grad for p in params if p.grad is not None] + list(extra_grads)
    return {
        "params": tensor_bytes(params),
        "grads": tensor_bytes(grads),
        "optimizer": tensor_bytes(optimizer_state_tensors(optimizer)) if optimizer else 0,
    }


class ActivationMeter:
    """Live and peak bytes of tensors saved for backward while the meter is entered."""

    def __init__(self, exclude: Iterable[torch.Tensor] = ()):
        self.excluded = {storage_key(p) for p in exclude}
        self.live: dict[int, list] = {}  # storage -> [bytes, number of live saved tensors]
        self.current = 0
        self.peak = 0
        self._hooks = None

    def exclude(self, tensors: Iterable[torch.Tensor]) -> None:
        self.excluded.update(storage_key(t) for t in tensors)

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]

    def _pack(self, t: torch.Tensor):
        if t.numel() == 0 or t.device.type == "meta":
            return t
        key = storage_key(t)
        if key in self.excluded:
            return t
        entry = self.live.get(key)
        if entry is None:
            nbytes = t.untyped_storage().nbytes()
            self.live[key] = [nbytes, 1]
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        else:
            entry[1] += 1
        weakref.finalize(t, self._release, key)
        return t

    def track(self, *tensors: torch.Tensor) -> None:
        """Count tensors kept alive for backward outside autograd's saved tensors (e.g. a
        zero-bubble stash held until the weight-gradient step), until they die."""
        for t in tensors:
            self._pack(t)

    def reset_peak(self) -> None:
        self.peak = self.current

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        self._hooks = None
        return False
