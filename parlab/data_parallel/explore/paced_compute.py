"""A step's compute as the paced clock prices it, for a model too deep to run: count the kernels
of forward, backward and one AdamW step at 1 and 2 layers on fake tensors, in this process, and
extend linearly in the layers (every block has the same shapes, so the count is exact).

The paced clock prices each kernel on the roofline (Williams, Waterman & Patterson, "Roofline",
CACM 2009): launch + max(FLOPs / F, bytes / HBM bandwidth), `parlab.core.clock.Clock.price`.
FLOPs alone (6Ψt, Kaplan et al. 2020) miss the memory-bound kernels — softmax, norms, GELU over
every head's t² scores, AdamW's separate kernels each reading and writing Ψ floats — which is
why chapter 01's FLOP-priced step of gpt2-xl came out far shorter than its paced run. The Adam
step counted is the *second* (the first also creates the state, which a steady step does not).
"""

from __future__ import annotations

PHASES = ("forward", "backward", "optimizer")
_WORK: dict = {}


def counted(preset: str, n_layer: int, rows: int = 1) -> dict:
    """{phase: `parlab.core.clock.Work`} of one rank's step of `preset` with `n_layer` layers,
    `rows` sequences of its block size, counted on fake tensors (`parlab.core.shapes`)."""
    key = (preset, n_layer, rows)
    if key not in _WORK:
        import torch

        from parlab import models
        from parlab.core.pacer import count_work
        from parlab.core.shapes import shapes
        from parlab.models.presets import PRESETS

        shape = {**PRESETS[preset], "n_layer": n_layer}
        with shapes():
            net = models.build_model("gpt", models.model_config("gpt", shape), 0)
            x = torch.zeros(rows, shape["block_size"], dtype=torch.long)  # (rows, T) tokens
            opt = torch.optim.AdamW(net.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-5,
                                    weight_decay=0.1)  # as parlab.engine.loop.make_optimizer
            net.loss(x, x).backward()
            opt.step()  # the first step creates AdamW's state: not a steady step's work
            opt.zero_grad(set_to_none=True)
            held = []
            work = {"forward": count_work(lambda: held.append(net.loss(x, x))),
                    "backward": count_work(lambda: held[0].backward())}
            work["optimizer"] = count_work(lambda: (opt.step(), opt.zero_grad(set_to_none=True)))
        _WORK[key] = work
    return _WORK[key]


def compute_times(preset: str, accelerator: str = "A100", rows: int = 1) -> dict:
    """{"t_forward", "t_backward", "t_optimizer"}: seconds of `preset`'s full depth on
    `accelerator`'s paced clock, c(1) + (L - 1)·(c(2) - c(1)) for each phase."""
    from parlab.core.clock import resolve
    from parlab.models.presets import PRESETS

    clock = resolve(accelerator)
    depth = PRESETS[preset]["n_layer"]
    one, two = counted(preset, 1, rows), counted(preset, 2, rows)
    out = {}
    for phase in PHASES:
        a, b = clock.price(one[phase]), clock.price(two[phase])
        out[f"t_{phase}"] = a + (depth - 1) * (b - a)
    return out


def pack_price(sizes: list[int], accelerator: str = "A100") -> float:
    """Seconds the paced clock charges the hooks' copies of every gradient into its bucket in one
    step: per tensor a launch plus 12 bytes per element (copy_'s self, source and result, as
    PyTorch's byte count takes them) at the HBM rate."""
    from parlab.core.link import ACCELERATORS

    acc = ACCELERATORS[accelerator]
    return sum(acc.launch_s + 12 * s / acc.hbm_Bps for s in sizes)


def hook_seconds(variant: str, sizes: list[int], n: int, accelerator: str = "A100",
                 bucket_mb: float = 25.0) -> float:
    """Backward seconds the paced clock adds to `variant` beyond the model's forward/backward
    kernels: the hooks' copies into the buckets (its registered closed form issues from the
    hooks: WFBP, DeAR; DeAR's reduce-scatter allocates its output shards, which launches no
    kernel). Naive and bucketed copy after backward, outside any compute span: 0."""
    from parlab.data_parallel.cost import registered

    issue = registered(variant).issue
    return pack_price(sizes, accelerator) if issue in ("hooks", "reduce-scatter") else 0.0
