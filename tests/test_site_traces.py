"""`make site` links each chapter's Perfetto trace (issue 50, item 3): a chapter that offers the trace
of its run (`parlab.traces.offer`) gets the file copied beside its page and a link on the page that
opens it. Built from a one-cell chapter in a temporary folder, so the check costs one small run."""

import json
import os
import re

import nbformat

from tools import site

CODE = ('import parlab\nimport parlab.traces\n\n'
        'parlab.traces.offer(parlab.run("ddp-naive", world_size=2, steps=2), "01_tiny")')


def test_site_copies_the_trace_and_the_page_links_it(tmp_path, monkeypatch):
    monkeypatch.delenv("PARLAB_TRACE_DIR", raising=False)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A tiny chapter\n\nOne run, its trace."),
                nbformat.v4.new_code_cell(CODE)]
    chapters = tmp_path / "notebooks"
    chapters.mkdir()
    nbformat.write(nb, chapters / "01_tiny.ipynb")
    out = tmp_path / "site"
    result = site.build(out, notebooks=chapters)
    assert result["failed"] == {}, result["failed"]
    page = (out / "01_tiny.html").read_text()
    assert re.search(r'<a [^>]*href="traces/01_tiny.json"', page), "no link to the trace"
    assert "ui.perfetto.dev" in page
    trace = json.loads((out / "traces" / "01_tiny.json").read_text())
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) > 0
    assert not (chapters / "traces").exists()  # written into the build, not beside the sources
    assert "PARLAB_TRACE_DIR" not in os.environ  # the build put the environment back
