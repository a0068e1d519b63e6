"""Rank workers used only by tests/test_data_parallel.py."""

from parlab.data_parallel.dear import DeARSync
from parlab.data_parallel.priority import PrioritySync
from parlab.engine.loop import build_model, train
from parlab.engine.runner import make_config


def schedule_orders(rank, world_size, ctx_args):
    """Run DeAR and ddp-priority for 2 steps on this rank; return the orders they used."""
    import torch.distributed as dist

    from parlab.core.comm import Comm, Ledger
    from parlab.core.trace import Timeline
    from parlab.engine.runner import RankContext

    out = {}
    for scheme, make in (("dear", lambda c, m: DeARSync(c, m, 0.01)),
                         ("ddp-priority", lambda c, m: PrioritySync(c, m, 0.01, 4, 1))):
        cfg = make_config(scheme, world_size=dist.get_world_size(), steps=2, **ctx_args)
        ledger, timeline = Ledger(dist.get_rank()), Timeline(dist.get_rank())
        ctx = RankContext(dist.get_rank(), dist.get_world_size(), cfg,
                          Comm(None, ledger=ledger, timeline=timeline), ledger, timeline)
        model = build_model(cfg)
        sync = make(ctx, model)
        train(ctx, sync)
        out[scheme] = {"forward_order": sync.forward_order,
                       "applied_order": sync.layerwise.applied_order,
                       "launch_order": getattr(sync, "launch_order", None),
                       "ops": [(r["op"], r["numel"]) for r in ledger.records if r["step"] == 0]}
    return out
