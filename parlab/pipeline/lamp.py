"""LAMP's automated partition of the 3-D U-Net: profile every layer once, then cut the layers into
contiguous stages so that the largest stage is as small as it can be (Zhu et al., "LAMP: Large
Deep Nets with Automated Model Parallelism for Image Segmentation", MICCAI 2020).

As its released code's torchgpipe `balance_by_size` (memory) / `balance_by_time`: a layer's
activation bytes from `parlab.core.memory.ActivationMeter` on one micro-batch (`layer_sizes`) plus
`param_scale` copies of its parameters; for 1F1B each stage weighted by its in-flight count (an
extension, equal to LAMP's under GPipe); then the exact min-max contiguous split by dynamic
programming (`min_max_split`, O(p·L²); torchgpipe uses a heuristic).

Simplifications (saved tensors, not the allocator's peak; skips sent straight between stages, not
the paper's restructured U-Net) and the comparison with LAMP's code: docs/pipeline.md,
`parlab.pipeline.lamp`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from parlab.core.memory import ActivationMeter
from parlab.pipeline.partition import _fastest, min_max_split
from parlab.pipeline.stages import stage_bounds

FP32 = 4
PARAM_COPIES = {"adamw": 4, "sgd": 2}  # parameters, gradients and the optimizer's state tensors


def _sample(cfg, rows: int, seed: int) -> tuple:
    """A micro-batch of the right shapes (the profile only needs shapes and a forward)."""
    g = torch.Generator().manual_seed(seed)
    S = cfg.block_size
    x = torch.randn(rows, cfg.in_channels, S, S, S, generator=g)  # (mb, 1, S, S, S)
    y = torch.randint(0, cfg.n_classes, (rows, S, S, S), generator=g)  # (mb, S, S, S)
    return x, y


def layer_sizes(model, cfg, rows: int, seed: int = 0) -> dict:
    """Bytes on `rows` samples: {"activations": what autograd saves in each layer's forward, counted
    over one forward of the whole model (a tensor two layers save counts in the first), "first":
    the same for each layer run alone on a fresh input (as the first layer of a stage, which
    saves the tensor it received even where the layer before it in the model had saved it too),
    "params": each layer's parameter bytes}; the loss is part of the last layer."""
    x, y = _sample(cfg, rows, seed)
    last = len(model.layers) - 1
    meter, skips, acts, inputs = ActivationMeter(exclude=model.parameters()), {}, [], []
    with meter:
        h = x
        for i in range(len(model.layers)):
            before = meter.current
            inputs.append((h.detach(), {k: v.detach() for k, v in skips.items()}))
            h = model.run_layers(h, skips, i, i + 1)  # (mb, c, s, s, s)
            if i == last:
                loss = F.cross_entropy(h, y)
            acts.append(meter.current - before)
    del loss, h, skips
    first = []
    for i, (h0, skips0) in enumerate(inputs):
        with ActivationMeter(exclude=model.parameters()) as alone:
            out = model.run_layers(h0.clone().requires_grad_(), dict(skips0), i, i + 1)
            if i == last:
                out = F.cross_entropy(out, y)
        first.append(alone.peak)
        del out
    params = [FP32 * sum(p.numel() for p in layer.parameters()) for layer in model.layers]
    return {"activations": acts, "first": first, "params": params}


def layer_times(model, cfg, rows: int, reps: int = 5, seed: int = 0) -> list[float]:
    """Seconds (fastest of `reps`, round-robin) of each layer's forward + backward on `rows`
    samples, its skip (if it takes one) given, the loss included in the last layer."""
    x, y = _sample(cfg, rows, seed)
    inputs, skips = [], {}
    with torch.no_grad():  # each layer's input and skip, from one forward
        h = x
        for i, layer in enumerate(model.layers):
            inputs.append((h, skips.get(layer.level) if layer.takes else None))
            h = model.run_layers(h, skips, i, i + 1)
    last = len(model.layers) - 1

    def fn(i):
        layer, (h0, s0) = model.layers[i], inputs[i]

        def run():
            h = h0.clone().requires_grad_()
            s = None if s0 is None else s0.clone().requires_grad_()
            out, made = layer(h, s)
            total = F.cross_entropy(out, y) if i == last else out.sum()
            (total if made is None else total + made.sum()).backward()
        return run

    times = _fastest([fn(i) for i in range(len(model.layers))], reps)
    model.zero_grad(set_to_none=True)  # profiling leaves no gradient behind
    return times


def _stage_activations(sizes: dict, lo: int, hi: int) -> int:
    """Bytes one micro-batch leaves saved in a stage of layers [lo, hi): its first layer as run
    alone (on the tensor it received), the others as in the whole model's forward."""
    return sizes["first"][lo] + sum(sizes["activations"][lo + 1:hi])


def stage_memory(counts: list[int], sizes: dict, in_flight: list[int],
                 param_scale: float) -> list[dict]:
    """The estimate per stage: activations (in-flight micro-batches × the stage's layers' bytes
    for one) and parameter memory (param_scale × parameter bytes), and their total."""
    out = []
    for s, (lo, hi) in enumerate(stage_bounds(counts)):
        acts = in_flight[s] * _stage_activations(sizes, lo, hi)
        params = param_scale * sum(sizes["params"][lo:hi])
        out.append({"activations": acts, "params": params, "total": acts + params})
    return out


def memory_partition(sizes: dict, stages: int, in_flight: list[int],
                     param_scale: float) -> list[int]:
    """LAMP's balance by size: the split minimising the largest stage's estimated memory."""
    params = sizes["params"]

    def cost(s, i, j):
        return in_flight[s] * _stage_activations(sizes, i, j) + param_scale * sum(params[i:j])
    return min_max_split(len(params), stages, cost)


def time_partition(times: list[float], stages: int) -> list[int]:
    """`balance_by_time`: the split minimising the slowest stage's forward + backward."""
    return min_max_split(len(times), stages, lambda s, i, j: sum(times[i:j]))
