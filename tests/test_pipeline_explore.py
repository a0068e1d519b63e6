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
    from parlab.pipeline.explore_unet import straight_vs_relayed
    rows = straight_vs_relayed(UNet3DConfig(levels=3, base=4, block_size=16), 2)
    by = {p: (direct, relayed) for p, _, direct, relayed in rows}
    assert by[2][0] == by[2][1] and all(by[p][1] > by[p][0] for p in (3, 4, 5, 6))
    assert "from p = 3 on" in capsys.readouterr().out
