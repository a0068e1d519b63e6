"""`make site`: a chapter becomes a static page with its plots, tables, golden results and saved widgets.

The test builds the site for the first chapter (tools/site.py executes it with papermill at its
CI parameters), then checks the page against the executed notebook: every plot is an inlined
image, every result table and golden output is there, the widgets' state is saved; and opens the
page in headless Chromium with every non-file request blocked, to see the saved world-size panel
and the plots render from the local files alone, with a screenshot in build/screenshots/.
"""

import html
import json
import pathlib
import re

import pytest

from tools import hygiene, site
from tools.browser import chromium

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
OUT = ROOT / "build" / "site-test"
SCREENSHOTS = ROOT / "build" / "screenshots"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


@pytest.fixture(scope="module")
def built():
    if not CHAPTERS:
        pytest.skip("no chapter in notebooks/ yet")
    chapter = CHAPTERS[0]
    result = site.build(OUT, [chapter.stem])
    assert result["failed"] == {}, result["failed"]
    page = OUT / f"{chapter.stem}.html"
    executed = json.loads((OUT.parent / f"{OUT.name}-src" / chapter.name).read_text())
    return chapter, page, page.read_text(), executed


def _outputs(nb, mime):
    return [o["data"][mime] for c in nb["cells"] if c["cell_type"] == "code"
            for o in c.get("outputs", []) if mime in o.get("data", {})]


def _text(value):
    return "".join(value) if isinstance(value, list) else value


def test_page_holds_plots_tables_and_golden_results(built):
    chapter, _, page, executed = built
    pngs = _outputs(executed, "image/png")
    assert pngs, f"{chapter.name} shows no plot in its cells"
    for png in pngs:  # each plot inlined, byte for byte
        assert f'src="data:image/png;base64,{_text(png).strip()}' in page
    tables = [t for t in map(_text, _outputs(executed, "text/html")) if "<table" in t]
    assert page.count("<table") >= len(tables)
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for cell in executed["cells"]:
        if cell["cell_type"] == "code" and cell.get("metadata", {}).get("keep_output"):
            for output in cell.get("outputs", []):
                shown = output.get("text") or output.get("data", {}).get("text/plain", "")
                for line in _text(shown).splitlines():
                    assert line.strip() in text, f"golden line {line!r} is not on the page"


def test_page_saves_the_widgets_and_loads_nothing_remote(built):
    chapter, _, page, executed = built
    state = executed["metadata"]["widgets"][WIDGET_STATE]["state"]
    controls = [m for m in state.values() if m["model_name"] == "ToggleButtonsModel"
                and "parlab-control-world_size" in m["state"].get("_dom_classes", [])]
    assert controls, f"{chapter.name}: no saved world_size control"
    assert f'<script type="{WIDGET_STATE}">' in page
    remote = re.findall(r'<(?:script|link|img)[^>]*(?:src|href)="(?:https?:)?//[^"]*"', page)
    assert remote == [], remote
    assert "widgetRendererSrc = '_static/html-manager/embed.js'" in page
    assert (OUT / "_static" / "html-manager" / "embed.js").stat().st_size > 100_000
    assert (OUT / "_static" / "mathjax" / "tex-chtml-full.js").stat().st_size > 100_000


def test_index_links_the_chapter(built):
    chapter, page_path, _, executed = built
    index = (OUT / "index.html").read_text()
    title, _ = site.describe(executed, chapter)
    assert f'href="{page_path.name}"' in index and html.escape(title) in index


