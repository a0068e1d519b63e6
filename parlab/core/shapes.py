"""Shapes-only execution: a scheme's own code on tensors that have shapes, dtypes and strides but
no data, so a laptop can run a step of a model of billions of parameters on its virtual clock.

PyTorch's `FakeTensorMode` (torch._subclasses.fake_tensor) runs every operator's meta kernel:
forward, backward, autograd hooks and optimizers produce fake tensors of the right shapes, and the
paced clock's meter (`parlab.core.pacer.WorkMeter`, above it in the mode stack) counts the same
operators and FLOPs it counts on real tensors. What needs a value has none, so `shapes()` stacks
one more mode above the fake one, `NoValues`:

- reading a scalar (`.item()`, `bool(t)`, the loop's loss share and finiteness checks) gives a
  placeholder: 1 for numbers (a step count, a divisor: never a division by zero), True for
  booleans. Results that depend on values (losses, final
  parameters) are therefore not results: `parlab.run(..., shapes_only=True)` returns none
  (`RunResult.losses` is None) and says why;
- a communication never enters gloo (`parlab.core.comm.Comm` skips the transport for a fake
  tensor): each rank posts its op on the board as always (`parlab.core.board`), its completion
  is priced from its peers' posts and its real byte count, and the ledger records those bytes.

What cannot run on shapes refuses before any process starts (`parlab.engine.run_config`): a
scheme must declare `shapes=True` when it registers, once a test holds its shapes-only run equal
to its real paced run (same ledger, same step times, same memory).
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
