"""Chapter 04's balanced partition on one clock: the profile priced on the paced A100 (shapes only)
puts GPT-2's vocabulary head at several blocks, the balanced split differs from the even one, and
run on the same clock it is faster; the balanced split's bubble is within 5 points of
(p−1)/(m+p−1). Virtual time only: deterministic."""

from parlab.pipeline.explore import stages


def test_partition_is_profiled_and_run_on_one_paced_clock(capsys):
    out = stages.partition_report(world_size=2, microbatches=4, steps=1, clock="A100")
    assert out["head_blocks"] > 2 and out["head_blocks_raw"] is None
    assert not out["same"] and list(out["balanced"]["counts"]) == [3, 1]
    assert out["even"]["step_s"] > out["balanced"]["step_s"]
    assert abs(out["balanced"]["bubble"] - out["theory"]) <= 0.05
    text = capsys.readouterr().out
    assert "this CPU" not in text and "the balanced split is faster" in text
