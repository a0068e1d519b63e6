"""Issue 34: a 16-rank cluster on a laptop. The exact cases at 8 and 16 ranks (CI-small: tiny
models, 2 steps), ledger bytes equal to the closed forms, one paced repeatability check at 16
ranks (bit-reproducible: equal), and the scaling model on a point it must predict. No raw clock:
timing is virtual (A100 seconds)."""

from __future__ import annotations

import pytest

import parlab
from parlab.planner.scaling import points

STEPS, BATCH = 2, 16


@pytest.fixture(scope="module")
def reference():
    return {m: parlab.run("single", model=m, steps=STEPS, batch_size=BATCH) for m in ("gpt",)}


@pytest.fixture(scope="module")
def paced16():
    """Two paced runs of ddp-overlap on 16 ranks over NVLink: shared by the exactness, bytes,
    repeatability and model tests. One bucket a step keeps it short (over two nodes joined by
    100Gb IB, `python -m parlab bench scale`, the step is longer)."""
    return [parlab.run("ddp-overlap", world_size=16, steps=STEPS, batch_size=BATCH,
                       clock="A100", link="NVLink", bucket_mb=1.0) for _ in range(2)]


def _exact_and_bytes(r, ref):
    assert r.compare(ref).match, r.compare(ref)
    cost = parlab.schemes()[r.config.scheme].cost
    if cost is not None:
        assert cost(r.config).bytes_sent == r.bytes_per_rank()


# the exact cases: (scheme, world size, options); each one launch, on the wall clock (results do
# not depend on the clock; the paced 16-rank runs below check that too)
CASES = [
    ("zero3", 16, {}),
    ("nd", 16, {"dp": 2, "tp": 2, "pp": 2, "cp": 2, "microbatches": 2}),  # the 4-D plan
    ("pp-1f1b", 16, {}),
    ("nd", 8, {"dp": 2, "tp": 2, "pp": 2, "microbatches": 2}),  # the 3-D plan
    ("tp", 8, {}),
    ("cp-ring", 8, {}),
]


@pytest.mark.parametrize("scheme,world_size,options", CASES,
                         ids=[f"{s}-{w}-{'-'.join(f'{k}{v}' for k, v in o.items())}"
                              for s, w, o in CASES])
def test_exact_at_8_and_16(scheme, world_size, options, reference):
    r = parlab.run(scheme, world_size=world_size, steps=STEPS, batch_size=BATCH, **options)
    _exact_and_bytes(r, reference["gpt"])


def test_paced_16_ranks_exact_and_repeatable(paced16, reference):
    """16 ranks on 2 cores, paced: exact, bytes = closed form, and two runs' timelines and step
    times identical (virtual time is bit-reproducible, however the 16 ranks share the cores)."""
    a, b = paced16
    for r in (a, b):
        _exact_and_bytes(r, reference["gpt"])
        assert r.clock.paced and r.config.world_size == 16
    assert a.step_times == b.step_times
    assert a.timeline == b.timeline


def test_model_predicts_the_paced_16_rank_step(paced16):
    """The scaling model (α-β of the ledger on the link, WFBP overlap, counted
    compute) predicts the paced step within 10%, and the waiting it predicts is what the
    timeline shows within 10% of the step."""
    r = paced16[0]
    pred = points.predict_step(r, step=1)
    measured = r.step_times[1]
    assert abs(pred["step_s"] / measured - 1) <= 0.10, (pred["step_s"], measured)
    assert abs(pred["wait_s"] - pred["measured_wait_s"]) <= 0.10 * measured


def test_point_config_limits():
    """Degrees the default GPT allows; bad input named."""
    assert points.point_config("tp", 8) is None  # 4 heads
    assert points.point_config("pp", 8) is None  # 4 layers
    assert points.point_config("3d", 16)["degrees"] == (4, 2, 2)
    assert points.point_config("dp", 16, "weak")["batch_size"] == 16 * points.WEAK_ROWS
    with pytest.raises(ValueError, match="mode="):
        points.point_config("dp", 2, "medium")
    with pytest.raises(ValueError, match="dimension"):
        points.point_config("fsdp", 2)


