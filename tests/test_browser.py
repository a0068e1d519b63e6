"""Every chapter, opened in JupyterLab in headless Chromium, runs as a person would run it.

One JupyterLab (127.0.0.1, free port, random token) serves copies of notebooks/ (so nothing the
browser does can write back into the repository). For each chapter the test opens it, clicks
Run ▸ Run All Cells, and checks: every code cell ran, no cell shows a traceback, the world-size
panel (`parlab.widgets.experiment_panel`) renders and shows its current values, and clicking
another world size re-runs the experiment: the panel's first line becomes the new value and what
it shows below changes, its figure included (a panel that drew one must draw another); the
notebook Run All produced is saved, its golden cells (`# NBVAL_CHECK_OUTPUT`) must show the stored
outputs — nbval's check, on the same execution — and no exercise's accepted answer may stand in
its markdown or outputs (`tools.leaks`). A
screenshot per chapter goes to build/screenshots/. A last test feeds the same harness a notebook
with a failing cell, to prove it notices, and the golden check is shown to fail on a changed
output.
"""

import hashlib
import json
import os
import pathlib
import shutil

import pytest

from tools.browser import chromium, jupyterlab
from tools.claims import unbacked_claims
from tools.lab_chapter import exercise_chapter, golden_mismatches
from tools.leaks import leaked_answers

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _shard(spec: str) -> tuple[int, int]:
    """PARLAB_BROWSER_SHARD="i/n": this process drives chapters i, i+n, i+2n, ... (`make test` runs
    two such processes beside the other tests: the chapters wait on their kernels and paced
    sleeps far more than they compute, so two JupyterLabs halve the stream's time)."""
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"PARLAB_BROWSER_SHARD={spec!r} must be 'i/n' with 0 <= i < n") from None
    if not 0 <= index < count:
        raise ValueError(f"PARLAB_BROWSER_SHARD={spec!r} must be 'i/n' with 0 <= i < n")
    return index, count


SHARD, SHARDS = _shard(os.environ.get("PARLAB_BROWSER_SHARD", "0/1"))
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))[SHARD::SHARDS]
WORK = ROOT / "build" / ("browser" if SHARDS == 1 else f"browser-{SHARD}")
FIRST_SHARD = pytest.mark.skipif(SHARD != 0, reason="the harness checks run in shard 0")
SCREENSHOTS = ROOT / "build" / "screenshots"

pytestmark = pytest.mark.browser


def _digest(paths):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


@pytest.fixture(scope="module")
def lab_and_browser():
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "notebooks").mkdir(parents=True)
    for path in CHAPTERS:
        shutil.copy(path, WORK / "notebooks" / path.name)
    if (ROOT / "data").exists():  # a chapter reading "../data" finds it as it would in notebooks/
        os.symlink(ROOT / "data", WORK / "data")
    before = _digest(CHAPTERS)
    with jupyterlab(WORK, log=WORK / "jupyterlab.log") as lab, chromium() as context:
        yield lab, context
    assert _digest(CHAPTERS) == before, "the browser session changed a notebook in notebooks/"


def _panel_errors(text):
    return [line for line in (text or "").splitlines() if line.startswith("error: ")]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_runs_in_jupyterlab(lab_and_browser, path):
    lab, context = lab_and_browser
    page = context.new_page()  # a tab of its own per chapter, closed with its kernel afterwards
    try:
        report = exercise_chapter(page, lab, f"notebooks/{path.name}", SCREENSHOTS / f"{path.stem}.png")
    finally:
        page.close()
        lab.shutdown_kernels()
    print(f"{path.stem}: {report['seconds']:.0f} s in the browser, clicked world_size={report['clicked']}")

    assert not report["errors"], f"{path.name}: cells failed in JupyterLab: {report['errors']}"
    unexecuted = [i for i, p in enumerate(report["prompts"]) if not p.strip("[]: ").isdigit()]
    assert not unexecuted, f"{path.name}: code cells {unexecuted} did not run (prompts {report['prompts']})"
    # the golden cells, checked on the notebook this run executed (what nbval checks, without
    # executing every chapter a second time)
    stored = json.loads(path.read_text())
    assert golden_mismatches(stored, report["executed"]) == [], path.name
    # exercises check, never tell: no accepted answer in the chapter's markdown or outputs
    assert leaked_answers(path, report["executed"]) == [], path.name
    # no sentence the run contradicts: every measured number the markdown states, an output holds
    assert unbacked_claims(report["executed"]) == [], path.name

    assert report["panels"] >= 1, f"{path.name}: no experiment_panel with a world_size control rendered"
    assert report["before"].startswith("world_size="), report["before"][:200]
    assert report["clicked"] is not None, f"{path.name}: the world_size control offers a single value"
    assert int(report["clicked"]) >= 2, f"{path.name}: clicked world_size={report['clicked']}"
    first_before, _, body_before = report["before"].partition("\n")
    first_after, _, body_after = report["after"].partition("\n")
    assert first_after.startswith(f"world_size={report['clicked']}"), first_after
    changed, _, body_after = body_after.partition("\n")  # the panel says what the click changed
    assert changed.startswith("changed: world_size "), f"{path.name}: {changed!r}"
    assert first_after.split(",")[0] != first_before.split(",")[0], (first_before, first_after)
    assert body_after != body_before, f"{path.name}: the panel shows the same result after the click"
    if report["figures_before"]:  # a panel that draws must redraw: a stale figure beside new text
        assert report["figures_after"] and report["figures_after"] != report["figures_before"], \
            f"{path.name}: the panel's figure did not change after the click"
    assert report["figures_outside"] == 0, \
        f"{path.name}: {report['figures_outside']} figure(s) in the panel's cell outside the panel"
    assert not _panel_errors(report["before"]) and not _panel_errors(report["after"]), \
        f"{path.name}: the panel's experiment failed: {_panel_errors(report['before'] + report['after'])}"
    assert (SCREENSHOTS / f"{path.stem}.png").stat().st_size > 10_000
    # A plot the panel redraws must show something: with JupyterLab 4.6's widget messages on a
    # kernel subshell, pyplot used to render it blank (fixed in parlab.widgets, held here).
    assert report["blank_plots"] == 0, f"{path.name}: {report['blank_plots']} blank plot(s) after the click"


