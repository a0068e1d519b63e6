"""MAD-Max's what-ifs across plans at a real model's size (issue 49, item 1): a plan of gpt2-xl's
shapes traced once shapes-only and replayed (`parlab.planner.whatif`, `trace_replay`) equals the
run it came from within 2%, and under a what-if equals a shapes-only run under the same change
within 5%, at two plans and two what-ifs. Paced (A100) time: bit-reproducible, no raw clock."""

import pytest

import parlab
from parlab.core.clock import Clock
from parlab.core.link import ACCELERATORS, REAL
from parlab.planner import whatif
from parlab.planner.plan import Plan
from parlab.planner.trace_replay import Trace, replay

REPLAY_TOLERANCE, WHATIF_TOLERANCE = 0.02, 0.05  # issue 49
PLANS = (Plan(dp=4, dp_sync="overlap"), Plan(dp=2, pp=2, microbatches=4))  # WFBP, a pipeline
WHAT_IFS = (whatif.WhatIf("2× FLOP/s", flops=2.0), whatif.WhatIf("2× bandwidth", bandwidth=2.0))


@pytest.fixture(scope="module")
def rows():
    return whatif.explore(plans=PLANS, whatifs=WHAT_IFS)  # gpt2-xl, 2 blocks, 4 ranks


def test_the_replay_of_each_trace_equals_its_run(rows):
    for row in rows:
        assert abs(row["error"]) <= REPLAY_TOLERANCE, (row["name"], row["error"])
        base = row["replay"]["as run"]
        assert 0.0 < base["wire_share"] <= base["exposed_share"] < 1.0, base


@pytest.mark.parametrize("plan_index", range(len(PLANS)))
@pytest.mark.parametrize("what", WHAT_IFS, ids=lambda w: w.name)
def test_the_replay_under_a_what_if_equals_a_run_under_it(rows, plan_index, what):
    row = rows[plan_index]
    got = whatif.check(row, what)
    assert abs(got["error"]) <= WHATIF_TOLERANCE, got
    # the what-if moves the step by more than the tolerance: the check is not vacuous
    assert got["run_s"] < row["run_s"] * (1 - WHATIF_TOLERANCE), (got, row["run_s"])


def test_the_table_and_verdicts_are_computed(rows):
    table = whatif.format_rows(rows, WHAT_IFS)
    assert all(row["name"] in table for row in rows)
    lines = whatif.verdicts(rows, whatifs=WHAT_IFS)
    assert lines[0].endswith("within 2%") and "14%–32%" in lines[1]


def test_a_setting_is_the_what_if():
    clock, link = whatif.setting(whatif.AS_RUN, world_size=4, per_node=2)
    assert clock.keep_work and clock.accelerator is ACCELERATORS["A100"]
    inside, between = link.link_between(0, 1), link.link_between(0, 2)
    assert (inside.latency_s, inside.bandwidth_Bps) == REAL["NVLink3"]
    assert (between.latency_s, between.bandwidth_Bps) == REAL["HDR-IB"]
    _, wide = whatif.setting(whatif.WhatIf("w", bandwidth=2.0, latency=2.0), 4, 2)
    assert wide.link_between(0, 2).bandwidth_Bps == 2 * between.bandwidth_Bps
    assert wide.link_between(0, 2).latency_s == between.latency_s / 2
    fast, _ = whatif.setting(whatif.WhatIf("f", flops=2.0), 4, 2)
    assert fast.accelerator.flops == 2 * ACCELERATORS["A100"].flops
    assert fast.accelerator.hbm_Bps == ACCELERATORS["A100"].hbm_Bps
    h100, h_link = whatif.setting(whatif.WhatIf("H100", accelerator="H100"), 4, 2)
    assert h100.accelerator is ACCELERATORS["H100"]
    assert (h_link.link_between(0, 1).bandwidth_Bps, h_link.link_between(0, 2).bandwidth_Bps) \
        == (REAL["NVLink4"][1], REAL["NDR-IB"][1])


@pytest.mark.parametrize("bad,match", [({"flops": 0}, "flops=0"), ({"latency": -1.0}, "latency"),
                                       ({"bandwidth": float("inf")}, "bandwidth"),
                                       ({"accelerator": "TPU"}, "accelerator='TPU'")])
def test_a_bad_what_if_is_named(bad, match):
    with pytest.raises(ValueError, match=match):
        whatif.WhatIf("bad", **bad)


def test_kernels_are_kept_only_when_asked_and_needed_to_reprice():
    plain = parlab.run("ddp-overlap", world_size=2, steps=2, clock="A100", link="NVLink",
                       batch_size=8, bucket_mb=0.05)
    assert all("work" not in out.pace for out in plain.outputs)
    trace = Trace.from_run(plain, step=1)
    with pytest.raises(ValueError, match="kept none"):
        replay(trace, clock=Clock(ACCELERATORS["H100"]))
    kept = parlab.run("ddp-overlap", world_size=2, steps=2, clock=Clock(ACCELERATORS["A100"],
                                                                        keep_work=True),
                      link="NVLink", batch_size=8, bucket_mb=0.05)
    assert kept.step_times == plain.step_times  # keeping the kernels changes no time
    again = Trace.from_run(kept, step=1)
    assert replay(again, clock=Clock(ACCELERATORS["A100"]))["step_s"] == \
        pytest.approx(replay(again)["step_s"], rel=1e-12)
