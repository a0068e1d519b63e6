"""Inside a launched rank: what the launcher tells it, and what it tells the launcher.

The child side of `parlab.core.launch`: `child_main` joins the parent's loopback store, runs the
function and sends home one final message (its result, or its exception with the traceback); a
heartbeat thread reports where the main thread is (`where`) so a timeout can name the stuck rank
(`parlab.core.stuck`). `current()` is this process's `LaunchInfo`; `report_progress` tells the
parent how far it is; under `torchrun` this process is the rank (`run_in_torchrun`). Teardown
ends with `os._exit` and never runs interpreter finalisation, where a gloo thread can abort the
process. Why each teardown step: docs/core.md, `parlab.core.rank_process`.
"""

from __future__ import annotations

import gc
import importlib
import io
import os
import sys
import threading
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from parlab.core import rendezvous
from parlab.core.allocator import keep_freed_memory


@dataclass(frozen=True)
class LaunchInfo:
    """What the launcher tells the code running inside one rank."""

    rank: int
    world_size: int
    link: Any = None  # a parlab.core.link.Link, or None for the bare loopback
    timeout_s: float = 60.0
    torchrun: bool = False
    args: tuple = ()  # the launch's extra arguments (parlab.run passes its RunConfig)
    board: str | None = None  # the launch's paced board file (parlab.core.board), None under torchrun


_CURRENT: LaunchInfo | None = None
_PROGRESS_CONN = None
_SEND_LOCK = threading.Lock()  # the main thread and the heartbeat thread share the pipe
HEARTBEAT_S = 0.5  # a rank's heartbeat period
# frames of these files mean "waiting in communication"
_COMM_FILES = ("parlab/core/comm.py", "parlab/core/collectives.py", "parlab/core/handle.py",
               "parlab/core/sharded.py", "torch/distributed/")


def current() -> LaunchInfo | None:
    """The LaunchInfo of this process when it is a rank started by `launch`, else None."""
    return _CURRENT


def _send(message) -> bool:
    conn = _PROGRESS_CONN
    if conn is None:
        return False
    try:
        with _SEND_LOCK:
            conn.send(message)
        return True
    except (OSError, ValueError):
        return False


def report_progress(done: int, total: int) -> None:
    """Tell the parent how far this rank is (rank 0's is shown as a progress bar by the CLI; every
    rank's names the stuck one if the launch times out). Cheap."""
    _send(("progress", done, total))


def _short(filename: str) -> str:
    parts = filename.replace(os.sep, "/").split("/")
    return "/".join(parts[-2:])


def where(frames: list[tuple[str, int, str]]) -> tuple[str, str | None]:
    """(where the code is, the communication op it waits in or None) of a thread's stack,
    `frames` = [(filename, line, function), ...] outermost first."""
    if not frames:
        return "unknown", None
    for i, (filename, _, _) in enumerate(frames):
        if any(marker in filename.replace(os.sep, "/") for marker in _COMM_FILES):
            names = [name for _, _, name in frames[i:] if "wrapper" not in name]
            caller = frames[i - 1] if i else frames[i]
            return f"{_short(caller[0])}:{caller[1]} in {caller[2]}", \
                (names[0] if names else frames[i][2])
    filename, line, name = frames[-1]
    return f"{_short(filename)}:{line} in {name}", None


def thread_stack(ident: int) -> list[tuple[str, int, str]] | None:
    """Thread `ident`'s stack, outermost first, as (filename, line, function); None while a paced
    compute span is counting operators on this process (`parlab.core.pacer.counting`).

    Read with `sys._current_frames()`, whose frame objects keep a finished frame's locals alive as
    long as the reader holds them: a tensor then lives longer by the reader's timing, and a paced
    rank counted an operator more (Adam's lazy state made a `detach` in a shapes-only run) in some
    runs. So the frames are read in one tight loop that calls nothing that could let the main
    thread run (no file, no lock) and dropped at once, and not at all while a span counts.
    (`faulthandler.dump_traceback` of all threads, which makes no frame objects, crashed ranks
    with SIGSEGV — 14 in 100 fp16 runs under a fast heartbeat — and is not used.)"""
    from parlab.core.pacer import counting

    if counting():
        return None
    frame = sys._current_frames().get(ident)
    frames = []
    while frame is not None:
        code = frame.f_code
        frames.append((code.co_filename, frame.f_lineno, code.co_name))
        frame = frame.f_back
    del frame
    return frames[::-1]


