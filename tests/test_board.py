"""The board (parlab.core.board): each rank's virtual ready time of every op, shared by a
launch's ranks, read back under its key only; a wait blocks (in real time) until its peers have
posted, and names them when they never do."""

import os
import threading

import pytest

import parlab
from parlab.core import board
from parlab.core.link import Link

LINK = Link(2e-7, 100e9, "a link where communication ≈ compute")


def test_a_board_reads_back_what_was_posted_under_its_key_only():
    path = board.create(4)
    try:
        b = board.Board(path, 4)
        where = (board.region("g"), 7, board.salt("g"))
        assert b.read(*where, 2) is None  # nothing posted yet
        b.post(*where, 2, 12.5)
        assert b.read(*where, 2) == 12.5
        assert b.read(where[0], 7 + board.DEPTH, where[2], 2) is None  # the same slot, a later op
        assert b.read(where[0], 7, where[2] + 1, 2) is None  # another group sharing the region
    finally:
        board.remove(path)
    assert not os.path.exists(path)


@pytest.fixture
def four_rank_board():
    """A board of 4 ranks and one op's slot of a group "g": (board, (region, seq, salt))."""
    path = board.create(4)
    try:
        yield board.Board(path, 4), (board.region("g"), 3, board.salt("g"))
    finally:
        board.remove(path)


def test_a_ticket_waits_until_every_peer_has_posted(four_rank_board):
    b, where = four_rank_board
    b.post(*where, 2, 12.5)
    ticket = board.Ticket(b, [where + (2,), where + (3,)], "all_reduce #3")
    late = threading.Timer(0.05, lambda: b.post(*where, 3, 13.0))
    late.start()
    assert ticket.latest(timeout=30) == 13.0  # blocked until rank 3 posted
    late.join()
    assert board.Ticket(b, [], "send").latest(timeout=1) == float("-inf")


def test_a_peer_that_never_posts_is_named(four_rank_board):
    b, where = four_rank_board
    b.post(*where, 1, 1.0)
    ticket = board.Ticket(b, [where + (1,), where + (3,)], "all_reduce #3 of group 'world'")
    with pytest.raises(board.BoardTimeout, match=r"all_reduce #3 of group 'world'.*\[3\]"):
        ticket.latest(timeout=0.05)


def test_a_comm_derives_its_region_and_salt_once_not_per_op(monkeypatch):
    calls = []
    for name in ("region", "salt"):
        real = getattr(board, name)
        monkeypatch.setattr(board, name, lambda *parts, real=real, name=name:
                            calls.append(name) or real(*parts))
    path = board.create(8)
    try:
        b = board.Board(path, 8)
        posts = board.Posts(b, "count-derivations", [4, 5, 6, 7], 1)  # global rank 5 of 4..7
        tickets = [posts.post(op, {2}, 10.0 + seq) for seq in range(3)
                   for op in ("all_reduce", "send", "recv")]  # pairs (5, 6) and (6, 5)
        # one region and one salt for the group, one each per pair: not one per op
        assert calls.count("region") == calls.count("salt") == 3
        group = (board.region(posts.identity), board.salt(posts.identity))
        assert tickets[6].entries == [(group[0], 2, group[1], r) for r in (4, 6, 7)]
        assert b.read(group[0], 2, group[1], 5) == 12.0  # the same keys as derived per op
        assert tickets[1].entries == []  # a send needs nobody: it is done when its bytes left
        (recv_entry,) = tickets[2].entries
        assert recv_entry[3] == 6  # a receive needs its sender's post
        assert posts.collectives == 3 and posts.messages == {("send", 6): 3, ("recv", 6): 3}
        # a broadcast's receivers need the source only; the source nobody
        assert [e[3] for e in posts.post("broadcast", {0}, 1.0, needs=[0]).entries] == [4]
        assert posts.post("broadcast", {0}, 1.0, needs=[]).entries == []
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
def test_a_paced_run_repeats_to_the_bit(scheme):
    runs = [parlab.run(scheme, world_size=2, steps=3, clock="A100", link=LINK) for _ in range(2)]
    assert runs[0].timeline == runs[1].timeline
    assert runs[0].step_times == runs[1].step_times


def test_data_parallel_forward_is_paced_like_every_span():
    run = parlab.run("ddp-naive", world_size=2, steps=3, clock="A100", link=LINK)
    forwards = {e["t1"] - e["t0"] for e in run.timeline
                if e["kind"] == "compute" and e["name"] == "forward"}
    # the same operators every step and rank: the same price, to the rounding of t1 − t0 at
    # different offsets (one ulp of t, ~1e-19 s here)
    assert max(forwards) - min(forwards) < 1e-15 and min(forwards) > 0
