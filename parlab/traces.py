"""The trace of a run a chapter just drew, as a file to open in Perfetto (issue 50, item 3).

`offer(runs, name)` writes each run's timeline as Chrome trace-event JSON (Google's "Trace Event
Format": one complete "X" event per span, one process per rank, one thread per kind;
`parlab.core.trace.save_trace`) and shows links to the files with how to open them: drop a file
on https://ui.perfetto.dev (or chrome://tracing → Load). Perfetto opens local files only by drag
and drop or its file picker; a link that would load one straight from this page is not offered.

Files go into PARLAB_TRACE_DIR, default `traces/` beside the notebook; links are relative to
PARLAB_TRACE_HREF (default: that folder as given). `make site` points the folder at its build
and copies the files next to the pages (tools/site.py).
"""

from __future__ import annotations

import html
import json
import os
import pathlib
import re

FOLDER = "traces"


class TraceFiles:
    """The written traces: {label: path}, with links as HTML and as plain text."""

    def __init__(self, paths: dict, hrefs: dict, counts: dict):
        self.paths, self.hrefs, self.counts = paths, hrefs, counts

    def _lines(self):
        return [(label, self.hrefs[label], self.counts[label]) for label in self.paths]

    def __repr__(self) -> str:
        rows = [f"  {label}: {href} ({spans:,} spans)" for label, href, spans in self._lines()]
        return ("Perfetto traces of these runs (drop a file on https://ui.perfetto.dev, "
                "or chrome://tracing → Load):\n" + "\n".join(rows))

    def _repr_html_(self) -> str:
        items = "".join(f'<li>{html.escape(label)}: <a href="{html.escape(href)}" download>'
                        f"{html.escape(href)}</a> ({spans:,} spans)</li>"
                        for label, href, spans in self._lines())
        return ('<div class="parlab-traces">Perfetto traces of these runs: download one and drop '
                'it on <a href="https://ui.perfetto.dev" target="_blank">ui.perfetto.dev</a> '
                f"(or chrome://tracing → Load).<ul>{items}</ul></div>")


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("_") or "run"


def offer(runs, name: str, folder=None) -> TraceFiles:
    """Write the trace of `runs` (a RunResult, or {label: RunResult}) as `<folder>/<name>[_<label>].json`
    and return their links; `folder` defaults to PARLAB_TRACE_DIR or `traces/`."""
    if not isinstance(name, str) or not name or _safe(name) != name:
        raise ValueError(f"name={name!r} must be a file-name stem of letters, digits, '.', '_', '-'")
    single = not isinstance(runs, dict)
    runs = {name: runs} if single else runs
    if not runs:
        raise ValueError("runs={} holds no run to trace")
    for label, run in runs.items():
        if not hasattr(run, "save_trace"):
            raise ValueError(f"runs[{label!r}] is a {type(run).__name__}, not a parlab run result")
    target = pathlib.Path(folder or os.environ.get("PARLAB_TRACE_DIR") or FOLDER)
    target.mkdir(parents=True, exist_ok=True)
    prefix = os.environ.get("PARLAB_TRACE_HREF") if folder is None else None
    prefix = prefix if prefix is not None else target.as_posix()
    paths, hrefs, counts = {}, {}, {}
    for label, run in runs.items():
        stem = name if single else f"{name}_{_safe(label)}"
        paths[label] = run.save_trace(target / f"{stem}.json")
        hrefs[label] = f"{prefix.rstrip('/')}/{stem}.json" if prefix else f"{stem}.json"
        with open(paths[label]) as f:
            counts[label] = sum(e["ph"] == "X" for e in json.load(f)["traceEvents"])
    return TraceFiles(paths, hrefs, counts)