def _heartbeat(main_ident: int, stop: threading.Event) -> None:
    at, op = "unknown", None
    while not stop.wait(HEARTBEAT_S):
        frames = thread_stack(main_ident)
        if frames is not None:  # inside a paced compute span: where it was last seen
            at, op = where(frames)
        if not _send(("heartbeat", at, op)):
            return


def resolve(reference: str) -> Callable:
    module_name, qualname = reference.split(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def child_main(reference, rank, world_size, args, port, conn, timeout, link, launcher_pid,
                forkserver_child, board=None) -> None:
    global _CURRENT, _PROGRESS_CONN
    rendezvous.die_with_launcher(launcher_pid, forkserver_child)
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    keep_freed_memory()  # freed tensors stay for the next, as a GPU's caching allocator keeps them
    _CURRENT = LaunchInfo(rank, world_size, link, timeout, args=args, board=board)
    _PROGRESS_CONN = conn
    stop = threading.Event()
    heartbeat = threading.Thread(target=_heartbeat, args=(threading.get_ident(), stop),
                                 name="parlab-heartbeat", daemon=True)
    heartbeat.start()
    try:
        fn = resolve(reference)
        store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False,
                              timeout=timedelta(seconds=timeout))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout))
        result = fn(rank, world_size, *args)
        buffer = io.BytesIO()
        torch.save(result, buffer)
        stop.set()
        with _SEND_LOCK:
            conn.send(("ok", buffer.getvalue()))  # finished: a peer's hang is not this rank's
        rendezvous.leave_together(store, rank, world_size)  # every pair up, none in use
        _tear_down(heartbeat)
    except BaseException as err:  # noqa: BLE001 - everything goes home to the parent
        # first the error, then the end: no destroy_process_group, which would wait for work
        # still queued (an all-reduce the peers never join: the error would never be sent) or
        # tear down a process group another thread still uses; the kernel closes the sockets
        stop.set()
        try:
            with _SEND_LOCK:
                conn.send(("error", type(err).__name__, str(err), traceback.format_exc()))
        except Exception:  # noqa: BLE001
            pass
        _exit(1)
    finally:
        with _SEND_LOCK:
            _PROGRESS_CONN = None
            conn.close()
    _exit(0)


def _tear_down(heartbeat: threading.Thread) -> None:
    """After the rank's function returned and every rank has left it (`leave_together`): free
    what the function left behind while the interpreter is whole (gradient hooks, reducers and
    handles form reference cycles that hold gloo work objects and their tensors: freed later,
    from interpreter finalisation, a gloo thread would take the GIL of a dying interpreter),
    destroy the process group (gloo's worker threads joined; every collective issued by all
    ranks completes first) and join the heartbeat thread."""
    gc.collect()
    dist.destroy_process_group()
    heartbeat.join(timeout=2 * HEARTBEAT_S)


def _exit(code: int) -> None:
    """End this rank now, whatever start method made it: no interpreter finalisation, no C++
    static destructors with a thread of torch's or gloo's still joinable ("terminate called
    without an active exception": SIGABRT), no waiting on a thread left blocked in a receive.
    The parent has the rank's result or error already."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def run_in_torchrun(reference, world_size, args, timeout, link) -> list[Any]:
    """Inside torchrun: this process is one rank; run fn here and gather every rank's result."""

    def set_current(rank):
        global _CURRENT
        _CURRENT = None if rank is None else LaunchInfo(rank, world_size, link, timeout,
                                                        torchrun=True, args=args)

    return rendezvous.torchrun_launch(resolve(reference), world_size, args, timeout, set_current)


@contextmanager
def one_thread():
    """One intra-op thread, as every rank runs: the tiny model's kernels gain nothing from more, and
    on a machine whose cores are shared, two threads measured ~25× slower here."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
