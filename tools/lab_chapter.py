"""A chapter as a person uses it: open it in JupyterLab, Run All Cells, click its panel's world size.

    with jupyterlab(root) as lab, chromium() as context:     # tools/browser.py
        report = exercise_chapter(context.new_page(), lab, "notebooks/00_x.ipynb", shot)

`exercise_chapter` reports the cells' errors and prompts, the notebook Run All produced (its golden
cells are compared with `golden_mismatches`), and the panel before and after the click: its text,
digests of its figures, blank figures and figures left outside the panel (tests/test_browser.py
asserts on them).
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import sys
import time

from tools.browser import Lab

_NOTEBOOK_STATE_JS = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]
      .map(e => e.textContent.trim());
  // JupyterLab shows an exception as red stderr text holding the traceback: that is what we look for.
  const stderr = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]';
  const errors = [...panel.querySelectorAll(stderr)]
      .map(e => e.innerText.trim()).filter(t => t.includes('Traceback (most recent call last)'))
      .map(t => t.split('\\n').filter(l => l.trim()).slice(-1)[0]);
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  return {prompts, errors, status: indicator ? indicator.getAttribute('data-status') : null};
}"""


def _wait(predicate, timeout: float, what: str, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


def _menu(page, menu: str, item: str) -> None:
    """Click a main-menu entry the way a person does: open the menu, click the item."""
    import re

    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(menu)}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def _save(page, path: pathlib.Path, code_cells: int) -> dict:
    """File ▸ Save Notebook, then the saved notebook once every code cell on disk has run."""
    _menu(page, "File", "Save Notebook")

    def saved():
        try:
            nb = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):  # being written
            return None
        counts = [c.get("execution_count") for c in nb["cells"] if c["cell_type"] == "code"]
        return nb if len(counts) == code_cells and all(counts) else None

    return _wait(saved, 30, f"{path.name} to be saved with its outputs")


