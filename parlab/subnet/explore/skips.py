"""Notebook 10's skip-connection ablation (Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism
With Subnetwork Data Parallelism", 2025: block-level subnetworks train well because their skip
connections keep the subnetwork's gradient aligned with the full model's): the same GPT on the
same data, with and without residual connections (`parlab.subnet.skips`), forward masking at
block level, k = 1 of N. Each variant is measured against its own DDP (the same model at k = N,
where the emulation's ĝ is the full gradient), so the loss gap is SDP's alone.
"""

from __future__ import annotations

import statistics

from parlab.engine.runner import make_config
from parlab.subnet import cost as subnet_cost
from parlab.subnet.emulate import emulate


def _run(world_size: int, owners: int, steps: int, skips: bool):
    cfg = make_config("sdp", world_size=world_size, steps=steps, owners=owners, mask="forward",
                      granularity="block")
    return emulate(cfg, subnet_cost.ownership_of(cfg), "forward", skips=skips)


def skip_ablation(world_size: int = 2, steps: int = 12, last: int = 5) -> dict:
    """{skips: {"loss_gap", "cos_owned_units", "sdp", "ddp"}} for the GPT with and without skips."""
    out = {}
    for skips in (True, False):
        sdp, ddp = _run(world_size, 1, steps, skips), _run(world_size, world_size, steps, skips)
        owned = [statistics.mean(c for unit, c in step.items() if unit != "shared")
                 for step in sdp.unit_cosines]
        out[skips] = {"loss_gap": statistics.mean(sdp.full_losses[-last:])
                      / statistics.mean(ddp.full_losses[-last:]) - 1,
                      "cos_owned_units": statistics.mean(owned), "sdp": sdp, "ddp": ddp}
    return out


def print_ablation(found: dict, world_size: int) -> bool:
    """The table and the verdict: do the skips keep the forward-masked blocks aligned (and the
    loss near DDP's), as the paper's explanation says? Returns whether it holds."""
    print(f"the tiny GPT, forward masking, block level, k = 1 of N = {world_size}; each against its own "
          "DDP (the same model at k = N)")
    print(f"{'model':<24} {'cos(ĝ_u, g_u) owned units':>26} {'loss vs its DDP':>16}")
    for skips, r in found.items():
        name = "with skips (the GPT)" if skips else "skips removed"
        print(f"{name:<24} {r['cos_owned_units']:>26.3f} {r['loss_gap']:>+16.2%}")
    with_, without = found[True], found[False]
    holds = without["cos_owned_units"] < with_["cos_owned_units"] and without["loss_gap"] > with_["loss_gap"]
    print(f"verdict: removing the skips {'lowers' if holds else 'does NOT lower'} the owned units' "
          f"alignment ({with_['cos_owned_units']:.3f} → {without['cos_owned_units']:.3f}) and the loss gap "
          f"goes {with_['loss_gap']:+.2%} → {without['loss_gap']:+.2%}: the paper's explanation "
          f"{'holds' if holds else 'does not hold'} on this model and task")
    return holds
