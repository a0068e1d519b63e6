"""The double tree (`parlab.core.double_tree`) run on paced A100s over one link: the result
against torch's all-reduce (integer-valued float32 exactly, random float32 within RTOL/ATOL: the
trees add in another order), the ledger bytes, and each size's paced time, shapes-only.
"""

from __future__ import annotations

import torch

from parlab.core import double_tree
from parlab.core.clock import Clock
from parlab.core.comm import Comm
from parlab.core.launch import launch
from parlab.core.link import ACCELERATORS, real
from parlab.core.pacer import Pacer
from parlab.core.shapes import shapes

ACCELERATOR = "A100"
RTOL, ATOL = 1e-5, 1e-5  # float32 sums in another order: |Δ| ≤ ATOL + RTOL·|x| (torch.allclose)


def paced_comm(link) -> Comm:
    """A world Comm on `link` (a Link or Topology) keeping paced A100 time."""
    comm = Comm(link=link)
    comm.timeline.pacer = Pacer(Clock(ACCELERATORS[ACCELERATOR]))
    return comm


def timed(comm, comms, nbytes: int, chunks: int) -> tuple[float, int]:
    """(paced seconds of one double-tree all-reduce of `nbytes` of float32, shapes-only, this
    rank's ledger bytes sent in it), every rank starting together after a barrier."""
    with shapes():
        tensor = torch.empty(nbytes // 4)  # (S/4,) float32, shapes only
        comm.barrier()
        since, t0 = len(comm.ledger.records), comm.timeline.now()
        double_tree.all_reduce(comms, tensor, chunks)
        return comm.timeline.now() - t0, sum(r["bytes_sent"] for r in comm.ledger.records[since:])


def worker(rank: int, world_size: int, link_name: str, numel: int, chunks: int,
           sizes: list[int]) -> dict:
    """One rank on the real `link_name` (every pair): the real checks at `numel` elements in
    `chunks` chunks, then each size's paced time at its closed-form best chunk count."""
    comm = paced_comm(real(link_name, ACCELERATOR))
    comms = double_tree.split(comm)
    out = {}
    x = (torch.arange(numel) % 97 + 100 * rank).float()  # (S,) integer-valued float32
    mine, ref = x.clone(), x.clone()
    since = len(comm.ledger.records)
    double_tree.all_reduce(comms, mine, chunks)
    out["bytes"] = sum(r["bytes_sent"] for r in comm.ledger.records[since:])
    out["messages"] = sum(r["op"] == "send" for r in comm.ledger.records[since:])
    comm.all_reduce(ref, algo="gloo")
    out["equal"] = torch.equal(mine, ref)
    y = torch.randn(numel, generator=torch.Generator().manual_seed(rank))  # (S,) random float32
    mine, ref = y.clone(), y.clone()
    double_tree.all_reduce(comms, mine, chunks)
    comm.all_reduce(ref, algo="gloo")
    out["close"] = torch.allclose(mine, ref, rtol=RTOL, atol=ATOL)
    out["max_error"] = (mine - ref).abs().max().item()
    lk = real(link_name, ACCELERATOR)
    for size in sizes:  # bytes (at the closed form's best chunk count), or (bytes, chunks)
        nbytes, k = size if isinstance(size, (tuple, list)) else (size, double_tree.chunk_count(
            size, world_size, lk.latency_s, lk.bandwidth_Bps))
        out[tuple(size) if isinstance(size, (tuple, list)) else size] = (
            *timed(comm, comms, nbytes, k), k)
    for c in (*comms, comm):
        c.close()
    return out


def run(world_size: int, link_name: str = "NVLink3", numel: int = 1001, chunks: int = 3,
        sizes=()) -> list[dict]:
    """Launch `worker`; the ranks' results in rank order."""
    return launch(worker, world_size, link_name, numel, chunks, list(sizes), timeout=300.0)
