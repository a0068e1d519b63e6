"""Launching ranks: run one function in `world_size` gloo processes and bring the results home.

The idea of `torch.multiprocessing.spawn` and `torchrun`, built so that a Jupyter kernel can use
it a hundred times an hour without hanging or leaking a process: rendezvous on a loopback
TCPStore at port 0 (`parlab.core.rendezvous`); one pipe per child for progress and its result or
traceback, waited on with the process sentinels, so a silent death is noticed at once and the
first failure kills the rest; a heartbeat per rank, so a timeout names the stuck rank
(`parlab.core.stuck`); `forkserver` workers with torch preloaded (~0.1-0.3 s a launch after the
first, measured on 2 cores); ranks that die with the launcher. Under `torchrun` `launch` runs
`fn` in this process with env:// rendezvous.

Here is the parent's side: check the arguments, start the ranks, collect their results and raise
the first failure as a `RankError`. Inside a rank: `parlab.core.rank_process`. Each mechanism in
detail: docs/core.md, `parlab.core.launch`.
"""

from __future__ import annotations

import io
import multiprocessing as mp
import multiprocessing.connection as mpc
import multiprocessing.spawn as mp_spawn
import os
import signal
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch

from parlab.core import board, rendezvous
from parlab.core.rank_process import child_main, resolve, run_in_torchrun
from parlab.core.rendezvous import under_torchrun
from parlab.core.stuck import RankStatus, stuck_report

START_METHODS = ("forkserver", "spawn", "fork")
# imported once in the forkserver, inherited by every rank
PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "torch.optim", "parlab",
           "parlab.engine.runner", "parlab.core.comm", "parlab.engine.loop",
           "parlab.engine.every_scheme"]


class RankError(RuntimeError):
    """One or more ranks failed; `.rank` is the first failing rank, `.remote_traceback` its text."""

    def __init__(self, message: str, rank: int | None = None, remote_traceback: str = ""):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback


# ----------------------------------------------------------------------------- validation
def _function_reference(fn: Callable) -> str:
    """'module:qualname' for an importable function, else ValueError (a child cannot find it)."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not callable(fn) or module is None or qualname is None:
        raise ValueError(f"fn={fn!r} is not an importable function")
    if module == "__main__" or "<locals>" in qualname or "<lambda>" in qualname:
        raise ValueError(
            f"fn={module}.{qualname} is not importable by a child process: define it in a module "
            "(for example a file of the parlab package), not in a notebook cell or a closure"
        )
    try:
        found = resolve(f"{module}:{qualname}")
    except (ImportError, AttributeError) as err:
        raise ValueError(f"fn={module}.{qualname} cannot be imported: {err}") from None
    if found is not fn and getattr(found, "__wrapped__", None) is not fn:
        raise ValueError(f"fn={module}.{qualname} does not resolve to the same object on import")
    return f"{module}:{qualname}"


# ----------------------------------------------------------------------------- the launcher
def launch(
    fn: Callable,
    world_size: int,
    *args: Any,
    timeout: float = 120.0,
    link: Any = None,
    start_method: str = "forkserver",
    progress: Callable[[int, int], None] | None = None,
) -> list[Any]:
    """Run `fn(rank, world_size, *args)` on `world_size` ranks; return the results in rank order.

    `timeout` bounds the whole launch (and every collective inside it); at the timeout the
    RankError names the stuck rank (see the module docstring). `link` is made available to the
    ranks as `parlab.core.rank_process.current().link`. `progress(done, total)` is called in the
    parent when rank 0 calls `report_progress`.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be an int >= 1")
    if not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout={timeout!r} must be a number of seconds > 0")
    if start_method not in START_METHODS:
        raise ValueError(f"start_method={start_method!r} must be one of {START_METHODS}")
    reference = _function_reference(fn)
    if under_torchrun():
        env_world = int(os.environ["WORLD_SIZE"])
        if world_size == env_world:
            return run_in_torchrun(reference, world_size, args, timeout, link)
        if world_size != 1:
            raise ValueError(f"world_size={world_size} but torchrun started WORLD_SIZE={env_world}: "
                             f"under torchrun a launch uses every rank (or world_size=1, a local run)")

    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    # bound and listening now, served once every rank is started (`LoopbackStore`: no rank is
    # forked while the store's server thread runs)
    store = rendezvous.LoopbackStore(world_size, timeout, serve=False)
    board_path = board.create(world_size)
    processes, readers = [], []
    try:
        with _without_parent_main():
            for rank in range(world_size):
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=child_main,
                    args=(reference, rank, world_size, args, store.port, writer, timeout, link,
                          os.getpid(), start_method == "forkserver", board_path),
                    name=f"parlab-rank{rank}", daemon=True,
                )
                proc.start()
                writer.close()
                processes.append(proc)
                readers.append(reader)
        store.serve()
        return _collect(processes, readers, timeout, progress,
                        _forkserver_pid() if start_method == "forkserver" else None)
    finally:
        _stop_all(processes)
        for reader in readers:
            reader.close()
        store.close()
        board.remove(board_path)


