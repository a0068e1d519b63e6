"""A stage boundary that lets no gradient through, and the backward of a stage whose gradient
arrives in components, one per loss.

`LocalBoundary` is decoupled greedy learning's cut (Belilovsky et al., ICML 2020, §3): the stage
below hands its activation up and is never told what the stage above made of it, so it is free
to go on with the next batch — no backward locking, no update locking.

`backward_roots` is a stage's backward under interlocking backpropagation (Gomez et al., JMLR
2022, §3): every loss within reach trains the stage's parameters (their gradients add up), but
only the losses that may still travel further down are differentiated with respect to the stage's
input, each on its own, since the stage below drops them one by one as they run out of depth
(`routes`). A root is (tensor, its output gradient): the stage's own loss (a scalar) or its
output with the gradient one loss sent up.
"""

from __future__ import annotations

import torch


class LocalBoundary(torch.autograd.Function):
    """Forward: the activation (mb, T, C) from the stage below, unchanged. Backward: nothing
    crosses — the stage below gets no gradient and never waits for this one."""

    @staticmethod
    def forward(ctx, h):
        return h.view_as(h)  # (mb, T, C) the same data, a new autograd node

    @staticmethod
    def backward(ctx, grad):
        return None


def _accumulate(params, grads) -> None:
    for p, g in zip(params, grads):
        if g is None:
            continue
        if p.grad is None:
            p.grad = g.detach().clone()
        else:
            p.grad.add_(g)


def backward_roots(x, send: list, keep: list, params: list):
    """Accumulate into `params` the gradients of every root in `send` and `keep`; return the
    input gradients of the `send` roots stacked, (k, *x.shape), or None when nothing is sent.

    One backward pass per sent root (its input gradient must stay separate) and one for all kept
    roots together; a pass that serves both asks for the input and the parameters at once.
    """
    dxs = []
    for root, grad in send:
        grads = torch.autograd.grad(root, [x] + params, grad, retain_graph=True, allow_unused=True)
        dxs.append(grads[0])  # (mb, T, C) this loss's gradient at the stage input
        _accumulate(params, grads[1:])
    if keep:
        roots, grads_out = [r for r, _ in keep], [g for _, g in keep]
        _accumulate(params, torch.autograd.grad(roots, params, grads_out, retain_graph=True,
                                                allow_unused=True))
    return torch.stack(dxs) if dxs else None  # (k, mb, T, C)
