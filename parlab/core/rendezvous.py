"""Rendezvous and liveness: a store only this machine can reach, ranks that die with their launcher,
and a fresh namespace for every run under torchrun.

* `loopback_store`: the parent's TCPStore on a socket bound to 127.0.0.1, port 0 (TCPStore alone
  listens on every interface, unauthenticated; a shared MASTER_PORT lets a rank join the wrong job).
* `die_with_launcher`: each rank closes its copy of the forkserver's liveness pipe and watches the
  launcher through a pidfd, so no rank outlives it, whatever signal ended it.
* `torchrun_launch`: each run gets its own `PrefixStore("parlab/attempt<a>/run<k>/", store)`.
Why each is needed (measured failures): docs/core.md, `parlab.core.rendezvous`.

Trust boundary (docs/security.md): the store has no authentication. Loopback keeps other machines
out, not other local processes: while a run is in flight any local process (any user of this
machine) can connect to its port, read the ranks' addresses and set or delete keys (the run then
fails or hangs until its timeout), or connect to a rank's gloo port on the loopback. parlab trusts
every local user; on a shared machine run it in a container, VM or network namespace of your own.
Under torchrun the store is torchrun's: its TCPStore listens on every interface (`::`, measured
with torch 2.13 even when created with host "127.0.0.1"); --master-addr / --rdzv-endpoint only
say where workers connect, so keep its port from other machines (firewall, private network).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import threading
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist


# ----------------------------------------------------------------------------- the parent's store
class LoopbackStore:
    """The rendezvous TCPStore of one launch, listening on 127.0.0.1 only (`.port`, `.close()`).

    With `serve=False` only the socket is bound and listening (its port known, clients queue in
    its backlog); `serve()` then starts the store's server thread. The launcher starts its ranks
    in between, so none is forked while that thread runs: a child forked while a thread holds a
    lock inherits the lock held forever. Seen once before this order (CI proof, start method
    fork): the last rank hung in `TCPStore(...)` for the whole timeout while its peers, forked
    earlier, waited in `init_process_group`."""

    def __init__(self, world_size: int, timeout: float, serve: bool = True):
        self.world_size, self.timeout, self.store = world_size, timeout, None
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.socket.bind(("127.0.0.1", 0))
            self.socket.listen(max(128, world_size))
            self.port = self.socket.getsockname()[1]
        except BaseException:
            self.socket.close()
            raise
        if serve:
            self.serve()

    def serve(self) -> None:
        """Start the store's server on the bound socket (which it then owns and closes)."""
        try:
            self.store = dist.TCPStore("127.0.0.1", self.port, self.world_size, is_master=True,
                                       wait_for_workers=False,
                                       timeout=timedelta(seconds=self.timeout),
                                       master_listen_fd=self.socket.fileno())
        except BaseException:
            self.socket.close()
            raise
        self.socket.detach()  # the store owns the descriptor now and closes it with itself

    def close(self) -> None:
        if self.store is None:
            self.socket.close()  # never served: the socket is still ours
        self.store = None


# ----------------------------------------------------------------------------- in each rank
def _set_pdeathsig() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent (thread)
    except OSError:
        pass


def _drop_forkserver_liveness() -> None:
    """Close this rank's copy of the launcher's end of the forkserver liveness pipe."""
    try:
        from multiprocessing import forkserver
    except ImportError:
        return
    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int) and server._forkserver_pid is None:  # a copy, not our own server's
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None


def _watch(pid: int, pidfd: int | None) -> None:
    if pidfd is not None:
        select.select([pidfd], [], [])  # readable once the process has exited
    else:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass
            time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)


def die_with_launcher(launcher_pid: int, forkserver_child: bool) -> None:
    """Make this rank die within a fraction of a second of `launcher_pid`, however it ends."""
    _set_pdeathsig()
    if forkserver_child:
        _drop_forkserver_liveness()
    try:
        pidfd = os.pidfd_open(launcher_pid)
    except ProcessLookupError:
        os._exit(1)  # the launcher is already gone
    except (OSError, AttributeError):
        pidfd = None
        try:
            os.kill(launcher_pid, 0)
        except ProcessLookupError:
            os._exit(1)
    threading.Thread(target=_watch, args=(launcher_pid, pidfd), name="parlab-launcher-watch",
                     daemon=True).start()


# ----------------------------------------------------------------------------- torchrun
_ENV_STORE = None
_RUNS = 0


def under_torchrun() -> bool:
    return all(key in os.environ for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def _run_store(timeout: float):
    """A fresh namespace of the env:// store (created once per process) for the next run."""
    global _ENV_STORE, _RUNS
    if _ENV_STORE is None:
        _ENV_STORE, _, _ = next(dist.rendezvous("env://", timeout=timedelta(seconds=timeout)))
    _RUNS += 1
    # torchrun keeps its store across elastic restarts: a restarted worker counts its runs from 1
    # again, so the attempt is part of the namespace, or it would read the dead attempt's keys
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"parlab/attempt{attempt}/run{_RUNS}/", _ENV_STORE)


def torchrun_launch(fn, world_size: int, args: tuple, timeout: float, set_current) -> list[Any]:
    """Inside torchrun: this process is one rank; run fn here and gather every rank's result.

    nccl when CUDA is available, gloo otherwise; a process group the caller initialised already
    is used as it is."""
    rank = int(os.environ["RANK"])
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    created = not dist.is_initialized()
    store = None
    if created:
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        store = _run_store(timeout)
        dist.init_process_group(backend, store=store, rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=timeout))
    set_current(rank)
    try:
        result = fn(rank, world_size, *args)
        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, result)
        if store is not None:
            leave_together(store, rank, world_size)
        return gathered
    finally:
        set_current(None)
        if created:
            dist.destroy_process_group()


def leave_together(store, rank: int, world_size: int) -> None:
    """Wait, on the store, until every rank has finished its last collective. A rank that tears
    its gloo pairs down while a peer still reads from them can abort that peer (a rare SIGABRT at
    the end of an elastic attempt), or while a peer is still connecting them (gloo's
    connectFullMesh: "Connection closed by peer" when a rank's function sends nothing and it
    leaves at once); the store is a separate connection, so after this wait every pair is up and
    no gloo message is in flight when the process group is destroyed."""
    store.set(f"left/{rank}", "1")
    store.wait([f"left/{peer}" for peer in range(world_size)])
