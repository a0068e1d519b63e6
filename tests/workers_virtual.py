"""Workers for the virtual-time tests (tests/test_clock.py): small patterns of ops whose virtual
completions have closed forms (parlab.core.virtual_link's rules)."""

import torch

from parlab.core import clock as clocks
from parlab.core import pacer as pacers
from parlab.core.comm import Comm
from parlab.core.trace import Timeline


def _comm(rank, link):
    timeline = Timeline(rank, pacers.Pacer(clocks.resolve("A100")))
    return Comm(None, timeline=timeline, link=link), timeline


def collective_after_uneven_compute(rank, world_size, link, numel, busy_s):
    """Rank r is busy r·busy_s, then all-reduces `numel` floats: (issue, end, bytes, rounds)."""
    comm, timeline = _comm(rank, link)
    timeline.advance(rank * busy_s)
    comm.all_reduce(torch.ones(numel))  # (numel,)
    record = comm.ledger.records[-1]
    return record["t_start"], record["t_end"], record["bytes_sent"], record["rounds"]


def message_posted_late_or_early(rank, world_size, link, numel, send_at, recv_at):
    """Rank 0 sends `numel` floats at `send_at`; rank 1 posts its receive at `recv_at`: the end
    of each side."""
    comm, timeline = _comm(rank, link)
    tensor = torch.ones(numel)  # (numel,)
    if rank == 0:
        timeline.advance(send_at)
        comm.send(tensor, 1)
    else:
        timeline.advance(recv_at)
        comm.recv(tensor, 0)
    return comm.ledger.records[-1]["t_end"]


def two_sends_share_the_outgoing_direction(rank, world_size, link, numel):
    """Rank 0 issues two sends at time 0 (async), then waits both: their ends."""
    comm, timeline = _comm(rank, link)
    if rank == 0:
        handles = [comm.isend(torch.ones(numel), 1) for _ in range(2)]  # (numel,) each
        for handle in handles:
            handle.wait()
        return [r["t_end"] for r in comm.ledger.records]
    for _ in range(2):
        comm.recv(torch.empty(numel), 0)  # (numel,)
    return [r["t_end"] for r in comm.ledger.records]
