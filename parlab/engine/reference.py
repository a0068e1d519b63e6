"""The single-process reference every synchronous scheme must reproduce.

One process, the whole global batch, plain backward and optimizer step: the ground truth of
losses and final parameters (`"single"`). Run it at world_size=1. It is the one training loop
(`parlab.engine.loop.train`) with the default strategy and nothing else.
"""

from parlab.core.precision import PRECISIONS
from parlab.engine.loop import Strategy, build_model, make_optimizer, train
from parlab.engine.prediction import no_communication
from parlab.engine.runner import register

MIXED = tuple(PRECISIONS)  # fp32, bf16-mixed, fp16-mixed (parlab.core.precision)


def _validate(cfg):
    if cfg.world_size != 1:
        raise ValueError(f"scheme 'single' runs on one process; got world_size={cfg.world_size}")


@register("single", shapes=True, summary="one process, the whole batch: the reference", exact=True,
          validate=_validate, cost=no_communication, models=("gpt", "mlp", "gpt-moe", "unet3d", "op-graph"),
          precisions=MIXED)
def single(ctx):
    model = build_model(ctx.cfg)
    return train(ctx, Strategy(ctx, model, make_optimizer(model.parameters(), ctx.cfg)))
