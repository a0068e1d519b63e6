"""The single-process reference every synchronous scheme must reproduce.

One process, the whole global batch, plain backward and optimizer step: the ground truth of
losses and final parameters (DESIGN.md: "single"). Run it at world_size=1.
"""

from parlab.engine.loop import build_model, data_parallel_loop, make_optimizer
from parlab.engine.runner import register


def _validate(cfg):
    if cfg.world_size != 1:
        raise ValueError(f"scheme 'single' runs on one process; got world_size={cfg.world_size}")


@register("single", summary="one process, the whole batch: the reference", exact=True,
          validate=_validate)
def single(ctx):
    model = build_model(ctx.cfg)
    return data_parallel_loop(ctx, model, make_optimizer(model.parameters(), ctx.cfg), 0, 1)
