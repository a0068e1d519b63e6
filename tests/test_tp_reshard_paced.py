"""Chapter 03, section 9 on the paced clock (`parlab.tensor_parallel.explore.reshard_paced`):
cross-mesh resharding (AlpaComm, Zhuang et al., MLSys 2023) between two nodes over HDR InfiniBand,
shapes-only. One launch serves every assert: the plans deliver the right values, a plan run twice
gives equal virtual times (==), plans that differ only in order take equal time all at once (==),
the paced times equal the clock's rule replayed and AlpaComm's NIC model with the runtime's
costs, and one at a time the searched order beats send-recv's on row → col."""

import pytest

from parlab.core.link import real
from parlab.tensor_parallel import reshard
from parlab.tensor_parallel.explore import reshard_paced as rp
from parlab.tensor_parallel.explore import reshard_paced_show as show

PAIRS = (("row", "col"), ("replicated", "row"))
METHODS = ("send-recv", "alpacomm")


@pytest.fixture(scope="module")
def result():
    return rp.run(4, "HDR-IB", pairs=PAIRS, methods=METHODS, repeats=2, check_shape=(16, 8))


def _row(result, pair, method, runtime):
    return next(r for r in result["rows"]
                if (r["pair"], r["method"], r["runtime"]) == (pair, method, runtime))


def test_delivers_and_repeats_are_bit_equal(result):
    assert result["ok"]
    assert all(r["repeats_equal"] for r in result["rows"])


def test_same_transfers_in_another_order_take_equal_time_all_at_once(result):
    a = _row(result, "row→col", "send-recv", "all-at-once")
    b = _row(result, "row→col", "alpacomm", "all-at-once")
    assert show._same_transfers(result, "row→col", "send-recv") == \
        show._same_transfers(result, "row→col", "alpacomm")
    assert a["paced_ms"] == b["paced_ms"]


def test_paced_equals_the_models(result):
    for r in result["rows"]:
        tolerance = show.REPLAY_TOLERANCE if r["runtime"] == "all-at-once" else show.MODEL_TOLERANCE
        assert r["paced_ms"] == pytest.approx(r["model_ms"], rel=tolerance), r


def test_order_and_balance_pay_one_at_a_time(result):
    base = _row(result, "row→col", "send-recv", "one-at-a-time")
    ours = _row(result, "row→col", "alpacomm", "one-at-a-time")
    # 2 sources × 2 destinations: plan order takes 3 tile slots, the searched order 2
    assert base["paced_ms"] / ours["paced_ms"] == pytest.approx(1.5, rel=0.01)
    balanced = _row(result, "replicated→row", "alpacomm", "all-at-once")
    assert balanced["speedup"] == pytest.approx(2.0, rel=0.01)  # each replica sends one tile


def test_queue_model_closed_form():
    """replicated → row, send-recv: source 0 sends both tiles, each in 8 chunks, back to back."""
    link = real("HDR-IB")
    shape, src, dst = (8192, 4096), [0, 1], [2, 3]
    plan = reshard.plan(shape, "replicated", src, "row", dst, "send-recv")
    links = lambda a, b: link  # noqa: E731
    tile = 4096 * 4096 * 2
    expect = 2 * (8 * link.latency_s + tile / link.bandwidth_Bps)
    assert rp.queue_seconds(plan, links, 2) == pytest.approx(expect, rel=1e-12)
    # one at a time the two tiles are one after another too: + a ready token each
    token = link.cost(rp.TOKEN_BYTES)
    assert rp.protocol_seconds(plan, links, 2) == pytest.approx(expect + 2 * token, rel=1e-12)