def test_page_renders_offline_in_chromium(built):
    chapter, page_path, _, executed = built
    from PIL import Image

    blocked = []

    def only_local(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / f"site-{chapter.stem}.png"
    with chromium() as context:
        page = context.new_page()
        page.route("**/*", only_local)
        page.goto(page_path.as_uri())
        # The world-size panel exists only once the vendored renderer has read the saved state.
        panel = page.locator(".parlab-panel").first
        panel.locator(".parlab-control-world_size button").first.wait_for(timeout=60_000)
        output = panel.locator(".parlab-output")
        output.locator("text=world_size=").first.wait_for(timeout=30_000)
        assert output.inner_text().strip().startswith("world_size=")
        images = page.locator(".jp-OutputArea-output img")
        assert images.count() >= len(_outputs(executed, "image/png"))
        page.wait_for_function("[...document.images].every(i => i.complete && i.naturalWidth > 0)")
        if any("$" in _text(c["source"]) for c in executed["cells"] if c["cell_type"] == "markdown"):
            page.locator("mjx-container").first.wait_for(timeout=30_000)  # the formulas typeset offline
        page.screenshot(path=str(shot), full_page=True)
        images.first.scroll_into_view_if_needed()
        images.first.screenshot(path=str(SCREENSHOTS / f"site-{chapter.stem}-plot.png"))
        panel.screenshot(path=str(SCREENSHOTS / f"site-{chapter.stem}-panel.png"))
    assert blocked == [], f"the page tried to fetch {blocked}"
    for name in (shot.name, f"site-{chapter.stem}-plot.png", f"site-{chapter.stem}-panel.png"):
        colors = Image.open(SCREENSHOTS / name).convert("L").getextrema()
        assert colors[1] - colors[0] > 100, f"{name} is blank"


def _clean_notebook():
    import nbformat

    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("world_size: int = 2\nsteps: int = 3")
    params.metadata["tags"] = ["parameters"]
    golden = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint('match: True')", execution_count=None)
    golden.metadata["keep_output"] = True
    golden.outputs = [nbformat.v4.new_output("stream", name="stdout", text="match: True\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("# 99 A chapter"), params, golden,
                nbformat.v4.new_code_cell("parlab.widgets.experiment_panel(f, {'world_size': [1, 2]})")]
    nb.metadata["parlab"] = {"ci_parameters": [{"world_size": 2}, {"world_size": 4, "steps": 2}]}
    return json.loads(nbformat.writes(nb))


def _dirty(change):
    nb = _clean_notebook()
    change(nb)
    return nb


VIEW = "application/vnd.jupyter.widget-view+json"
DIRT = {  # what makes a stored chapter dirty, and the words its problem report must use
    "papermill metadata": (lambda nb: nb["metadata"].update(papermill={"parameters": {}}), "'papermill'"),
    "saved widget state": (lambda nb: nb["metadata"].update(widgets={WIDGET_STATE: {}}), "'widgets'"),
    "cell papermill metadata": (lambda nb: nb["cells"][3]["metadata"].update(papermill={}), "cell 3"),
    "execution timings": (lambda nb: nb["cells"][2]["metadata"].update(execution={}), "'execution'"),
    "output in a plain cell": (lambda nb: nb["cells"][3]["outputs"].append(
        {"output_type": "stream", "name": "stdout", "text": "world_size=2\n"}), "not a golden cell"),
    "execution count": (lambda nb: nb["cells"][3].update(execution_count=7), "execution count 7"),
    "golden without its mark": (lambda nb: nb["cells"][2].update(source="print(1)"), "marked=False"),
    "mark without keep_output": (lambda nb: nb["cells"][2]["metadata"].pop("keep_output"),
                                 "keep_output=False"),
    "widget view kept": (lambda nb: nb["cells"][2]["outputs"].append(
        {"output_type": "display_data", "metadata": {}, "data": {VIEW: {}}}), "widget view"),
    "no parameters cell": (lambda nb: nb["cells"][1]["metadata"].pop("tags"), "'parameters'"),
    "unknown CI parameter": (lambda nb: nb["metadata"]["parlab"]["ci_parameters"].append({"wrold_size": 2}),
                             "['wrold_size']"),
}


def test_hygiene_accepts_a_clean_chapter():
    assert hygiene.problems(_clean_notebook()) == []


@pytest.mark.parametrize("dirt", DIRT, ids=list(DIRT))
def test_hygiene_names_each_kind_of_dirt(dirt):
    change, words = DIRT[dirt]
    found = hygiene.problems(_dirty(change), "99_x.ipynb")
    assert found and found[0].startswith("99_x.ipynb") and words in found[0], found


def test_hygiene_command_fails_on_a_dirty_notebook(tmp_path):
    dirty = tmp_path / "99_x.ipynb"
    dirty.write_text(json.dumps(_dirty(DIRT["output in a plain cell"][0])))
    clean = tmp_path / "98_y.ipynb"
    clean.write_text(json.dumps(_clean_notebook()))
    assert hygiene.main([str(clean)]) == 0
    assert hygiene.main([str(clean), str(dirty)]) == 1


def test_site_names_unknown_chapters():
    with pytest.raises(ValueError, match="zz_nope"):
        site.chapters(["zz_nope"])
    assert site.main(["zz_nope", "--out", str(OUT.parent / "site-unused")]) == 2


def test_a_failing_chapter_is_marked_and_fails_the_build(tmp_path):
    """The page still shows where it failed; the index says so; `make site` exits 1."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# 98 Broken\n\nA chapter whose second cell raises."),
                nbformat.v4.new_code_cell("print('first cell ran')"),
                nbformat.v4.new_code_cell("raise RuntimeError('deliberately broken')")]
    (tmp_path / "notebooks").mkdir()
    nbformat.write(nb, tmp_path / "notebooks" / "98_broken.ipynb")
    out = tmp_path / "site"
    assert site.main(["--notebooks", str(tmp_path / "notebooks"), "--out", str(out)]) == 1
    page = (out / "98_broken.html").read_text()
    assert "first cell ran" in page and "deliberately broken" in page
    index = (out / "index.html").read_text()
    assert 'class="failed"' in index and "98 Broken" in index


def test_papermill_injected_cell_folds_into_the_parameters_cell():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("world_size: int = 2", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("# Parameters\nworld_size = 4\n",
                                  metadata={"tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell("print(world_size)")])
    site.fold_injected_parameters(nb)
    assert len(nb.cells) == 2 and "injected-parameters" not in str(nb.cells[1].metadata)
    assert "world_size = 4" in nb.cells[0].outputs[0]["text"]


def test_index_keeps_summary_math_and_loads_mathjax_locally(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "source": "# 98 Math\n\nA *score* matrix of $T^2$ "
                     "entries and $n_h$ heads, `code`.\n"}]}
    title, summary = site.describe(nb, tmp_path / "98_math.ipynb")
    assert "$T^2$" in summary and "$n_h$" in summary and "*" not in summary and "`" not in summary
    site.write_index(tmp_path, [{"href": "98_math.html", "title": title, "summary": summary,
                                 "source": "notebooks/98_math.ipynb", "seconds": 1.0, "error": None,
                                 "parameters_text": "its defaults"}], "footer")
    index = (tmp_path / "index.html").read_text()
    assert "_static/mathjax/tex-chtml-full.js" in index and "$T^2$" in index