def output_text(cell: dict) -> str:
    """A cell's text outputs as nbval compares them: streams and text/plain, in order, each line
    stripped of trailing spaces (images, HTML and widget views are not compared)."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out.get("text", "")))
        elif "text/plain" in out.get("data", {}):
            parts.append("".join(out["data"]["text/plain"]) + "\n")
    return "\n".join(line.rstrip() for line in "".join(parts).strip().splitlines())


def golden_mismatches(stored: dict, executed: dict) -> list[str]:
    """Golden cells (keep_output and `# NBVAL_CHECK_OUTPUT`) whose executed text differs from the
    stored one: what `pytest --nbval-lax` checks, read from the notebook the browser ran."""
    problems = []
    for index, (want, got) in enumerate(zip(stored["cells"], executed["cells"])):
        source = "".join(want.get("source", ""))
        if want["cell_type"] != "code" or not source.lstrip().startswith("# NBVAL_CHECK_OUTPUT"):
            continue
        if output_text(want) != output_text(got):
            problems.append(f"cell {index}: stored {output_text(want)[:300]!r}, "
                            f"ran {output_text(got)[:300]!r}")
    return problems


def _panel_text(output) -> str:
    return output.evaluate("""e => e.innerText.trim() + '\\n' +
        [...e.querySelectorAll('img')].map(i => i.src.length + ':' + i.src.slice(-64)).join('\\n')""")


def image_digests(locator) -> list[str]:
    """A digest of every <img> under `locator`: what a redrawn figure changes."""
    import hashlib

    return [hashlib.sha256(src.encode()).hexdigest()[:16]
            for src in locator.locator("img").evaluate_all("es => es.map(e => e.src)")]


def blank_images(locator) -> int:
    """How many of the <img> under `locator` are a single flat colour (a plot that drew nothing)."""
    import base64
    import io

    from PIL import Image

    blank = 0
    for src in locator.locator("img").evaluate_all("es => es.map(e => e.src)"):
        if src.startswith("data:image/png;base64,"):
            image = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGBA")
            blank += all(low == high for low, high in image.getextrema())
    return blank


def _open_with_idle_kernel(page, lab: Lab, relpath: str, code_cells: int, timeout: float = 120.0,
                           tries: int = 2) -> None:
    """Open `relpath` and wait until every code cell is on the page and its kernel is idle.

    On a machine busy with other tests a page has been seen to never settle (CI: 120 s with no
    idle kernel, on the second chapter of a half). A person reloads the tab: so does this, once,
    after shutting down the kernel the first try started. The error names what was last seen.
    """
    seen: dict = {}

    def ready():
        state = page.evaluate(_NOTEBOOK_STATE_JS)
        try:
            sessions = lab.api("sessions")
        except OSError as error:  # the server is busy: not ready yet
            sessions, seen["api"] = [], repr(error)
        kernels = [s["kernel"]["execution_state"] for s in sessions if s["path"] == relpath]
        dialogs = page.evaluate("() => [...document.querySelectorAll('.jp-Dialog')]"
                                ".map(e => e.innerText.trim().slice(0, 200))")
        seen.update(cells_on_page=state and len(state["prompts"]), code_cells=code_cells,
                    indicator=state and state["status"], kernels=kernels, dialogs=dialogs)
        return (state and len(state["prompts"]) == code_cells and state["status"] == "idle"
                and kernels == ["idle"])

    for attempt in range(1, tries + 1):
        page.goto(lab.url(relpath))
        try:
            # Every code cell on the page and the kernel started (the indicator reads idle before
            # it connects).
            _wait(ready, timeout, "the notebook to open with an idle kernel")
            return
        except TimeoutError:
            print(f"{relpath}: try {attempt} of {tries} did not settle in {timeout:.0f} s; "
                  f"last seen {seen}", file=sys.stderr)
            if attempt == tries:
                raise TimeoutError(f"{relpath}: timed out {tries} times after {timeout:.0f} s waiting "
                                   f"for the notebook to open with an idle kernel; last seen {seen}; "
                                   f"JupyterLab's log ends: {lab.log_tail()!r}") from None
            with contextlib.suppress(OSError):
                lab.shutdown_kernels()


def exercise_chapter(page, lab: Lab, relpath: str, screenshot: pathlib.Path,
                     run_timeout: float = 900.0, rerun_timeout: float = 300.0) -> dict:
    """Open a notebook, Run All Cells, then move the first panel's world size to the smallest other
    value of 2 or more.

    Returns what happened: {"seconds", "errors": [...], "prompts", "panels", "before", "after",
    "clicked", "images" and "blank_plots" (all and flat images in the panel after the click),
    "figures_before" and "figures_after" (digests of the panel's images around the click),
    "figures_outside" (images in the panel's cell outside the panel, after the click),
    "screenshot"}.
    Raises TimeoutError when the notebook or the panel never settles.
    """
    started = time.monotonic()
    cells = json.loads((lab.root_dir / relpath).read_text())["cells"]
    code_cells = sum(c["cell_type"] == "code" for c in cells)
    _open_with_idle_kernel(page, lab, relpath, code_cells)
    _menu(page, "Run", "Run All Cells")
    # Run All marks every code cell [*] at once; done when none is pending and the kernel is idle
    # (after an error JupyterLab clears the queue, leaving the later cells unexecuted).
    _wait(lambda: any(p != "[ ]:" for p in page.evaluate(_NOTEBOOK_STATE_JS)["prompts"]), 30,
          "Run All to start")
    state = _wait(lambda: (s := page.evaluate(_NOTEBOOK_STATE_JS))["status"] == "idle"
                  and "[*]:" not in s["prompts"] and s, run_timeout, "all cells to run")
    report = {"errors": list(state["errors"]), "prompts": state["prompts"], "panels": 0,
              "before": None, "after": None, "clicked": None, "images": 0, "blank_plots": 0,
              "figures_before": [], "figures_after": [], "figures_outside": 0,
              "screenshot": str(screenshot), "executed": None}
    if not report["errors"]:  # save what Run All produced: its golden cells are checked from it
        report["executed"] = _save(page, lab.root_dir / relpath, code_cells)
    notebook = ".jp-NotebookPanel:not(.lm-mod-hidden)"
    panels = page.locator(f"{notebook} .parlab-panel:has(.parlab-control-world_size)")
    report["panels"] = panels.count()
    if report["panels"]:
        panel = panels.first
        panel.scroll_into_view_if_needed()
        buttons = panel.locator(".parlab-control-world_size button")
        labels = [b.strip() for b in buttons.all_inner_texts()]
        active = panel.locator(".parlab-control-world_size button.mod-active").inner_text().strip()
        output = panel.locator(".parlab-output")
        report["before"] = _panel_text(output)
        report["figures_before"] = image_digests(output)
        # the smallest other world size of 2 or more: a real re-run with other values that shows
        # several ranks at work (world size 1 sends nothing), and the cheapest such one (four ranks
        # on two cores can take minutes in a chapter that is light at two)
        others = sorted((label for label in labels if label != active
                         and not (label.isdigit() and int(label) < 2)),
                        key=lambda label: (not label.isdigit(), int(label) if label.isdigit() else 0))
        target = others[0] if others else None
        if target is not None:
            report["clicked"] = target
            buttons.nth(labels.index(target)).click()
            header = f"world_size={target}"

            def settled():
                text = _panel_text(output)
                state = page.evaluate(_NOTEBOOK_STATE_JS)
                if not (text.startswith(header) and state["status"] == "idle"):
                    return None
                time.sleep(0.5)  # the output may still be arriving: take it once it holds still
                return text if _panel_text(output) == text else None

            report["after"] = _wait(settled, rerun_timeout, f"the panel to show {header}")
            report["images"] = output.locator("img").count()
            report["figures_after"] = image_digests(output)
            report["blank_plots"] = blank_images(output)
            # a figure drawn outside the panel's output stays behind, stale, after the click
            report["figures_outside"] = panel.evaluate(
                """e => [...e.closest('.jp-Cell').querySelectorAll('.jp-OutputArea img')]
                       .filter(i => !i.closest('.parlab-panel')).length""")
            report["errors"] += page.evaluate(_NOTEBOOK_STATE_JS)["errors"][len(state["errors"]):]
        panel.evaluate("e => e.closest('.jp-Cell').scrollIntoView({block: 'start'})")  # its code, then it
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(screenshot))
    report["seconds"] = time.monotonic() - started
    return report
