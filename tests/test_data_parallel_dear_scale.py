"""Chapter 01's diagnosis of WFBP and DeAR at gpt2-xl's width (parlab.data_parallel.explore.dear_scale,
paced_compute): one steady step of each, shapes-only on paced A100s, split from the timeline; the
list-scheduling model fed the run's own compute equals the run; the exposed time is the tied
embedding's bucket, all-reduce = reduce-scatter + all-gather in closed form; the counted compute
equals the run's spans; WFBP's and DeAR's backwards are equal (an allocation launches no kernel);
DeAR's step 1 holds AdamW's state creation. Paced times only (no raw clock)."""

import pytest

from parlab.core.clock import resolve
from parlab.data_parallel.explore import dear_scale, paced_compute


@pytest.fixture(scope="module")
def runs():
    return {v: dear_scale.run(v, n_layer=1, n=2, steps=4) for v in ("ddp-overlap", "dear")}


def test_steady_index():
    assert dear_scale.steady_index(4) == 2 and dear_scale.steady_index(6) == 4
    with pytest.raises(ValueError, match="steps=3"):
        dear_scale.steady_index(3)


def test_breakdown_covers_the_step_and_the_model_equals_the_run(runs):
    sizes = dear_scale.numels(1)
    for v, r in runs.items():
        part = dear_scale.breakdown(r)
        assert part["step"] == pytest.approx(r.step_times[2], rel=1e-12)
        assert part["other"] == pytest.approx(0.0, abs=1e-12)
        assert dear_scale.modelled(v, part, sizes, n=2) == pytest.approx(part["step"], rel=1e-9)


def test_exposed_is_the_tied_embedding_bucket_in_closed_form(runs):
    closed = dear_scale.closed_form_exposed(dear_scale.numels(1), n=2)
    alpha, beta, s = 1e-6, 300e9, dear_scale.numels(1)[0]  # NVLink 3; the token embedding
    assert closed["all_reduce"] == pytest.approx(2 * alpha + 4 * s / beta, rel=1e-12)
    assert closed["reduce_scatter + all_gather"] == pytest.approx(closed["all_reduce"], rel=1e-12)
    for r in runs.values():
        assert dear_scale.breakdown(r)["exposed"] == pytest.approx(closed["all_reduce"], rel=1e-9)


def test_counted_compute_is_the_runs_and_dear_step_one_creates_adams_state(runs):
    work, clock = paced_compute.counted("gpt2-xl", 1), resolve("A100")
    for r in runs.values():
        part = dear_scale.breakdown(r)
        assert part["forward"] == pytest.approx(clock.price(work["forward"]), rel=1e-9)
        assert part["optimizer"] == pytest.approx(clock.price(work["optimizer"]), rel=1e-9)
    sizes = dear_scale.numels(1)
    backward = {v: dear_scale.breakdown(r)["backward"] for v, r in runs.items()}
    gap = backward["dear"] - backward["ddp-overlap"]
    assert gap == pytest.approx(0.0, abs=1e-12)  # the same copies; a shard's allocation is free
    counted_backward = clock.price(work["backward"])
    for r in runs.values():  # the hooks' copies into the buckets (and the loss ÷ accum_steps)
        assert dear_scale.breakdown(r)["backward"] - counted_backward >= dear_scale.pack_price(sizes)
    for v, r in runs.items():  # the counted compute plus the hooks' costs: the model of the run
        compute = {k: clock.price(work[k]) for k in ("forward", "backward", "optimizer")}
        compute["backward"] += paced_compute.hook_seconds(v, sizes, 2)
        step = dear_scale.modelled(v, compute, sizes, n=2)
        assert step == pytest.approx(dear_scale.breakdown(r)["step"], rel=1e-3)
    dear, wfbp = runs["dear"].step_times, runs["ddp-overlap"].step_times
    assert dear[1] > dear[2] and wfbp[1] == pytest.approx(wfbp[2], rel=1e-12)
