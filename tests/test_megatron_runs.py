"""Megatron-LM's Table 1 rows run shapes-only (parlab.planner.scaling.megatron_runs): the achieved rate is
Megatron's eq. 3 FLOPs ÷ (paced step · GPUs), computed from the run; the topology is nodes of 8
(parlab.core.topology.nodes). The rows themselves (32 and 64 ranks) run in `python -m parlab bench
scale --megatron`, not here; a 2-rank cut of the 1.7B row checks the arithmetic."""

import pytest

from parlab.core.topology import nodes
from parlab.planner.scaling import megatron_runs
from parlab.planner.scaling.extrapolate import HARDWARE, MEGATRON, HwPlan, iteration_flops, predict


def test_nodes_of_eight_link_inside_and_between():
    t = nodes(16)
    assert t.nodes == (tuple(range(8)), tuple(range(8, 16)))
    assert t.link_for(range(8)).name == t.link_between(0, 7).name
    assert t.link_between(0, 7) != t.link_between(7, 8)  # NVLink inside, HDR-IB between
    assert t.link_for([0, 8]) == t.link_between(0, 8)  # a group across nodes: the slower link
    with pytest.raises(ValueError, match="per_node=0"):
        nodes(8, per_node=0)


def test_the_rows_that_fit_in_64_ranks():
    assert [row[0].name for row in megatron_runs.fitting_rows(64)] == ["1.7B", "3.6B"]
    assert megatron_runs.fitting_rows(16) == []
    with pytest.raises(ValueError, match="max_ranks=0"):
        megatron_runs.fitting_rows(0)


def test_a_row_is_eq3_over_the_paced_step():
    shape = MEGATRON[0][0]  # 1.7B: 24 layers, hidden 2304, 24 heads
    row = megatron_runs.run_row(shape, gpus=2, batch=4, tp=1, pp=1, published=137)
    assert row["plan"] == "tp1·pp1·dp2"
    assert row["measured_TFLOPs"] == iteration_flops(shape, 4) / (row["step_s"] * 2) / 1e12
    assert row["error"] == (row["measured_TFLOPs"] - 137) / 137
    model = predict(shape, HARDWARE["A100"], HwPlan(1, 1, 2, 2), 4)["tflops"]
    assert row["model_TFLOPs"] == model
    # the clock prices what the run executed: within 10% of eq. 3's count (attention, the head)
    assert abs(row["counted_flops"] / row["eq3_flops"] - 1) < 0.10
    text = megatron_runs.format_row(row)
    assert "published 137" in text and f"{row['measured_TFLOPs']:.1f}" in text


def test_a_big_run_reports_its_step_and_the_memory_of_all_ranks():
    # the 64-rank run (a 7.5B GPT as dp2·tp8·pp4) is `bench scale --big`; here its code on 4 ranks
    line = megatron_runs.big_run("gpt2", world_size=4, dp=1, tp=2, pp=2, batch_size=4,
                                 microbatches=2)
    assert line.startswith("gpt2 as dp1·tp2·pp2 on 4 ranks")
    pss = float(line.split("PSS ")[1].split(" MiB")[0].replace(",", ""))
    assert pss > 100  # four ranks of torch: hundreds of MiB at least, sampled while they ran
