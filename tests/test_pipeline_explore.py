"""Chapter 04's teaching helpers: Megatron's (p−1)/m against the step fraction, the micro-batches a
bubble target needs (`parlab.pipeline.cost`), the first figure's equal work per panel, and the
U-Net's skips straight vs relayed at every even split (closed form)."""

import pytest

from parlab.pipeline import cost


def test_megatrons_bubble_is_the_same_idle_time_over_ideal_compute():
    for p, m, v in [(2, 1, 1), (4, 8, 1), (8, 24, 2)]:
        x = cost.bubble_overhead(p, m, v)
        name = "interleaved" if v > 1 else "1f1b"
        assert x / (1 + x) == pytest.approx(cost.theory_bubble(name, p, m, v))
    with pytest.raises(ValueError, match="m=0"):
        cost.bubble_overhead(4, 0)


def test_smallest_microbatches_is_the_first_m_under_the_target():
    for p, t in [(2, 0.1), (4, 0.1), (8, 0.05), (8, 0.3)]:
        m = cost.smallest_microbatches(p, t)
        assert cost.theory_bubble("1f1b", p, m) <= t
        assert m == 1 or cost.theory_bubble("1f1b", p, m - 1) > t
    with pytest.raises(ValueError, match="target=1.5"):
        cost.smallest_microbatches(4, 1.5)


def test_the_first_figure_gives_every_schedule_the_same_work(capsys):
    import matplotlib
    matplotlib.use("Agg")
    from parlab.pipeline import explore
    explore.show_schedules(2, 4)
    out = capsys.readouterr().out
    assert "naive 6.00" in out and "gpipe 3.75" in out and "zb 3.25" in out  # 3 units + bubble


def test_unet_skips_relayed_cost_more_only_where_a_stage_lies_between(capsys):
    from parlab.models import UNet3DConfig
    from parlab.pipeline.explore.unet import straight_vs_relayed
    rows = straight_vs_relayed(UNet3DConfig(levels=3, base=4, block_size=16), 2)
    by = {p: (direct, relayed) for p, _, direct, relayed in rows}
    assert by[2][0] == by[2][1] and all(by[p][1] > by[p][0] for p in (3, 4, 5, 6))
    assert "from p = 3 on" in capsys.readouterr().out


def test_when_to_use_follows_the_numbers_it_is_given():
    """Chapter 04's verdict (explore.summary.when_to_use_lines): four lines whose directions flip
    when the measured ratios flip, and whose m threshold is the closed form's."""
    from parlab.pipeline.explore.summary import when_to_use_lines

    n = {"p": 2, "agree": 3, "points": 3, "last_m": 4, "last_bubble": 0.2, "act": 0.6,
         "message_ms": 0.5, "overhead_ms": 0.5, "forward_ms": 20.0, "w_share": 0.3, "gain": 1.4,
         "even_spread": 1.7, "slowest_ratio": 0.8,
         "narrow": [("even-split", 0.9, True)], "inter_bytes": 2.0, "inter_how": "in this run's ledger",
         "dual_bubble": 0.5, "dual_step": 1.2, "unet_pp": 2, "unet_cut": 1.8, "unet_grow": 8.0,
         "lamp": 0.7}
    lines = when_to_use_lines(n)
    assert lines[0] == "When to use it (from this run):" and len(lines) == 5
    assert "(20×, paced;" in lines[1] and "at 3 of 3 points" in lines[1]
    assert f"takes m ≥ {cost.smallest_microbatches(2, 0.1)}" in lines[1]
    assert "0.60× GPipe's peak activations here (less)" in lines[1]
    assert "bubble 0.50× 1F1B's (smaller), step 1.20× (not shorter)" in lines[2]
    assert "2.0× 1F1B's pipeline bytes" in lines[2] and "(here 30%)" in lines[2]
    assert "stages ran 1.7× apart" in lines[3] and "ran 1.40× its throughput (faster)" in lines[3]
    assert "0.70× the even split's (smaller)" in lines[3]
    assert "10.0% shorter (even-split) — worth it" in lines[4]

    n.update(act=1.1, gain=0.9, slowest_ratio=1.05, dual_bubble=1.1, dual_step=0.8, lamp=1.2,
             narrow=[("even-split", 1.02, False)])
    for key in ("inter_bytes", "unet_cut"):
        n.pop(key)
    flipped = when_to_use_lines(n)
    assert "1.10× GPipe's peak activations here (not less)" in flipped[1]
    assert "bubble 1.10× 1F1B's (not smaller), step 0.80× (shorter)" in flipped[2]
    assert "pipeline bytes" not in flipped[2] and "U-Net" not in flipped[3]
    assert "ran 0.90× its throughput (not faster: its slowest stage took 1.05×" in flipped[3]
    assert "2.0% longer (even-split) — not worth it" in flipped[4]
    n["gain"] = 1.01  # inside the chapter's 5% bar: no gain claimed, the diagnosis printed
    assert "ran 1.01× its throughput (within the chapter's 5% bar: no gain: its slowest stage" \
        in when_to_use_lines(n)[3]
    # the profile on the run's clock found nothing to balance: no gain is claimed or diagnosed
    n.update(same_split=True, head_blocks=0.22, head_blocks_raw=6.3, profiled_on="A100 time",
             even_spread=1.04)
    same = when_to_use_lines(n)[3]
    assert "the profile on A100 time put the large-vocabulary head at 0.22 blocks" in same
    assert "(on this CPU, raw: 6.3)" in same and "throughput" not in same
