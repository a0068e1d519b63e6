"""Rank workers for tests/test_faults.py and tests/test_checkpoint_integrity.py (ranks import
them by module name: spawned ranks cannot see functions defined inside a test)."""

import os
import signal
import time

import torch
import torch.distributed as dist

from parlab.core.rank_process import report_progress


def lock_save_dir(rank, world_size, directory):
    """Take a save_dir's run lock in this rank, as rank 0 of a ZeRO run does."""
    from parlab.zero import run_lock

    run_lock.lock(directory)
    return rank


def stuck_at_step(rank, world_size, bad_rank, bad_step, how, steps=6):
    """A training loop: report each step, all-reduce; `bad_rank` hangs as `bad_step` begins
    (how="sleep": in Python; "stop": SIGSTOP, the whole process frozen)."""
    from parlab.core.comm import Comm

    comm, t = Comm(), torch.ones(64)
    for step in range(steps):
        report_progress(step, steps)
        if rank == bad_rank and step == bad_step:
            if how == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(600)
        comm.all_reduce(t) if step % 2 else dist.all_reduce(t)  # parlab's Comm, or torch's own
    return rank


def kill_forkserver(rank, world_size):
    """Rank 0 kills the process that forked it, the forkserver (every rank then dies with it)."""
    if rank == 0:
        os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)
    return rank