@FIRST_SHARD
def test_harness_sees_a_failing_cell_and_a_redrawn_plot(lab_and_browser):
    """The checks above can fail, and a plot-only panel works: one notebook (one kernel) for both.

    A panel whose experiment only draws a figure is redrawn for the clicked world size (not blank:
    that is what parlab.widgets guards against) and says what changed; a figure the cell draws
    outside the panel is counted (the chapters' test fails on it); a cell that raises is reported
    as the error it is, and the cell after it stays unexecuted.
    """
    import nbformat

    lab, context = lab_and_browser
    page = context.new_page()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
                    "import parlab\n"
                    "from parlab.core.explore import draw_ring_schedule\n"
                    "from parlab.widgets import experiment_panel\n"
                    "import matplotlib.pyplot as plt\n"
                    "experiment_panel(draw_ring_schedule, {'world_size': [2, 3, 4]}, world_size=2)\n"
                    "plt.plot([0, 1]); plt.show()  # drawn outside the panel: stale after a click"),
                nbformat.v4.new_code_cell("parlab.run('no-such-scheme')"),
                nbformat.v4.new_code_cell("print('not reached')")]
    nbformat.write(nb, WORK / "notebooks" / "harness.ipynb")
    try:
        report = exercise_chapter(page, lab, "notebooks/harness.ipynb", SCREENSHOTS / "harness.png")
    finally:
        page.close()
        lab.shutdown_kernels()
    assert len(report["errors"]) == 1 and "ValueError" in report["errors"][0], report["errors"]
    assert report["prompts"][1:] == ["[2]:", "[ ]:"], report["prompts"]
    assert report["panels"] == 1 and report["clicked"] == "3", report
    assert report["after"].startswith("world_size=3") and report["after"] != report["before"]
    assert report["images"] == 1 and report["blank_plots"] == 0, report
    assert report["after"].splitlines()[1] == "changed: world_size 2 → 3", report["after"]
    assert report["figures_outside"] == 1, report  # the figure the cell drew outside the panel


@FIRST_SHARD
def test_golden_check_fails_on_a_changed_output():
    """The golden comparison above can fail: a stored golden cell against a different execution."""
    cell = {"cell_type": "code", "source": "# NBVAL_CHECK_OUTPUT\nprint(6 * 7)",
            "outputs": [{"output_type": "stream", "name": "stdout", "text": "42\n"}]}
    stored = {"cells": [cell]}
    same = {"cells": [{**cell, "outputs": [{"output_type": "stream", "name": "stdout",
                                             "text": ["4", "2  \n"]}]}]}
    other = {"cells": [{**cell, "outputs": [{"output_type": "execute_result",
                                              "data": {"text/plain": "43"}}]}]}
    assert golden_mismatches(stored, same) == []
    assert len(golden_mismatches(stored, other)) == 1


@FIRST_SHARD
def test_a_notebook_that_never_settles_is_reloaded_once_then_reported(lab_and_browser, capsys):
    """A tab that never shows an idle kernel with every cell is reloaded (a person's fix for a
    stuck page on a busy machine), and the error then names what it last saw: here the page holds
    one code cell where the harness waits for two, so it cannot settle."""
    import nbformat

    from tools.lab_chapter import _open_with_idle_kernel

    lab, context = lab_and_browser
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("1 + 1")]
    nbformat.write(nb, WORK / "notebooks" / "unsettled.ipynb")
    page = context.new_page()
    try:
        with pytest.raises(TimeoutError) as error:
            _open_with_idle_kernel(page, lab, "notebooks/unsettled.ipynb", code_cells=2, timeout=8)
    finally:
        page.close()
        lab.shutdown_kernels()
    message = str(error.value)
    assert "timed out 2 times" in message and "'code_cells': 2" in message, message
    assert "'cells_on_page'" in message and "JupyterLab's log ends" in message, message
    assert capsys.readouterr().err.count("did not settle") == 2
