"""Will a run fit? The memory it needs, estimated before any process starts, against what it has.

On this machine (`predicted_memory` against `available_memory`): every rank counted as holding the
whole model, its share of the batch's activations and the process itself; the parent's launch and
the states sent home. Shapes-only, against the accelerator (`check_fits_accelerator`): the model
state's 16 bytes per parameter (Rajbhandari et al., SC 2020) over all devices. `check_fits` refuses
a run that cannot fit with both numbers, instead of waking the out-of-memory killer. The estimate
and its constants are ours, stated and generous. `cfg` is a `parlab.engine.run_config.RunConfig`
(which calls `check_fits` last).
"""

from __future__ import annotations

import os

from parlab import models

# The memory a run needs, estimated before any process starts (`predicted_memory`): stated, and
# generous where a scheme could hold less (every rank is counted as holding the whole model).
BYTES_PER_PARAM = 24  # fp32 parameter, gradient, AdamW's two moments, the state sent home, its bytes
ACTIVATION_BYTES = 4  # per element saved for backward (fp32; mixed precision saves less)
RANK_OVERHEAD = {"forkserver": 96 << 20, "fork": 96 << 20, "spawn": 384 << 20}  # a rank's own
LAUNCH_OVERHEAD = 512 << 20  # the forkserver's copy of torch, buffers of the launch


def predicted_memory(cfg) -> dict:
    """Bytes this run needs on this machine, estimated from the model config and the batch alone.

    Per rank: BYTES_PER_PARAM (24) per parameter of the *whole* model (fp32 weight, gradient,
    AdamW's two moments, the state sent home and its serialised copy: no credit for ZeRO, tensor
    or pipeline sharding), the activations of its share of the global batch
    (`parlab.models.activation_count` / world_size, 4 bytes each), and the process itself
    (RANK_OVERHEAD). In the parent: the launch (LAUNCH_OVERHEAD) and the states the ranks send
    home (4 bytes per parameter per rank, plus the assembled one). Ranks on this machine: the
    world size (LOCAL_WORLD_SIZE under torchrun, where the parent is a rank)."""
    params = models.param_count(cfg.model, cfg.model_config)
    activations = models.activation_count(cfg.model, cfg.model_config, cfg.batch_size)
    local = cfg.world_size
    torchrun = "LOCAL_WORLD_SIZE" in os.environ and "TORCHELASTIC_RUN_ID" in os.environ
    if torchrun:
        local = int(os.environ["LOCAL_WORLD_SIZE"])
    per_rank = (BYTES_PER_PARAM * params + -(-ACTIVATION_BYTES * activations // cfg.world_size)
                + RANK_OVERHEAD.get(cfg.start_method, RANK_OVERHEAD["spawn"]))
    parent = 0 if torchrun else LAUNCH_OVERHEAD + 4 * params * (cfg.world_size + 1)
    return {"params": params, "activations": activations, "per_rank": per_rank, "ranks": local,
            "parent": parent, "total": local * per_rank + parent}


def available_memory() -> int:
    """Bytes this process may still allocate: the machine's available memory (psutil), or less
    when a cgroup (a container's limit) allows less."""
    import psutil
    free = psutil.virtual_memory().available
    try:
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        used = int(open("/sys/fs/cgroup/memory.current").read())
        if limit != "max":
            free = min(free, int(limit) - used)
    except (OSError, ValueError):
        pass
    return max(free, 0)


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB"


STATE_BYTES_PER_PARAM = 16  # on the device: weight, gradient, AdamW's two moments (ZeRO's 16Ψ)


def check_fits_accelerator(cfg) -> None:
    """Shapes-only: ValueError, before any process starts, when the run cannot fit on the
    accelerators however it is sharded: its model state alone (16 bytes per parameter: the ZeRO
    paper's 2 + 2 + 12 of mixed-precision Adam, or fp32's 4 + 4 + 8), divided evenly over all
    world_size devices, exceeds one device's memory — the admission chapter 02 teaches, against
    the device, not this laptop. A lower bound (activations left out: they depend on the plan): a
    plan that passes may still not fit, and its ranks' measured peaks say so
    (`RunResult.over_memory`)."""
    memory = cfg.clock.accelerator.memory_bytes
    if memory is None:
        return
    params = models.param_count(cfg.model, cfg.model_config)
    need = -(-STATE_BYTES_PER_PARAM * params // cfg.world_size)
    if need > memory:
        raise ValueError(
            f"this run cannot fit on {cfg.world_size} {cfg.clock.name}s however it is sharded: "
            f"each needs at least {_gib(need)} ({params:,} parameters × {STATE_BYTES_PER_PARAM} B "
            f"of model state ÷ world_size={cfg.world_size}) but the {cfg.clock.name} has "
            f"{_gib(int(memory))}; model={cfg.preset or cfg.model!r}. Make world_size larger.")


def check_fits(cfg) -> None:
    """ValueError, before any process starts, when `predicted_memory` exceeds `available_memory`
    (shapes-only: when a rank's state exceeds the accelerator's memory; this machine holds no
    tensor data then)."""
    if cfg.shapes_only:
        check_fits_accelerator(cfg)
        return
    need, free = predicted_memory(cfg), available_memory()
    if need["total"] > free:
        c = cfg.model_config
        shape = ", ".join(f"{k}={getattr(c, k)}" for k in
                          ("n_layer", "n_embd", "block_size", "d_hidden", "base", "levels") if hasattr(c, k))
        raise ValueError(
            f"this run cannot fit in memory: it needs about {_gib(need['total'])} but "
            f"{_gib(free)} are available. Estimate: {need['ranks']} rank(s) × "
            f"{_gib(need['per_rank'])} ({need['params']:,} parameters × {BYTES_PER_PARAM} B, "
            f"{need['activations']:,} activation elements of batch_size={cfg.batch_size} split "
            f"over world_size={cfg.world_size}, the process) + {_gib(need['parent'])} in this "
            f"process; model={cfg.model!r} with {shape}. Make batch_size, model_config or "
            "world_size smaller.")
