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


def test_eager_paced_hides_the_message_as_the_model_says():
    """The chapter's section: tp=2 → tp=1 over 10GbE (a message shorter than a forward), even
    split — eager 1F1B's pipeline span and step are shorter than 1F1B's, by at least the chapter's
    bar, and the model's spans are within its tolerance of the measured ones."""
    from parlab.pipeline.explore.eager import eager_paced

    (row,) = eager_paced(method="even-split", widths=[2, 1], link="10GbE", microbatches=4,
                         steps=2)
    assert row["hidden"] and row["agree"] and row["predicted"] > 0
    assert row["rows"]["eager-1f1b"]["step_s"] < row["rows"]["1f1b"]["step_s"]