def test_point_config_at_a_real_presets_shapes():
    """A preset (shapes-only) allows the degrees its heads and layers divide, tp inside a node."""
    spec = points.point_config("3d", 64, preset="megatron-1.7b")  # 24 heads, 24 layers
    assert spec["degrees"] == (2, 8, 4)
    assert spec["options"]["model"] == "megatron-1.7b" and spec["options"]["shapes_only"]
    assert points.point_config("tp", 16, preset="megatron-1.7b") is None  # beyond a node of 8
    assert points.point_config("pp", 16, preset="megatron-1.7b") is None  # 24 layers ÷ 16
    assert points.point_config("tp", 8, preset="megatron-1.7b")["degrees"] == (1, 8, 1)
    with pytest.raises(ValueError, match="preset='gpt5'"):
        points.point_config("dp", 2, preset="gpt5")


def test_a_real_scale_point_beside_its_model():
    """GPT-2 small's shapes, 16 sequences of 1024 tokens on 2 ranks, shapes-only: the model of the
    step (counted compute + α-β of the ledger, WFBP overlap) and the state's closed form."""
    row = points.measure_point("dp", 2, "strong", preset="gpt2")
    assert abs(row["error"]) < 0.01 and row["step_us"] > 10_000  # tens of A100 ms, not µs
    assert row["state_B"] == row["pred_state_B"]  # 16 bytes per parameter of a 124M model


def test_the_state_closed_form_is_the_chapters_own_for_tp_pp_and_zero3():
    """`predicted_state_bytes` from zero's `memory_formula`, tp's `replicated_numels` and one
    pipeline stage's blocks: equal to the busiest rank's measured state (pp: the first stage's
    wte + wpe, not every embedding and ln_f as the 16Ψ form before it counted)."""
    for dim in ("tp", "pp", "zero3"):
        r = points.run_point(dim, 2)
        spec = points.point_config(dim, 2)
        assert points.state_bytes(r) == points.predicted_state_bytes(dim, spec["degrees"], 2), dim


# the 5-D plan: ep borrowed from dp, on a mixture-of-experts GPT whose routing is token-local (no
# capacity, no balancing loss, no bias step), so pp, cp and micro-batches split its tokens exactly
MOE_5D = {"model": "gpt-moe", "batch_size": 8,
          "model_config": {"n_layer": 2, "n_head": 4, "n_embd": 16, "block_size": 16,
                           "n_experts": 4, "top_k": 2, "capacity_factor": None, "aux_loss": 0.0,
                           "bias_update": 0.0}}


def test_5d_plan_with_ep_at_16_ranks_is_exact_and_every_phase_is_closed_form():
    from parlab.planner.cost import nd_closed_form_bytes, nd_routing_bytes
    from parlab.planner.schemes import plan_of

    ref = parlab.run("single", steps=STEPS, **MOE_5D)
    r = parlab.run("nd", world_size=16, steps=STEPS, dp=2, tp=2, pp=2, cp=2, ep=2,
                   microbatches=2, **MOE_5D)
    assert r.compare(ref).match, r.compare(ref)
    plan = plan_of(r.config)
    want = {**nd_closed_form_bytes(plan, r.config), **nd_routing_bytes(plan, r.config, r.outputs)}
    assert {"counts", "expert-grad-sync", "dispatch", "cp-forward", "pp-fwd",
            "tp-forward"} <= set(want)  # every dimension sent something
    for phase, row in want.items():
        assert r.bytes_per_rank(phase=phase) == row, phase
    assert [sum(col) for col in zip(*want.values())] == r.bytes_per_rank()  # nothing unaccounted


def test_moe_plan_with_global_routing_is_refused_with_pp_or_cp():
    from parlab.engine.runner import make_config

    cfg = {**MOE_5D["model_config"], "capacity_factor": 1.25}
    with pytest.raises(ValueError, match="routing is global"):
        make_config("nd", 8, model="gpt-moe", batch_size=8, model_config=cfg, dp=2, tp=2, cp=2,
                    ep=2)
    make_config("nd", 8, **MOE_5D, dp=2, tp=2, cp=2, ep=2)  # token-local: accepted


def test_pipeline_model_is_the_schedule_simulated():
    """With free hops the simulated 1F1B lasts (m + p − 1)(F + B) (Narayanan et al. 2021's
    bubble); every hop's latency can only add to it."""
    from parlab.pipeline.schedules import make_schedule
    from parlab.planner.scaling.step_model import pipeline_makespan

    for p, m in ((2, 4), (4, 8)):
        schedule = make_schedule("1f1b", p, m)
        free = pipeline_makespan(schedule, [1.0] * p, [2.0] * p, 0.0)
        assert free == (m + p - 1) * 3.0
        assert free < pipeline_makespan(schedule, [1.0] * p, [2.0] * p, 0.25) \
            < pipeline_makespan(schedule, [1.0] * p, [2.0] * p, 0.5)
