"""Chapter 08 at real scale, run (parlab.compression.explore.at_scale_run): the compressors run
shapes-only exactly as on real tensors (same ledger, same paced step times), the α-β estimate's
bytes are the registered closed forms, and the paired error-feedback verdict
(parlab.compression.explore.feedback)."""

import math

import pytest

import parlab
from parlab.compression import cost
from parlab.compression.explore import at_scale_run, feedback


@pytest.mark.parametrize("scheme", ["topk", "powersgd"])
def test_compressor_shapes_only_equals_its_real_paced_run(scheme):
    runs = [parlab.run(scheme, world_size=2, clock="A100", link="100Gb-IB", steps=2,
                       shapes_only=fake) for fake in (False, True)]
    real, fake = runs
    assert fake.losses is None and real.losses is not None
    assert fake.step_times == real.step_times
    assert fake.bytes_per_rank() == real.bytes_per_rank()
    assert fake.bytes_per_rank("rounds") == real.bytes_per_rank("rounds")
    assert fake.memory == real.memory


def test_estimate_bytes_are_the_closed_forms():
    shapes = at_scale_run.shapes(1)
    psi = sum(math.prod(s) for s in shapes)
    # tied head, no linear biases; LayerNorms have weight and bias
    assert psi == 1600 * 50257 + 1024 * 1600 + 12 * 1600 ** 2 + 4 * 1600 + 2 * 1600
    (_, base), (_, top), (_, psgd) = at_scale_run.SCHEMES
    b = at_scale_run.estimate("ddp-bucketed", base, shapes, 8, 1024)
    assert b["bytes"] == pytest.approx(2 * 7 / 8 * 4 * psi)
    assert b["rounds"] == 14 * math.ceil(4 * psi / (25 * 2 ** 20))
    t = at_scale_run.estimate("topk", top, shapes, 8, 1024)
    assert t["bytes"] == sum(cost.bytes_per_step("topk", shapes, 8, ratio=0.01).values())
    assert t["rounds"] == 7
    p = at_scale_run.estimate("powersgd", psgd, shapes, 8, 1024)
    assert p["bytes"] == pytest.approx(sum(cost.bytes_per_step("powersgd", shapes, 8, rank=4).values()),
                                       rel=1e-5)
    assert b["compute_s"] == t["compute_s"] == pytest.approx(6 * psi * 1024 / 150e12)
    assert b["sync_s"] > 10 * t["sync_s"] > 10 * p["sync_s"]


def test_busy_counts_overlapping_spans_once():
    assert at_scale_run.busy([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == 4.0
    assert at_scale_run.busy([]) == 0.0


def test_paired_verdict():
    assert feedback.paired_verdict([3.5, 3.4, 3.2], [3.7, 3.6, 3.45])[0] == "holds"
    assert feedback.paired_verdict([3.7, 3.6, 3.45], [3.5, 3.4, 3.2])[0] == "the opposite holds"
    assert feedback.paired_verdict([3.5, 3.4, 3.2], [3.6, 3.3, 3.3])[0] == "no verdict"
    verdict, mean, spread = feedback.paired_verdict([1.0, 1.0], [1.1, 1.5])
    assert verdict == "no verdict" and mean == pytest.approx(0.3) and spread == pytest.approx(0.4)
