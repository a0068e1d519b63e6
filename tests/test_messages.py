"""One message model (issue 48 item 2): every scheme family's ledger, byte for byte, is the sum
of its chapter's message list (`parlab.core.messages`), and the planner's time model prices the
same list. Tiny runs: world ≤ 4, one step, a small GPT."""

import pytest

import parlab
from parlab.compression.compressed_reducers import step_messages
from parlab.compression.cost import as_messages
from parlab.context_parallel.cost import ring_messages, ulysses_messages
from parlab.core.messages import Message, bytes_by, merged, total_bytes
from parlab.data_parallel.cost import dp_messages
from parlab.engine.loop import build_model
from parlab.engine.prediction import param_numels
from parlab.engine.registry import schemes
from parlab.expert_parallel.cost import all_to_all_messages
from parlab.pipeline.cost import p2p_messages, tie_messages
from parlab.planner import costmodel
from parlab.planner.plan import Plan
from parlab.tensor_parallel.cost import tp_messages
from parlab.zero.cost import zero_messages
from parlab.zero.shard import unit_modules

MC = {"n_layer": 2, "n_embd": 16, "n_head": 4, "block_size": 16}
KW = {"model_config": MC, "batch_size": 8, "steps": 1}


def _run(scheme, world_size, **options):
    return parlab.run(scheme, world_size=world_size, **{**KW, **options})


def _totals(result) -> list[int]:
    return result.bytes_per_rank()


# ----------------------------------------------------------------------------- the record
def test_a_message_counts_ring_bytes_per_rank_and_its_busiest():
    ar = Message("dp", "all_reduce", 3, 10)  # chunks 4, 3, 3 (Thakur et al. 2005, §4):
    # rank r reduce-scatters all but chunk r, all-gathers all but chunk r+1
    assert [ar.sent(r) for r in range(3)] == [4 * (6 + 7), 4 * (7 + 7), 4 * (7 + 6)]
    assert ar.sent() == max(ar.sent(r) for r in range(3)) and ar.rounds() == 4
    p2p = Message("pp", "p2p", 2, 5, count=2, pipelined=True, element_bytes=2)
    assert p2p.total(microbatches=3) == 5 * 2 * 2 * 3
    assert total_bytes([ar, p2p], 3, rank=0) == ar.sent(0) + p2p.total(3)
    assert merged([p2p, p2p, ar]) == [Message("pp", "p2p", 2, 5, 4, True, 2), ar]
    with pytest.raises(ValueError, match="op='broadcast'"):
        Message("dp", "broadcast", 2, 1)


# ----------------------------------------------------------------------------- ledger = list
@pytest.mark.parametrize("scheme", ["ddp-naive", "ddp-bucketed", "ddp-overlap", "ddp-priority",
                                    "dear"])
def test_ddp_ledger_is_its_reducers_messages(scheme):
    result = _run(scheme, 2)
    cfg, n = result.config, 2
    msgs = dp_messages(schemes()[scheme].cost.messages, param_numels(cfg), n, **cfg.options)
    assert _totals(result) == [total_bytes(msgs, rank=r) for r in range(n)]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_ledger_is_its_messages(stage):
    result = _run(f"zero{stage}", 2)
    units = [sum(p.numel() for _, p in params if p.requires_grad)
             for _, _, params in unit_modules(build_model(result.config))]
    msgs = zero_messages(stage, units, 2)
    assert _totals(result) == [total_bytes(msgs, rank=r) for r in range(2)]


@pytest.mark.parametrize("scheme,options", [("tp", {}), ("tp", {"checkpoint": True}),
                                            ("tp-sp", {}), ("tp-sp", {"regather": False})])
def test_tp_ledger_is_its_messages(scheme, options):
    result = _run(scheme, 2, **options)
    for rank, out in enumerate(result.outputs):
        msgs = tp_messages(result.config.model_config, 8 // out.extras["dp"], out.extras["tp"],
                           1, scheme == "tp-sp", options.get("regather", True),
                           checkpoint=options.get("checkpoint", False))
        want = bytes_by(msgs, rank=out.extras["tp_rank"])
        assert {ph: result.bytes_per_rank(phase=ph)[rank] for ph in want} == want


@pytest.mark.parametrize("scheme", ["cp-ring", "cp-ulysses"])
def test_cp_ledger_is_its_messages(scheme):
    result = _run(scheme, 2, cp=2)
    g = result.config.model_config
    form = ring_messages if scheme == "cp-ring" else ulysses_messages
    want = bytes_by(form(8, g.n_head, g.block_size, g.head_dim, 2, g.n_layer))
    for phase, sent in want.items():
        assert result.bytes_per_rank(phase=phase) == [sent] * 2


@pytest.mark.parametrize("scheme,chunks", [("pp-gpipe", 1), ("pp-1f1b", 1),
                                           ("pp-interleaved", 2)])
def test_pp_ledger_is_its_messages(scheme, chunks):
    m = 2
    result = _run(scheme, 2, microbatches=m, **({"model_config": {**MC, "n_layer": 4}}
                                                 if chunks > 1 else {}))
    mc = result.config.model_config
    for rank in range(2):
        msgs = (p2p_messages(2, chunks, rank, 8 // m * mc.block_size * mc.n_embd)
                + tie_messages(mc.vocab_size, mc.n_embd, 2, rank))
        want = bytes_by(msgs, microbatches=m, rank=rank)
        assert {ph: result.bytes_per_rank(phase=ph)[rank] for ph in want} == want


@pytest.mark.parametrize("scheme", ["topk", "powersgd"])
def test_compression_ledger_is_its_messages(scheme):
    result = _run(scheme, 2)
    shapes = [tuple(p.shape) for p in build_model(result.config).parameters()]
    msgs = as_messages(step_messages(scheme, shapes, 2, result.config.options), 2)
    assert _totals(result) == [total_bytes(msgs, rank=r) for r in range(2)]


def test_ep_all_to_alls_are_their_messages():
    result = _run("ep", 2, model="gpt-moe")
    mc = result.config.model_config
    for rank, out in enumerate(result.outputs):
        want: dict = {}
        for layer in out.extras["routing"]:
            for step in layer:
                for phase, sent in bytes_by(all_to_all_messages(
                        step["kept"], rank, out.extras["group"], mc.n_embd, mc.top_k),
                        rank=rank).items():
                    want[phase] = want.get(phase, 0) + sent
        assert {ph: result.bytes_per_rank(phase=ph)[rank] for ph in want} == want


@pytest.mark.parametrize("plan", [Plan(dp=2, tp=2), Plan(dp=2, pp=2, microbatches=2, zero=1)],
                         ids=lambda p: p.describe())
def test_nd_busiest_rank_is_the_time_models_message_list(plan):
    """The planner's time model prices `costmodel.messages`: the busiest rank's ledger is that
    list's bytes, dimension by dimension composed from the chapters' lists."""
    result = _run("nd", plan.world_size, **plan.options())
    from parlab.models.gpt import GPTConfig

    mc = GPTConfig(**MC)
    listed = costmodel.message_bytes(plan, mc, KW["batch_size"])
    assert max(_totals(result)) == sum(listed.values())
    assert all(x.n in (plan.dp * plan.cp, plan.tp, plan.cp, 2) and x.elements > 0
               for s in range(plan.pp) for x in costmodel.messages(mc, plan, 8, s))
    assert sum(listed.values()) == sum(costmodel.predict_bytes(plan, mc, KW["batch_size"]).values())
