"""Chapters 01–05's printed verdicts that used to state what the run contradicted (issue 51): each
is computed from the numbers it is given, with its tolerance, never asserted unmeasured."""


def test_same_plan_diagnosis_reads_the_fastest_repeats():
    """Two runs of one resharding plan: alike fastest repeats blame the slow repeats (the median),
    different fastest repeats are said to be unexplained by the plan; never "noise" unmeasured."""
    from parlab.tensor_parallel.explore.reshard import _same_plan_diagnosis

    base = {"measured_ms": 27.3, "fastest_ms": 27.2}
    slow_median = {"method": "broadcast", "measured_ms": 121.5, "fastest_ms": 27.9}
    text = _same_plan_diagnosis(slow_median, base, 4)
    assert "alike" in text and "broadcast's median is 93.6 ms above its fastest repeat" in text
    text = _same_plan_diagnosis({"method": "alpacomm", "measured_ms": 60.0, "fastest_ms": 50.0}, base, 4)
    assert "even their fastest repeats differ" in text and "50.0 vs 27.2" in text


def test_zero_padding_report_is_each_ranks_share():
    """Chapter 02: the memory's "padding" is the whole units'; each rank is over the formula by
    exactly 1/N of it."""
    from parlab.zero import explore as ex

    out = ex.padding_report(world_size=3)
    assert out["ok"] and out["per_rank"] == out["padding"] / 3 and out["padding"] > 0

