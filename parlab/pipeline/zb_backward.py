"""The split backward of zero bubble (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024,
§2): every `nn.Linear` Y = X·Wᵀ (+b) has a backward in two parts, B: ∂L/∂X = ∂L/∂Y·W (on the
critical path: the previous stage waits for it) and W: ∂L/∂W = ∂L/∂Yᵀ·X, ∂L/∂b = Σ ∂L/∂Y (needed
only by the optimizer). B asks autograd for the gradients of the stage input and of every linear
output (`torch.autograd.grad`, which skips the weight-gradient matmuls nobody asked for) and for
the small non-linear parameters (LayerNorm, embeddings, the tied head), and stashes (X, ∂L/∂Y); W
turns the stash into weight gradients with one matmul per linear. Both are exact: the same
products autograd would form.

The executor (`parlab.pipeline.executor.PipelineExecutor`) records a stage's linears with
`LinearTape` during F, runs `input_backward` as B and `weight_backward` as W.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class LinearTape:
    """Records (linear, input X, output Y) of every nn.Linear call in a stage while entered."""

    def __init__(self, stage: nn.Module):
        self.linears = [m for m in stage.modules() if isinstance(m, nn.Linear)]
        self.records: list[tuple] = []
        self._handles = []

    def __enter__(self):
        def hook(module, args, output):
            self.records.append((module, args[0], output))
        self._handles = [m.register_forward_hook(hook) for m in self.linears]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        return False


def _accumulate(param: torch.Tensor, grad: torch.Tensor) -> None:
    if param.grad is None:
        param.grad = grad.detach().clone()
    else:
        param.grad.add_(grad)


def input_backward(root, grad_out, x, tape: LinearTape, stage: nn.Module):
    """B: gradient of the stage input; stashes (linear, X, ∂L/∂Y) for W. Returns ∂L/∂x or None."""
    linear_params = {id(p) for m in tape.linears for p in m.parameters()}
    small = [p for p in stage.parameters() if id(p) not in linear_params]
    outputs = [y for _, _, y in tape.records]
    wanted = ([x] if x.requires_grad else []) + outputs + small
    grads = torch.autograd.grad(root, wanted, grad_outputs=grad_out, allow_unused=True)
    offset = 1 if x.requires_grad else 0
    for p, g in zip(small, grads[offset + len(outputs):]):
        if g is not None:
            _accumulate(p, g)
    stash = [(m, xin.detach(), g) for (m, xin, _), g in zip(tape.records, grads[offset:])
             if g is not None]
    return (grads[0] if x.requires_grad else None), stash


def weight_backward(stash) -> None:
    """W: ∂L/∂W = ∂L/∂Yᵀ·X and ∂L/∂b = Σ ∂L/∂Y for every stashed linear."""
    for linear, x, dy in stash:
        dy2 = dy.reshape(-1, linear.out_features)  # (rows, out)
        _accumulate(linear.weight, dy2.t() @ x.reshape(-1, linear.in_features))  # (out, in)
        if linear.bias is not None:
            _accumulate(linear.bias, dy2.sum(0))  # (out,)
