"""Rank workers for tests/test_reliability.py (ranks import them by module name)."""

import os
import time

import torch
import torch.distributed as dist


def pid_then_train(rank, world_size, path, seconds=600.0):
    """Write this rank's pid to `path.<rank>`, then all-reduce in a loop (a busy training rank)."""
    with open(f"{path}.{rank}", "w") as f:
        f.write(str(os.getpid()))
    end = time.monotonic() + seconds
    t = torch.ones(1000)
    while time.monotonic() < end:
        dist.all_reduce(t)
        t.fill_(1.0)
    return rank


def listening_addresses(rank, world_size, launcher_pid):
    """Every (ip, port) the launching process listens on while this launch runs."""
    import psutil

    dist.barrier()
    conns = psutil.Process(launcher_pid).net_connections(kind="inet")
    return sorted({(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN})
