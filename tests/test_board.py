"""The paced board (parlab.core.board): peers' paced issue times, shared by a launch's ranks, so
that a wait on a peer costs the peer's paced time, not its scheduler's; and the debt a late rank
carries (parlab.core.pacer.Pacer)."""

import os
import time

import pytest

import parlab
from parlab.core import board
from parlab.core import clock as clocks
from parlab.core import pacer as pacers
from parlab.core.link import Link
from parlab.core.trace import Timeline

LINK = Link(2e-7, 100e9, "a link where communication ≈ compute")


def test_a_board_reads_back_what_was_posted_under_its_key_only(tmp_path):
    path = board.create(4)
    try:
        b = board.Board(path, 4)
        where = (board.region("g"), 7, board.salt("g"))
        assert b.read(*where, 2) is None  # nothing posted yet
        b.post(*where, 2, 12.5)
        assert b.read(*where, 2) == 12.5
        assert b.read(where[0], 7 + board.DEPTH, where[2], 2) is None  # the same slot, a later op
        assert b.read(where[0], 7, where[2] + 1, 2) is None  # another group sharing the region
        ticket = board.Ticket(b, [where + (2,), where + (3,)])
        assert ticket.peers_issued() is None  # rank 3 unknown: the real time decides
        assert board.Ticket(b, [where + (2,), where + (3,)], optional=True).peers_issued() == 12.5
        b.post(*where, 3, 13.0)
        assert ticket.peers_issued() == 13.0
    finally:
        board.remove(path)
    assert not os.path.exists(path)


def test_a_comm_derives_its_region_and_salt_once_not_per_op(monkeypatch):
    calls = []
    for name in ("region", "salt"):
        real = getattr(board, name)
        monkeypatch.setattr(board, name, lambda *parts, real=real, name=name:
                            calls.append(name) or real(*parts))
    path = board.create(4)
    try:
        b = board.Board(path, 4)
        posts = board.Posts(b, "count-derivations", [4, 5, 6, 7], 1)  # global rank 5 of 4..7
        tickets = [posts.post(op, {2}, 10.0 + seq) for seq in range(3)
                   for op in ("all_reduce", "send", "recv")]  # pairs (5, 6) and (6, 5)
        # one region and one salt for the group, one each per pair: not one per op
        assert calls.count("region") == calls.count("salt") == 3
        group = (board.region(posts.identity), board.salt(posts.identity))
        assert tickets[6].entries == [(group[0], 2, group[1], r) for r in (4, 6, 7)]
        assert b.read(group[0], 2, group[1], 5) == 12.0  # the same keys as derived per op
        assert posts.collectives == 3 and posts.messages == {("send", 6): 3, ("recv", 6): 3}
    finally:
        board.remove(path)


def board_path(rank, world_size):
    """A rank's view of its launch's board file (a worker for `launch`)."""
    from parlab.core.rank_process import current
    path = current().board
    return path, os.path.exists(path)


def test_a_launch_makes_its_board_and_removes_it():
    from parlab.core.launch import launch
    (path0, there0), (path1, there1) = launch(board_path, 2)
    assert path0 == path1 and there0 and there1  # one board, shared by the launch's ranks
    assert not os.path.exists(path0)  # the launcher removed it


@pytest.mark.parametrize("scheme", ["ddp-overlap", "pp-1f1b", "tp"])
def test_every_wait_of_a_paced_run_finds_its_peers_on_the_board(scheme):
    run = parlab.run(scheme, world_size=2, steps=3, clock="A100", link=LINK)
    assert run.pace["real_waits"] == 0, run.pace  # no op fell back to the real time


def test_data_parallel_forward_is_paced_like_every_span():
    run = parlab.run("ddp-naive", world_size=2, steps=3, clock="A100", link=LINK)
    forwards = [e["t1"] - e["t0"] for e in run.timeline
                if e["kind"] == "compute" and e["name"] == "forward" and e["args"]["step"] > 0]
    assert len(forwards) == 4  # steps 1 and 2 of both ranks (the first step warms up)
    # the same operators every step: the same paced time (1%), whatever the CPU did
    assert max(forwards) < 1.01 * min(forwards), forwards


def test_a_late_rank_pays_its_debt_from_later_slack():
    pacer = pacers.Pacer(clocks.resolve("A100", 2))
    timeline = Timeline(0, pacer)
    with timeline.span("forward"):
        _ = [i * i for i in range(10)]
        pacer.meter.ops += 10  # 10 operators' paced time: 4 × 10 × 30 µs = 1.2 ms
        time.sleep(0.02)  # the rank descheduled for 20 ms: real work overran its span
    assert pacer.late > 0.015  # the lateness is debt, not paced time
    t0 = timeline.now()
    with timeline.span("backward"):
        pacer.meter.ops += 1000  # 120 ms of paced time: its slack pays the debt back
    assert pacer.late == pytest.approx(0.0, abs=0.005)
    assert timeline.now() - t0 == pytest.approx(clocks.resolve("A100", 2).seconds(1000, 0), rel=0.05)
