"""Issue 34: a 16-rank cluster on a laptop. The exact cases at 8 and 16 ranks (CI-small: tiny
models, 2 steps), ledger bytes equal to the closed forms, one paced repeatability check at 16
ranks, and the scaling model on a point it must predict. No raw clock: timing is paced."""

from __future__ import annotations

import pytest

import parlab
from parlab.engine import scaling

STEPS, BATCH = 2, 16
REPEAT_TOLERANCE = 0.05  # two paced runs of the same 16-rank point (issue 34's goal)


@pytest.fixture(scope="module")
def reference():
    return {m: parlab.run("single", model=m, steps=STEPS, batch_size=BATCH) for m in ("gpt",)}


@pytest.fixture(scope="module")
def paced16():
    """Two paced runs of ddp-overlap on 16 ranks over NVLink: shared by the exactness, bytes,
    repeatability and model tests. One bucket a step keeps it short (over two nodes joined by
    100Gb IB, `python -m parlab bench scale`, a step lasts ~3x longer in paced time)."""
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
    """16 ranks on 2 cores, paced: exact, bytes = closed form, the clock held, and two runs'
    measured step within 5% of each other."""
    a, b = paced16
    for r in (a, b):
        _exact_and_bytes(r, reference["gpt"])
        assert r.clock.paced and r.config.world_size == 16
    ta, tb = a.step_times[1], b.step_times[1]
    assert abs(ta - tb) / min(ta, tb) <= REPEAT_TOLERANCE, (ta, tb)


def test_model_predicts_the_paced_16_rank_step(paced16):
    """The scaling model (α-β of the ledger on the link, WFBP overlap, counted
    compute) predicts the paced step within 10%, and the waiting it predicts is what the
    timeline shows within 10% of the step."""
    r = paced16[0]
    pred = scaling.predict_step(r, step=1)
    measured = r.step_times[1]
    assert abs(pred["step_s"] / measured - 1) <= 0.10, (pred["step_s"], measured)
    assert abs(pred["wait_s"] - pred["measured_wait_s"]) <= 0.10 * measured


def test_point_config_limits():
    """Degrees the default GPT allows; bad input named."""
    assert scaling.point_config("tp", 8) is None  # 4 heads
    assert scaling.point_config("pp", 8) is None  # 4 layers
    assert scaling.point_config("3d", 16)["degrees"] == (4, 2, 2)
    assert scaling.point_config("dp", 16, "weak")["batch_size"] == 16 * scaling.WEAK_ROWS
    with pytest.raises(ValueError, match="mode="):
        scaling.point_config("dp", 2, "medium")
    with pytest.raises(ValueError, match="dimension"):
        scaling.point_config("fsdp", 2)