# A rank's failure whose text says it is a consequence of another rank's: the cause is elsewhere.
CAUSED_BY_PEER = "caused by a peer"  # e.g. a NaN received in an all-reduce (parlab.engine.loop)
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "Timed out waiting", "Connection refused", CAUSED_BY_PEER)
CAUSE_GRACE_S = 0.5  # after a first failure: how long the other ranks may still report theirs
PEER_CAUSE_GRACE_S = 10.0  # ... when every failure so far names a peer that has yet to report


@contextmanager
def _without_parent_main():
    """Start children without re-running the parent's __main__ (a script or a notebook).

    Workers live in importable modules, so a child never needs the parent's main module; leaving
    it out avoids the classic multiprocessing trap of a script without `if __name__ ==
    "__main__"` launching itself again in every rank.
    """
    original = mp_spawn.get_preparation_data

    def preparation_data(name):
        data = original(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    mp_spawn.get_preparation_data = preparation_data
    try:
        yield
    finally:
        mp_spawn.get_preparation_data = original


FORKSERVER_LOST = 255  # multiprocessing's exit code of a rank whose forkserver cannot tell it
FORKSERVER_DEATH_S = 2.0  # how long that code waits to see the forkserver's death


def _forkserver_pid() -> int | None:
    """The pid of this process's forkserver (multiprocessing's, started by the first launch)."""
    from multiprocessing import forkserver

    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


def forkserver_death(pid: int | None) -> str | None:
    """How the forkserver `pid` (a child of this process) ended, or None while it runs. Looked at
    without reaping it (WNOWAIT): multiprocessing reaps it, and starts a new one, at the next
    launch."""
    if pid is None:
        return None
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already: gone all the same
        return "ended"
    if info is None:
        return None
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        return f"was killed by signal {signal.Signals(info.si_status).name}"
    return f"exited with code {info.si_status}"


def _ended_without_result(rank: int, code: int | None, forkserver: int | None) -> str:
    """What to say of rank `rank`, whose process ended (exit code `code`) without a word.

    A forkserver's rank reports 255 when multiprocessing cannot read its status because the
    forkserver is gone; the forkserver's pipes close a moment before its death can be seen, so
    that code waits up to `FORKSERVER_DEATH_S` for it."""
    death = forkserver_death(forkserver)
    give_up = time.monotonic() + FORKSERVER_DEATH_S
    while death is None and code == FORKSERVER_LOST and time.monotonic() < give_up:
        time.sleep(0.01)
        death = forkserver_death(forkserver)
    if death is not None:  # its ranks die with it (PR_SET_PDEATHSIG) and their codes are lost
        return (f"rank {rank} ended without reporting a result: the forkserver that started the "
                f"ranks (pid {forkserver}) {death}, and every rank died with it (the exit code "
                f"{code} is multiprocessing's for a rank whose forkserver is gone); the next "
                "launch starts a new forkserver")
    how = (f"was killed by signal {signal.Signals(-code).name}"
           if code is not None and code < 0 else f"exited with code {code}")
    return f"rank {rank} {how} without reporting a result"


def _collect(processes, readers, timeout, progress, forkserver: int | None = None) -> list[Any]:
    """Wait for every rank's result; on the first failure, name the rank that caused it.
    `forkserver`: the pid of the forkserver that started the ranks, if one did."""
    world_size = len(processes)
    status = [RankStatus(time.monotonic()) for _ in range(world_size)]
    deadline = time.monotonic() + timeout
    results: list[Any] = [None] * world_size
    finished = [False] * world_size
    failures: dict[int, tuple[str, str]] = {}  # rank -> (summary, remote traceback)
    grace_until = None
    waiting_for_cause = False
    waiting = {reader: rank for rank, reader in enumerate(readers)}
    waiting.update({proc.sentinel: rank for rank, proc in enumerate(processes)})
    while not all(finished):
        now = time.monotonic()
        if grace_until is not None and (now >= grace_until or not waiting):
            break
        if now >= deadline:
            if failures:
                break
            for reader, rank in list(waiting.items()):  # what is still in the pipes
                if reader is readers[rank]:
                    waiting.pop(reader)
                    _read_messages(reader, rank, results, finished, failures, progress, waiting,
                                   status)
            pending = [rank for rank in range(world_size) if not finished[rank]]
            stuck, report = stuck_report([r for r in pending if r not in failures], status)
            raise RankError(f"timeout after {timeout:g} s: ranks {pending} had not finished "
                            f"(finished: {[r for r in range(world_size) if finished[r]]})"
                            + report, rank=stuck)
        limit = min(deadline, grace_until or deadline) - now
        for obj in mpc.wait(list(waiting), timeout=min(limit, 1.0)):
            rank = waiting.pop(obj)
            if obj is readers[rank]:
                _read_messages(obj, rank, results, finished, failures, progress, waiting, status)
            elif not finished[rank] and rank not in failures:
                _read_messages(readers[rank], rank, results, finished, failures, progress, {},
                               status)
                if not finished[rank] and rank not in failures:
                    failures[rank] = (_ended_without_result(rank, processes[rank].exitcode,
                                                            forkserver), "")
        if failures and grace_until is None:
            grace_until = time.monotonic() + CAUSE_GRACE_S  # let the others report what they saw
        if (failures and grace_until is not None and not waiting_for_cause
                and all(CAUSED_BY_PEER in text for text, _ in failures.values())):
            # a rank received a peer's bad value: that peer is about to report where it was born
            waiting_for_cause = True
            grace_until = max(grace_until, time.monotonic() + PEER_CAUSE_GRACE_S)
        if waiting_for_cause and any(CAUSED_BY_PEER not in t for t, _ in failures.values()):
            grace_until = min(grace_until, time.monotonic() + CAUSE_GRACE_S)
    if failures:
        # The root cause is a rank whose failure is not "my peer went away".
        causes = [r for r, (text, _) in failures.items() if not any(p in text for p in _PEER_LOST)]
        silent = [r for r in range(world_size) if not finished[r] and r not in failures]
        if not causes and silent:  # every failure is a lost peer: the cause is a silent rank
            stuck, report = stuck_report(silent, status)
            raise RankError(f"ranks {sorted(failures)} failed waiting for a peer that never "
                            f"answered (first: {failures[min(failures)][0]})" + report,
                            rank=stuck)
        rank = min(causes) if causes else min(failures)
        text, remote_tb = failures[rank]
        others = sorted(set(failures) - {rank})
        consequences = all(any(p in failures[r][0] for p in _PEER_LOST) for r in others)
        also = (f"\n(then ranks {others} failed too"
                + (", having lost their peer or received its bad value)" if consequences else ")")
                if others else "")
        detail = f"\n\n--- traceback of rank {rank} ---\n{remote_tb}" if remote_tb else ""
        raise RankError(text + also + detail, rank=rank, remote_traceback=remote_tb)
    return results


def _read_messages(reader, rank, results, finished, failures, progress, waiting,
                   status=None) -> None:
    """Read what rank `rank` sent; re-arm the wait on its pipe unless it is done."""
    try:
        while reader.poll(0):
            message = reader.recv()
            if status is not None:
                status[rank].heard = time.monotonic()
            if message[0] == "heartbeat":
                status[rank].at, status[rank].op = message[1], message[2]
            elif message[0] == "progress":
                status[rank].step = (message[1], message[2])
                if progress is not None and rank == 0:
                    progress(message[1], message[2])
            elif message[0] == "ok":
                results[rank] = torch.load(io.BytesIO(message[1]), weights_only=False)
                finished[rank] = True
                return
            else:  # ("error", type name, text, traceback)
                _, type_name, text, remote_tb = message
                failures[rank] = (f"rank {rank} raised {type_name}: {text}", remote_tb)
                return
    except (EOFError, OSError):
        return
    waiting[reader] = rank


def _stop_all(processes) -> None:
    """Kill every rank that is still alive and reap them all: no orphans, no zombies."""
    for proc in processes:
        if proc.is_alive():
            proc.kill()
    for proc in processes:
        proc.join(timeout=5)
