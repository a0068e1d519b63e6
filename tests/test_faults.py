"""Faults (issue 35, item 5): a hung rank ends the launch at its timeout, and the error names the
stuck rank (the one silent longest, or the one not waiting in a collective while the others
wait), its last reported step and where it was; the rendezvous store's trust boundary is
documented."""

import pathlib

import pytest

import parlab.core.rendezvous
from parlab.core.launch import RankError, launch
from parlab.core.stuck import SILENT_S, RankStatus, stuck_rank
from tests import workers, workers_faults

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_a_sleeping_rank_is_named_with_its_step_and_line():
    """Rank 1 sleeps as step 3 begins; ranks 0 and 2 wait in that step's all-reduce."""
    with pytest.raises(RankError) as info:
        launch(workers_faults.stuck_at_step, 3, 1, 3, "sleep", timeout=5)
    text = str(info.value)
    assert info.value.rank == 1
    assert "timeout after 5 s: ranks [0, 1, 2] had not finished (finished: [])" in text
    assert "stuck: rank 1, not in a collective while the others wait in one: step 3 of 6, at " \
           "tests/workers_faults.py:" in text and "in stuck_at_step" in text
    assert "rank 0: step 3 of 6, waiting in all_reduce (called at tests/workers_faults.py:" in text
    assert "rank 2: step 3 of 6, waiting in all_reduce" in text


def test_a_stopped_rank_is_named_as_silent():
    """Rank 2 stops itself (SIGSTOP) as step 2 begins: no heartbeat from then on."""
    with pytest.raises(RankError, match=r"stuck: rank 2, no heartbeat for \d+\.\d s \(stopped or "
                                        r"frozen\); last heard: step 2 of 6") as info:
        launch(workers_faults.stuck_at_step, 3, 2, 2, "stop", timeout=8)
    assert info.value.rank == 2
    assert "rank 0: step 2 of 6, waiting in all_reduce" in str(info.value)


def _status(heard, step=None, at=None, op=None):
    return RankStatus(heard, None if step is None else (step, 10), at, op)


def test_the_stuck_rank_rules():
    now = 100.0
    waiting = _status(now, 4, "train.py:9 in loop", "all_reduce")
    # silent longest wins, whatever the others do
    rank, why = stuck_rank([0, 1, 2], [waiting, _status(now - SILENT_S - 1, 4),
                                       _status(now - SILENT_S - 3, 4)], now)
    assert rank == 2 and why.startswith(f"no heartbeat for {SILENT_S + 3:.1f} s")
    # the one outside a collective while the others wait in one
    busy = _status(now, 4, "train.py:7 in loop")
    assert stuck_rank([0, 1, 2], [waiting, busy, waiting], now) == (
        1, "not in a collective while the others wait in one: step 4 of 10, at train.py:7 in loop")
    # all waiting (collectives that do not match): the one furthest behind
    behind = _status(now, 3, "train.py:9 in loop", "broadcast")
    assert stuck_rank([0, 1], [waiting, behind], now)[0] == 1
    # a rank that never reported counts as furthest behind
    assert stuck_rank([0, 1], [busy, _status(now)], now) == (
        1, "furthest behind: no step reported, no word yet (still starting?)")


def test_the_rendezvous_trust_boundary_is_documented():
    security = (ROOT / "docs" / "security.md").read_text()
    for fact in ("127.0.0.1", "any local process", "torchrun", "--master-addr", "token"):
        assert fact.lower() in security.lower(), fact
    assert "Trust boundary" in parlab.core.rendezvous.__doc__
    assert "docs/security.md" in parlab.core.rendezvous.__doc__


def test_a_killed_forkserver_is_named_and_the_next_launch_starts_a_new_one():
    """Issue 46: a killed forkserver was reported as "rank 0 exited with code 255". Rank 0 kills
    its parent, the forkserver; every rank dies with it (PR_SET_PDEATHSIG)."""
    from parlab.core import launch as launching

    launch(workers.hello, 2)  # a forkserver is running
    before = launching._forkserver_pid()
    with pytest.raises(RankError, match=rf"rank \d ended without reporting a result: the "
                                        rf"forkserver that started the ranks \(pid {before}\) was "
                                        r"killed by signal SIGKILL, and every rank died with it"):
        launch(workers_faults.kill_forkserver, 2, timeout=60)
    # dead, not yet reaped, before this launch: multiprocessing starts a new forkserver
    assert [r["rank"] for r in launch(workers.hello, 2)] == [0, 1]
    assert launching._forkserver_pid() not in (None, before)
