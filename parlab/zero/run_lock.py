"""One run per save_dir: an fcntl lock on `save_dir/.parlab.lock`, so two runs never write one
checkpoint directory.

A run that uses a save_dir holds its lock from before its ranks start until they end: `parlab.run`
holds `held(save_dir)` in the launching process (the scheme's `hold=`), so of two runs started at
the same instant into one save_dir the second is refused before spawn, naming save_dir and the
holder's pid (both pass `check_unlocked`, the early probe in the configuration's checks; only one
can take the lock). Under torchrun, where every worker is a launching process, rank 0 takes
`lock(save_dir)` instead. Either is released by the kernel when its process ends however it ends.
Without it, two runs would prune and overwrite each other's checkpoints (`parlab.zero.checkpoint`),
the recovery path of Wang et al., "Gemini: Fast Failure Recovery in Distributed Training with
In-Memory Checkpoints" (SOSP 2023). The lock is ours, not a paper's.
"""

from __future__ import annotations

import fcntl
import os
import pathlib
from collections.abc import Iterator
from contextlib import contextmanager

LOCK_NAME = ".parlab.lock"
_HELD: dict[str, int] = {}  # resolved save_dir -> descriptor of the lock this process holds


class DirectoryInUse(ValueError):
    """Another run holds the save_dir's lock."""


def _holder(file: pathlib.Path) -> str:
    try:
        text = file.read_text().strip()
    except OSError:
        text = ""
    return text or "unknown pid"


def lock(directory) -> None:
    """Take `directory`'s run lock for this process (kept until `unlock` or the process ends);
    DirectoryInUse naming the holder when another process or run holds it. Re-entrant per
    process (a torchrun worker runs several runs)."""
    key = str(pathlib.Path(directory).resolve())
    if key not in _HELD:
        _HELD[key] = _acquire(directory)


@contextmanager
def held(directory) -> Iterator[None]:
    """`directory`'s run lock held for the `with` block (`parlab.run` around its launch): not
    re-entrant, so a second run of this very process (another thread) is refused too."""
    fd = _acquire(directory)
    try:
        yield
    finally:
        _release(directory, fd)


def _acquire(directory) -> int:
    """A new descriptor of `directory`'s lock file holding its flock, this pid written in it."""
    root = pathlib.Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    file = root / LOCK_NAME
    while True:
        fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            check_unlocked(directory)  # raises the message naming the holder
            continue  # released in between: try again
        try:  # the holder before us may have unlinked the file after we opened it: retry
            same = os.stat(file).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}\n".encode())
    return fd


def unlock(directory) -> None:
    """Release this process's lock of `directory` (and remove the lock file)."""
    key = str(pathlib.Path(directory).resolve())
    fd = _HELD.pop(key, None)
    if fd is not None:
        _release(directory, fd)


def _release(directory, fd: int) -> None:
    try:
        (pathlib.Path(directory) / LOCK_NAME).unlink(missing_ok=True)  # while still held
    finally:
        os.close(fd)


def check_unlocked(directory) -> None:
    """Before spawn: DirectoryInUse if a run (of any process, this one included) holds
    `directory`'s lock now. A probe: takes the lock on a fresh descriptor and lets it go."""
    file = pathlib.Path(directory) / LOCK_NAME
    try:
        fd = os.open(file, os.O_RDONLY)
    except OSError:
        return  # no lock file: nobody holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise DirectoryInUse(f"save_dir={str(directory)!r} is in use by another run "
                             f"({_holder(file)}): two runs writing one save_dir would prune and "
                             "overwrite each other's checkpoints; wait for it to end or choose "
                             "another save_dir") from None
    finally:
        os.close(fd)
