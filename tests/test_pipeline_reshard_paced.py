"""`pp-reshard` on a paced clock: its boundaries send on one Comm and receive on another over the
same group, the receive side taking the send side's identity on the paced board
(`Comm(..., shares_posts_with=tx)`), and its sends are issued from the rank's own thread where the
schedule reaches them (`reshard_boundary.source_sends`), so the rank's one virtual timeline is
advanced by one thread only: equal to single, and two runs' paced step times and timelines are
EQUAL (bit-reproducible)."""

import pytest

import parlab

KW = {"steps": 2, "clock": "A100", "link": "NVLink", "timeout": 120}


@pytest.fixture(scope="module")
def twice():
    return [parlab.run("pp-reshard", world_size=4, mesh=2, pp=2, method="broadcast", **KW)
            for _ in range(2)]


def test_pp_reshard_runs_paced_equal_to_single(twice):
    single = parlab.run("single", steps=2)
    assert twice[0].losses == pytest.approx(single.losses, abs=1e-5)
    assert len(twice[0].step_times) == 2 and all(t > 0 for t in twice[0].step_times)


def test_pp_reshard_paced_step_times_reproducible(twice):
    a, b = twice
    assert a.step_times == b.step_times
    assert a.timeline == b.timeline


def test_pp_reshard_widths_paced_eager_hides_message():
    """tp=2 → tp=1 over 10GbE (a message shorter than a forward), even split: eager 1F1B's step is
    shorter than 1F1B's (its message left one forward earlier): the chapter's section."""
    from parlab.pipeline.explore.eager import MODEL

    kw = {**KW, "link": "10GbE", "widths": [2, 1], "method": "even-split", "microbatches": 4,
          "model_config": MODEL}
    one = parlab.run("pp-reshard", world_size=3, schedule="1f1b", **kw)
    eager = parlab.run("pp-reshard", world_size=3, schedule="eager-1f1b", **kw)
    assert eager.losses == one.losses
    assert eager.step_times[-1] < one.step_times[-1]
