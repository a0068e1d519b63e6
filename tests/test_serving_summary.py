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
    assert "losing 1.0 points" in lines[2] and "no more bytes lost 20.0" in lines[2]
    assert lines[2].endswith("keeps fewer transfers: holds")
