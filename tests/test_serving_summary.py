"""Chapter 12's part summaries: the range of link times over which crossover stays worth it is the
closed form's (1 + min/max ≥ 1.10 for two equal jobs), and Part B's verdicts follow the numbers
they are computed from."""

import math

import pytest

from parlab.serving.explore import summary as es


def test_comm_range_is_where_the_model_gives_ten_percent():
    # two equal jobs, P = C = 1: sequential 2 + 2s, crossover max(2, 2s, 1 + s) → gain 1 + min(s, 1/s)
    model = {"compute": {"A": 1.0, "B": 1.0}, "comm": {"A": 1.0, "B": 1.0}}
    low, high = es.comm_range(model)
    assert low == pytest.approx(0.1, rel=1e-6) and high == pytest.approx(10.0, rel=1e-6)
    low, _ = es.comm_range({"compute": {"A": 1.0}, "comm": {"A": 0.01}})  # one job: nothing to hide
    assert math.isnan(low)


def rows_and_search(saliency_acc: float):
    rows = [(1.0, 10_000, 0.98), (0.05, 1_000, 0.975), (0.0, 40, 0.9)]  # density, B/image, accuracy
    search = [{"method": "saliency (ours)", "setting": "density 1.0", "bytes": 10_000, "fewer": 0.0,
               "accuracy": 0.80},
              {"method": "saliency (ours)", "setting": "density 0.1", "bytes": 1_500, "fewer": 0.85,
               "accuracy": saliency_acc},
              {"method": "search", "setting": "Bluetooth, λ=0.3", "bytes": 2_000, "fewer": 0.8,
               "accuracy": 0.79}]
    return rows, search


def test_part_b_verdicts(capsys):
    rows, search = rows_and_search(0.6)
    latency = {"alone": 0.02, "break_even": {1.0: 5e7, 0.05: math.inf},
               "measured": {(0.05, "Wi-Fi"): 0.03}}
    lines = es.part_b(rows, 0.05, 2, latency, search, kept_follows_link=True)
    assert capsys.readouterr().out.startswith("When to use it (from this run):")
    assert "1.0: 50.00 MB/s; 0.05: never" in lines[0] and "30.0 ms (slower than one device)" in lines[0]
    assert "90% fewer bytes, losing 0.5 points of accuracy — worth it" in lines[1]
    assert "losing 1.0 points" in lines[2] and "same 2,000 B (interpolated) would lose 18.8" in lines[2]
    assert lines[2].endswith("keeps fewer transfers: holds")


def test_equal_bytes_compares_at_the_search_s_bytes():
    """Ours at the search's 2,000 B: 60% at 1,500 B and 80% at 10,000 B, linear in bytes between
    them → 61.2%; the search's 79% beats it by 17.8 points, not its own point above (80%)."""
    from parlab.serving.explore import search as ex_search
    _, search = rows_and_search(0.6)
    at = ex_search.saliency_at(search, 2_000)
    assert at["accuracy"] == pytest.approx(0.6 + 0.2 * 500 / 8_500)
    line = ex_search.equal_bytes_line(search)
    assert "ours would reach 61.2% against the search's 79.0% (+17.8 points)" in line
    assert line.endswith("at equal bytes: holds (by the interpolation)")


def test_no_break_even_says_why():
    """P = 8 ms on 2 devices saves 4 ms; 3 rounds of α = 2 ms cost 6 ms alone: no β* exists, and
    the line names both numbers and the largest α for which one would (4/3 ms)."""
    from parlab.serving import cost
    from parlab.serving.explore import edge as ex_edge
    assert math.isinf(cost.break_even_bandwidth(0.008, 1e5, 3, 2, 0.002))
    why = ex_edge._why_never(0.008, 3, 2, 0.002)
    assert "k·α = 6.0 ms" in why and "P(1 − 1/N) = 4.0 ms" in why and "α < 1.33 ms" in why
