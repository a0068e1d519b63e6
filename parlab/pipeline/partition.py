"""Balanced stages: profile each layer's forward + backward time, then split the layers into
contiguous stages so that the slowest stage — which sets the pipeline's pace — is as fast as it
can be.

A pipeline runs at the speed of its slowest stage: with stage times t_s, a step of m micro-batches
takes about (m + p − 1)·max_s t_s, so an uneven split wastes Σ_s (max t − t_s) on every
micro-batch on top of the bubble. Balancing layers over stages is PipeDream's partitioning
problem (Narayanan et al., "PipeDream: Generalized Pipeline Parallelism for DNN Training", SOSP
2019, §3.1: dynamic programming over a per-layer profile, minimising the slowest stage); here:
minimise the largest stage time over contiguous splits, with the embedding fixed to the first
stage and the head (+ loss) to the last, exactly by dynamic programming in O(p·L²). (Akintoye et
al., "Layer-wise partitioning and merging for efficient and scalable deep learning", FGCS 2023,
instead merge layer-wise partitions to cut the communication between devices without
PipeDream's stashed weights: chapter 05's `parlab.local_learning.partition_merge`, which reuses
`min_max_split` for its cut.)
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F


def _fastest(fns: list, reps: int) -> list[float]:
    """Fastest of `reps` runs of each fn, the runs taken round-robin: on a shared machine a burst
    of interference then slows one run of every layer instead of every run of one layer, and
    interference only ever adds time, so the minimum is the estimate."""
    for fn in fns:
        fn()  # warm-up
    best = [float("inf")] * len(fns)
    for _ in range(reps):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def profile_layers(model, model_config, rows: int, reps: int = 7, seed: int = 0,
                   measure=None) -> dict:
    """Seconds (fastest of `reps`) of forward + backward of each layer on a micro-batch of `rows` samples.

    Returns {"layers": [t_0, ...], "first": embedding time, "last": head + loss time}. `measure`
    (fns) -> seconds of each: another way to take them (a paced clock prices each function's
    counted operators instead: `parlab.pipeline.explore.stages.clock_profile`).
    """
    g = torch.Generator().manual_seed(seed)
    is_gpt = hasattr(model, "blocks")
    if is_gpt:
        T, C = model_config.block_size, model_config.n_embd
        ids = torch.randint(0, model_config.vocab_size, (rows, T), generator=g)  # (mb, T)
        hidden = torch.randn(rows, T, C, generator=g)  # (mb, T, C)
        layers = list(model.blocks)

        def first():
            model.embed(ids).sum().backward()

        def last():
            x = hidden.clone().requires_grad_()
            logits = model.head(x)  # (mb, T, vocab)
            F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids.reshape(-1)).backward()
    else:
        hidden = torch.randn(rows, model_config.d_hidden, generator=g)  # (mb, d)
        layers = list(model.layers)

        def first():
            return None

        def last():
            return None

    def layer_fn(layer, width):
        x0 = torch.randn(*hidden.shape[:-1], width, generator=g) if not is_gpt else hidden

        def run():
            x = x0.clone().requires_grad_()
            layer(x).sum().backward()
        return run

    fns = [layer_fn(layer, getattr(layer, "in_features", None)) for layer in layers]
    *times, t_first, t_last = (measure or (lambda f: _fastest(f, reps)))(fns + [first, last])
    profile = {"layers": times, "first": t_first, "last": t_last}
    model.zero_grad(set_to_none=True)  # profiling must leave no gradient behind
    return profile


def stage_times(counts: list[int], profile: dict) -> list[float]:
    """Predicted forward + backward seconds of each stage of a split into `counts` layers."""
    times, start = [], 0
    for s, c in enumerate(counts):
        t = sum(profile["layers"][start:start + c])
        t += profile["first"] if s == 0 else 0.0
        t += profile["last"] if s == len(counts) - 1 else 0.0
        times.append(t)
        start += c
    return times


def balanced_partition(profile: dict, stages: int) -> list[int]:
    """Layers per stage minimising the slowest stage (every stage gets >= 1 layer)."""
    costs = profile["layers"]
    n = len(costs)
    if not 1 <= stages <= n:
        raise ValueError(f"cannot split {n} layers into {stages} stages of at least one layer")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)

    def cost(s, i, j):  # stage s holds layers [i, j)
        extra = (profile["first"] if s == 0 else 0.0) + (
            profile["last"] if s == stages - 1 else 0.0)
        return prefix[j] - prefix[i] + extra

    return min_max_split(n, stages, cost)


def min_max_split(n: int, stages: int, cost) -> list[int]:
    """Layers per stage (each >= 1) of the contiguous split of n layers minimising
    max_s cost(s, i, j), stage s holding layers [i, j); exact, by dynamic programming."""
    if not 1 <= stages <= n:
        raise ValueError(f"cannot split {n} layers into {stages} stages of at least one layer")
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages)]  # best[s][j]: stages 0..s hold [0, j)
    cut = [[0] * (n + 1) for _ in range(stages)]
    for j in range(1, n + 1):
        best[0][j] = cost(0, 0, j)
    for s in range(1, stages):
        for j in range(s + 1, n + 1):
            for i in range(s, j):
                value = max(best[s - 1][i], cost(s, i, j))
                if value < best[s][j]:
                    best[s][j], cut[s][j] = value, i
    counts, j = [], n
    for s in range(stages - 1, 0, -1):
        counts.append(j - cut[s][j])
        j = cut[s][j]
    return [j] + counts[::-1]
