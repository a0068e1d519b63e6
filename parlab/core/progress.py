"""Progress on long work: a bar over the runs of a sweep, a benchmark or a plan search (issue 50).

`progress(iterable, desc=...)` wraps a loop of launches in a tqdm bar (da Costa-Luis, tqdm, JOSS
2019) and yields the same items. Where the bar goes:

* a notebook cell run from a front end (JupyterLab, Notebook, VS Code): a `tqdm.auto` widget.
  Batch executors (papermill, nbval, nbclient, `make site`) run no front end and see no bar, so a
  golden cell's stored output never gains one. The sign of a front end is the `cellId` it sends
  with each execute request (batch clients send none): a heuristic, named here;
* a terminal: a plain bar on stderr, never stdout (printed tables stay as they were);
* CI logs (CI=true) or a stderr that is no terminal: nothing.

PARLAB_PROGRESS=1 forces the bar (stderr; a widget in a kernel), PARLAB_PROGRESS=0 silences it.
"""

from __future__ import annotations

import os
import sys

FALSE = ("", "0", "false", "no", "off")


def _kernel():
    """The running IPython kernel, or None outside one."""
    if "ipykernel" not in sys.modules:
        return None
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None)


def _front_end(kernel) -> bool:
    """Whether the cell now running was sent by an interactive front end (it names its cellId)."""
    try:
        parent = kernel.get_parent("shell")
    except (AttributeError, TypeError):
        parent = getattr(kernel, "_parent_header", None) or {}
    return bool((parent or {}).get("metadata", {}).get("cellId"))


def mode() -> str | None:
    """"notebook" (a tqdm.auto widget), "terminal" (a plain bar on stderr) or None (silent)."""
    forced = os.environ.get("PARLAB_PROGRESS")
    if forced is not None and forced.strip().lower() in FALSE:
        return None
    kernel = _kernel()
    if forced is not None:  # forced on
        return "notebook" if kernel is not None else "terminal"
    if os.environ.get("CI", "").strip().lower() not in FALSE:
        return None
    if kernel is not None:
        return "notebook" if _front_end(kernel) else None
    isatty = getattr(sys.stderr, "isatty", None)
    return "terminal" if isatty is not None and isatty() else None


def progress(iterable, desc: str | None = None, total: int | None = None, unit: str = "run"):
    """`iterable`, with a progress bar where one is wanted (see the module docstring)."""
    where = mode()
    if where is None:
        return iterable
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    if where == "notebook":
        from tqdm.auto import tqdm
        return tqdm(iterable, desc=desc, total=total, unit=unit, leave=False)
    from tqdm import tqdm
    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False,
                dynamic_ncols=True)
