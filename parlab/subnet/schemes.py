"""`sdp`: Subnetwork Data Parallelism (Singh, Khalid, Oyallon, Belilovsky, 2025).

    parlab.run("sdp", world_size=4, owners=2, mask="forward", granularity="block")

Every rank trains its subnetwork (`parlab.subnet.masking`) on its rows of the global batch; each
unit's gradient is averaged among its k owners (`parlab.subnet.sync`). With owners=N every rank
owns everything and the run is ddp-naive's, hence the single process's (tested at N = 1, 2, 4, both
maskings); with k < N it is a different training, held to its own bounds (memory, bytes, loss).

The reported loss is each rank's own forward's: the full model's under backward masking, the
subnetwork's under forward masking. `RunResult.state` is the full model assembled from the owners.
"""

from __future__ import annotations

from parlab.core.checks import Choice, Int
from parlab.engine.loop import build_model, train
from parlab.engine.runner import register
from parlab.subnet import cost as subnet_cost
from parlab.subnet.masking import MASKS, assemble
from parlab.subnet.ownership import GRANULARITIES, assign
from parlab.subnet.sync import SubnetSync

OPTIONS = {"owners": Int(None, min=1, none=True),  # k; None: max(1, N // 2)
           "mask": Choice("forward", MASKS),
           "granularity": Choice("block", GRANULARITIES)}


def validate(cfg) -> None:
    """k ≤ N, a batch that splits over the ranks, a model the granularity can split: all checked
    here, in the parent, before any process starts."""
    owners = cfg.options["owners"]
    if owners is not None and owners > cfg.world_size:
        raise ValueError(f"owners={owners} is above world_size={cfg.world_size}: a parameter "
                         "cannot have more owners than there are ranks")
    if cfg.batch_size % cfg.world_size:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by world_size="
                         f"{cfg.world_size} (each rank takes B/N rows)")
    subnet_cost.ownership_of(cfg)  # ValueError if the granularity cannot split the model


def assemble_state(outputs: list, cfg) -> dict:
    """The full parameters from the owned pieces of every rank (no communication)."""
    return assemble([out.extras["pieces"] for out in outputs], outputs[0].extras["shapes"])


@register("sdp", summary="Subnetwork DP: each unit owned by k of N ranks, averaged among owners",
          exact=False, options=OPTIONS, validate=validate, assemble=assemble_state,
          cost=subnet_cost.sdp_prediction, baseline="ddp-bucketed")
def sdp(ctx):
    o = ctx.cfg.options
    owners = o["owners"] if o["owners"] is not None else subnet_cost.default_owners(ctx.world_size)
    model = build_model(ctx.cfg)
    ownership = assign(model, ctx.world_size, owners, o["granularity"])
    return train(ctx, SubnetSync(ctx, model, ownership, o["mask"]))
