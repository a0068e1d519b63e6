"""Timelines: what each rank was doing, when — compute, communication, waiting.

Every rank keeps a `Timeline` of events (kind, name, t0, t1). `parlab.core.comm` adds a "comm" event
for each operation (from issue to completion) and a "wait" event for the time the rank was
blocked on it (the whole op when it is synchronous, only `wait()` when async): the *exposed*
communication that overlap tries to hide. Training code wraps its phases in `span("forward")`.
On a paced clock times are each rank's virtual time (`parlab.core.clock`), on the wall clock
`time.perf_counter()`, which on Linux is CLOCK_MONOTONIC, shared by all processes of a machine, so
ranks line up without clock sync. Export to Chrome / Perfetto JSON
(chrome://tracing, ui.perfetto.dev) with `to_chrome_trace`.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

KINDS = ("compute", "comm", "wait", "idle")


@dataclass
class Event:
    rank: int
    kind: str  # one of KINDS
    name: str
    t0: float
    t1: float
    args: dict = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return self.t1 - self.t0


class Timeline:
    """The events of one rank."""

    def __init__(self, rank: int = 0, pacer=None):
        self.rank = rank
        self.events: list[Event] = []
        self.enabled = True
        self.pacer = pacer  # parlab.core.pacer.Pacer of a paced run: compute spans keep its time

    @contextmanager
    def span(self, name: str, kind: str = "compute", **args):
        pacer = self.pacer if kind == "compute" else None
        t0 = self.now()
        if pacer is not None:
            pacer.enter()
        try:
            yield
        finally:
            end = pacer.exit() if pacer is not None else None  # the paced end, when it settled
            self.add(kind, name, t0, self.now() if end is None else end, **args)

    def now(self) -> float:
        """This rank's time: its virtual time on a paced run (`parlab.core.pacer.Pacer`),
        `time.perf_counter()` otherwise."""
        return self.pacer.now() if self.pacer is not None else time.perf_counter()

    def advance(self, seconds: float) -> None:
        """Paced runs: the rank was busy `seconds` its caller priced (an emulated wire, a reducer
        the meter cannot see); nothing on the wall clock, where that time was really spent."""
        if self.pacer is not None:
            self.pacer.advance(seconds)

    def wait_until(self, t: float) -> None:
        """Paced runs: the rank waited for something free at virtual time `t`."""
        if self.pacer is not None:
            self.pacer.wait_until(t)

    def settle(self) -> None:
        """A communication is about to leave: price the compute before it (paced runs)."""
        if self.pacer is not None:
            self.pacer.settle()

    def resume(self, at: float | None = None) -> None:
        """A communication was issued or returned (completing at virtual time `at`): the rank's
        time is at least `at`, and a compute span around it counts again (paced runs)."""
        if self.pacer is not None:
            self.pacer.resume(at)

    def add(self, kind: str, name: str, t0: float, t1: float, **args) -> None:
        if self.enabled:
            self.events.append(Event(self.rank, kind, name, t0, t1, args))

    def records(self) -> list[dict]:
        return [asdict(e) for e in self.events]


def normalize(events: list[dict]) -> list[dict]:
    """Shift all ranks' events so the earliest starts at 0 (seconds)."""
    if not events:
        return []
    origin = min(e["t0"] for e in events)
    return [{**e, "t0": e["t0"] - origin, "t1": e["t1"] - origin} for e in events]


_TID = {"compute": 0, "comm": 1, "wait": 2, "idle": 3}


def to_chrome_trace(events: list[dict], path: str | None = None) -> dict:
    """Chrome trace-event JSON: one process per rank, one thread per kind. Writes `path` if given."""
    trace = {"traceEvents": [], "displayTimeUnit": "ms"}
    for rank in sorted({e["rank"] for e in events}):
        trace["traceEvents"].append({"ph": "M", "name": "process_name", "pid": rank,
                                     "args": {"name": f"rank {rank}"}})
        for kind, tid in _TID.items():
            trace["traceEvents"].append({"ph": "M", "name": "thread_name", "pid": rank,
                                         "tid": tid, "args": {"name": kind}})
    for e in normalize(events):
        trace["traceEvents"].append({
            "ph": "X", "name": e["name"], "cat": e["kind"], "pid": e["rank"],
            "tid": _TID.get(e["kind"], 4), "ts": e["t0"] * 1e6, "dur": (e["t1"] - e["t0"]) * 1e6,
            "args": {k: v for k, v in e.get("args", {}).items() if _jsonable(v)},
        })
    if path is not None:
        with open(path, "w") as f:
            json.dump(trace, f)
    return trace


def _jsonable(value) -> bool:
    return isinstance(value, (str, int, float, bool, type(None), list, tuple))


def check_trace_path(path, what: str = "path") -> pathlib.Path:
    """A trace file that cannot be written fails now (a ValueError naming it), not after a run."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{what}={path!r} must be a file path such as 'trace.json'")
    target = pathlib.Path(path)
    folder = target.parent if str(target.parent) else pathlib.Path(".")
    if target.is_dir():
        raise ValueError(f"{what}={str(path)!r} is a directory; give a file name such as trace.json")
    if not folder.is_dir():
        raise ValueError(f"{what}={str(path)!r}: directory {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ValueError(f"{what}={str(path)!r} is not writable")
    return target


def save_trace(events: list[dict], path) -> pathlib.Path:
    """Write `events` (a run's timeline) as Chrome trace-event JSON to `path`: one complete event
    ("ph": "X") per span, one process per rank, one thread per kind; open it in ui.perfetto.dev
    or chrome://tracing. The path written."""
    target = check_trace_path(path)
    to_chrome_trace(events, str(target))
    return target
