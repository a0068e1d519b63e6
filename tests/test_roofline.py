"""parlab.core.roofline: every operator priced by FLOPs alone (launch + FLOPs / F), by the paced
clock's roofline (launch + max(FLOPs / F, bytes / HBM), views free) and by PyTorch's
RuntimeEstimator code with the A100's datasheet figures — each checked against its closed form on
operators whose FLOPs and bytes are known."""

import pytest
import torch

from parlab.core import roofline
from parlab.core.link import ACCELERATORS
from parlab.planner.scaling import megatron_runs

A100 = ACCELERATORS["A100"]
N = 256


def _setup():
    return torch.ones(N, N), torch.ones(N, N)  # fake: no data, (N, N) fp32 each


def test_a_matmul_an_elementwise_op_and_a_view_priced_three_ways():
    r = roofline.compare(lambda ab: (ab[0] @ ab[1], ab[0] * 2, ab[0].t()), setup=_setup)
    mm, mul, t = (r["rows"][k] for k in ("aten.mm", "aten.mul", "aten.t"))
    flops, mm_bytes = 2 * N ** 3, 3 * N * N * 4  # two inputs and one output of N² floats
    assert (mm["flops"], mm["bytes"]) == (flops, mm_bytes)
    assert mm["flops_s"] == A100.launch_s + flops / A100.flops
    assert mm["roofline_s"] == A100.launch_s + max(flops / A100.flops, mm_bytes / A100.hbm_Bps)
    # PyTorch's roofline: no launch, FLOPs halved into MACs at 75% of the datasheet peak
    assert mm["torch_s"] == pytest.approx(max(mm_bytes / A100.hbm_Bps,
                                              flops / 2 / (0.75 * A100.peak_flops)), rel=1e-12)
    # x * 2 computes no counted FLOPs and moves 2·N² floats: memory-bound on the roofline
    assert mul["flops_s"] == A100.launch_s
    assert mul["roofline_s"] == A100.launch_s + 2 * N * N * 4 / A100.hbm_Bps
    # a transpose is a view: FLOPs alone count its launch, the roofline and PyTorch nothing
    assert t["flops_s"] == A100.launch_s and t["roofline_s"] == 0 and t["torch_s"] == 0
    assert r["total"]["ops"] == 3
    assert "roofline (the paced clock) charges" in roofline.format_comparison(r)


def test_the_roofline_column_is_what_a_paced_span_charges():
    from parlab.core import clock as clocks
    from parlab.core import pacer as pacers
    from parlab.core.shapes import shapes
    from parlab.core.trace import Timeline

    r = roofline.compare(lambda ab: (ab[0] @ ab[1]).softmax(-1).t().sum(), setup=_setup)
    with shapes():
        a, b = _setup()
        timeline = Timeline(0, pacers.Pacer(clocks.resolve("A100")))
        with timeline.span("forward"):
            (a @ b).softmax(-1).t().sum()
    assert timeline.events[0].duration == pytest.approx(r["total"]["roofline_s"], rel=1e-12)


def test_a_preset_layer_is_memory_bound_somewhere():
    setup, step = megatron_runs.preset_step("gpt2", batch=1, layers=1)
    r = roofline.compare(step, setup=setup)
    assert r["total"]["roofline_s"] > r["total"]["flops_s"]  # bytes the FLOPs did not see
    softmax = r["rows"]["aten._softmax"]
    assert softmax["roofline_s"] > 10 * softmax["flops_s"]  # a softmax moves, it hardly computes


def test_an_accelerator_without_a_bandwidth_is_refused():
    with pytest.raises(ValueError, match="accelerator='TPU'"):
        roofline.compare(lambda: None, accelerator="TPU")
