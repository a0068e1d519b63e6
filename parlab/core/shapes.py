"""Shapes-only execution: a scheme's own code on tensors that have shapes, dtypes and strides but
no data, so a laptop can run a step of a model of billions of parameters on its virtual clock.

PyTorch's `FakeTensorMode` runs every operator's meta kernel, and the paced clock's meter
(`parlab.core.pacer.WorkMeter`) counts the same operators and FLOPs as on real tensors. `NoValues`
answers what needs a value with a placeholder (1 for numbers, True for booleans), so a
shapes-only run returns no losses (`RunResult.losses` is None, and says why); a communication
skips gloo but posts on the board and is priced and recorded with its real bytes. A scheme
declares `shapes=True` when it registers, once a test holds its shapes-only run equal to its real
paced run (same ledger, step times, memory). In full: docs/core.md, `parlab.core.shapes`.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

_FAKE_TENSOR = None


def is_fake(tensor) -> bool:
    """Whether `tensor` is a fake tensor (shapes only, no data)."""
    global _FAKE_TENSOR
    if _FAKE_TENSOR is None:
        from torch._subclasses.fake_tensor import FakeTensor

        _FAKE_TENSOR = FakeTensor
    return isinstance(tensor, _FAKE_TENSOR)


def _no_values_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class NoValues(TorchDispatchMode):
        """Above a FakeTensorMode: a scalar read gives a placeholder (1, or True for a bool)."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                (tensor,) = args
                if tensor.dtype == torch.bool:
                    return True
                return 1.0 if tensor.is_floating_point() else 1
            return func(*args, **(kwargs or {}))

    return NoValues


@contextmanager
def shapes():
    """Everything inside runs on fake tensors: tensors made here have no data; real tensors that
    enter an operator (a dataset already in memory) are taken by their shapes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True), _no_values_class()():
        yield
