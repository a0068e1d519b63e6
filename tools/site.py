"""The chapters as a static web site that works offline: `make site` → build/site/index.html.

    python tools/site.py                 # every notebooks/NN_*.ipynb
    python tools/site.py 00 03_tensor    # only chapters whose name starts with these

Each chapter is executed with papermill at its first CI parameter set (metadata
`parlab.ci_parameters`, CI-small) into build/site-src/, keeping the widgets' state that nbclient
stores in the notebook metadata; nbconvert's JupyterLab template (site/templates/parlab, which
extends it) renders it to HTML with the plots inlined as data: images, and an index page lists
the chapters. Nothing is loaded from a CDN: the widget renderer (@jupyter-widgets/html-manager's
standalone embed.js) and MathJax are taken once from the npm registry with `npm pack` at the
pinned versions below, cached in build/vendor/, and copied into the site's _static/, so the saved
panels and the formulas render from the local files (a test opens a page with every non-file
request blocked). The runs' Perfetto traces a chapter offers (`parlab.traces.offer`) are written
into build/site-src/traces/ and copied to the site's traces/, where the page's links point.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python tools/site.py` from anywhere
    sys.path.insert(0, str(ROOT))
NOTEBOOKS = ROOT / "notebooks"
TEMPLATES = ROOT / "site" / "templates"
STATIC = ROOT / "site" / "static"

# The widget renderer must speak the widget protocol of the pinned ipywidgets (8.1: state
# version 2), which @jupyter-widgets/html-manager 1.0.x does.
VENDORED = {"@jupyter-widgets/html-manager": "1.0.15", "mathjax": "3.2.2"}
CELL_TIMEOUT_S = 300  # a cell that hangs fails its chapter (and the build) instead of the whole CI run


def chapters(selected: list[str] | None = None, directory: pathlib.Path = NOTEBOOKS) -> list[pathlib.Path]:
    """The numbered chapters, optionally only those whose file name starts with one of `selected`."""
    found = sorted(directory.glob("[0-9][0-9]_*.ipynb"))
    if selected:
        unknown = [s for s in selected if not any(p.stem.startswith(s) for p in found)]
        if unknown:
            raise ValueError(f"no chapter starts with {unknown}; chapters: {[p.stem for p in found]}")
        found = [p for p in found if any(p.stem.startswith(s) for s in selected)]
    return found


def npm_package(name: str, version: str, cache: pathlib.Path) -> pathlib.Path:
    """The unpacked npm tarball of name@version (its `package/` folder), fetched once into `cache`."""
    target = cache / f"{name.replace('@', '').replace('/', '-')}-{version}"
    if (target / "package.json").exists():
        return target
    from tools.browser import ensure_debian

    ensure_debian("npm", "npm")  # once, to fetch the offline widget renderer and MathJax
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(["npm", "pack", f"{name}@{version}", "--silent", "--pack-destination", tmp],
                             check=True, capture_output=True, text=True, cwd=tmp)
        tarball = pathlib.Path(tmp) / out.stdout.strip().splitlines()[-1]
        unpacked = pathlib.Path(tmp) / "unpacked"
        with tarfile.open(tarball) as tar:
            tar.extractall(unpacked, filter="data")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(unpacked / "package"), target)
    return target


def copy_static(site: pathlib.Path, cache: pathlib.Path) -> None:
    """_static/: parlab.css, the standalone widget renderer and its fonts, MathJax (CHTML) and its fonts."""
    static = site / "_static"
    shutil.rmtree(static, ignore_errors=True)
    shutil.copytree(STATIC, static)
    manager = npm_package("@jupyter-widgets/html-manager", VENDORED["@jupyter-widgets/html-manager"], cache)
    shutil.copytree(manager / "dist", static / "html-manager",
                    ignore=shutil.ignore_patterns("*.map", "*amd.js"))
    mathjax = npm_package("mathjax", VENDORED["mathjax"], cache) / "es5"
    (static / "mathjax").mkdir()
    shutil.copy(mathjax / "tex-chtml-full.js", static / "mathjax")
    fonts = pathlib.Path("fonts") / "woff-v2"
    shutil.copytree(mathjax / "output" / "chtml" / fonts, static / "mathjax" / fonts)


def describe(nb: dict, path: pathlib.Path) -> tuple[str, str]:
    """(title, one-paragraph summary) from the chapter's first markdown heading and the text after it."""
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        lines = text.strip().splitlines()
        if lines and lines[0].startswith("#"):
            title = lines[0].lstrip("#").strip()
            paragraph = []
            for line in lines[1:]:
                if not line.strip() and paragraph:
                    break
                if line.strip() and not line.lstrip().startswith(("#", "!", "|", "```")):
                    paragraph.append(line.strip())
            # Markdown emphasis and links go; $…$ math stays as written (MathJax renders it on the
            # index, so `n_h` keeps its underscore).
            summary = "".join(part if part.startswith("$") else
                              re.sub(r"[*_`]|\[([^\]]*)\]\([^)]*\)", r"\1", part)
                              for part in re.split(r"(\$[^$]+\$)", " ".join(paragraph)))
            if len(summary) > 320:  # whole sentences, about two lines on the index
                cut = summary.rfind(". ", 0, 320)
                summary = summary[:cut + 1] if cut > 80 else summary[:320] + "…"
            return title, summary
    return path.stem, ""


def ci_parameters(nb: dict) -> dict:
    """The first CI parameter set of the chapter ({} = its own parameters cell)."""
    return (nb.get("metadata", {}).get("parlab", {}).get("ci_parameters") or [{}])[0]


def execute(path: pathlib.Path, out: pathlib.Path, parameters: dict) -> str | None:
    """Run the chapter with papermill into `out` (widget state kept); the error text, or None."""
    import papermill

    try:
        papermill.execute_notebook(str(path), str(out), parameters=parameters, kernel_name="python3",
                                   cwd=str(path.parent), progress_bar=False,
                                   execution_timeout=CELL_TIMEOUT_S)
    except Exception as err:  # noqa: BLE001 - the page still shows where it failed; main() exits 1
        return f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}"
    return None


def fold_injected_parameters(nb) -> None:
    """Papermill adds an "injected-parameters" cell after the chapter's parameters cell; on the page
    it would stand beside the real one. Drop it and show what it set as the parameters cell's
    output ("executed with world_size = 2"), so the page has one parameters cell."""
    import nbformat

    tagged = [i for i, c in enumerate(nb.cells) if "injected-parameters" in c.metadata.get("tags", [])]
    for index in reversed(tagged):
        injected = nb.cells.pop(index)
        lines = [line for line in injected.source.splitlines() if line.strip()
                 and not line.lstrip().startswith("#")]
        target = next((c for c in nb.cells[:index][::-1] if "parameters" in c.metadata.get("tags", [])),
                      None)
        if target is not None and lines:
            target.outputs = list(target.get("outputs", [])) + [nbformat.v4.new_output(
                "stream", name="stdout", text="this page was executed with: " + ", ".join(lines) + "\n")]


MATHJAX_HEAD = """<script>
window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], processEscapes: true},
  options: {enableMenu: false},
  chtml: {fontURL: '_static/mathjax/fonts/woff-v2'}
};
</script>
<script defer src="_static/mathjax/tex-chtml-full.js"></script>
"""


def render(executed: pathlib.Path, page: pathlib.Path, nav: dict) -> None:
    """One chapter page: JupyterLab's look, local widget renderer and MathJax, navigation links."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(executed, as_version=4)
    fold_injected_parameters(nb)
    exporter = HTMLExporter(template_name="parlab", extra_template_basedirs=[str(TEMPLATES)],
                            widget_renderer_url="_static/html-manager/embed.js")
    html, _ = exporter.from_notebook_node(nb, resources={"parlab": nav, "metadata": {"name": nav["title"]}})
    page.write_text(html)


def write_index(site: pathlib.Path, entries: list[dict], footer: str) -> None:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    html = env.get_template("site_index.html.j2").render(chapters=entries, footer=footer)
    # The summaries keep their $…$ math (chapter 06's $T^2$): the vendored MathJax renders it.
    html = html.replace("</head>", MATHJAX_HEAD + "</head>", 1)
    (site / "index.html").write_text(html)


def footer_text() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown commit"
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"Built by make site from {commit} on {stamp}, executed on CPU processes over gloo."


def _execute_all(paths: list[pathlib.Path], sources: pathlib.Path) -> tuple[list[dict], dict]:
    """Execute each chapter into `sources`: (index entries, {chapter: error})."""
    entries, failed = [], {}
    for path in paths:
        nb = json.loads(path.read_text())
        title, summary = describe(nb, path)
        params = ci_parameters(nb)
        started = time.perf_counter()
        error = execute(path, sources / path.name, params)
        seconds = time.perf_counter() - started
        if error:
            failed[path.stem] = error
        print(f"{path.stem}: executed in {seconds:.1f} s" + (f" — FAILED {error}" if error else ""),
              flush=True)
        entries.append({"path": path, "title": title, "summary": summary, "href": f"{path.stem}.html",
                        "source": f"{path.parent.name}/{path.name}", "seconds": seconds, "error": error,
                        "parameters_text": ", ".join(f"{k}={v}" for k, v in params.items())
                        or "its defaults"})
    return entries, failed


def build(out: pathlib.Path, selected: list[str] | None = None, cache: pathlib.Path | None = None,
          notebooks: pathlib.Path = NOTEBOOKS) -> dict:
    """Build the site into `out`; returns {"pages": [...], "failed": {chapter: error}}."""
    paths = chapters(selected, notebooks)
    cache = cache or ROOT / "build" / "vendor"
    # The kernels papermill starts must import this checkout's parlab, whatever the caller's cwd.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in
                                               os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.html"):
        old.unlink()
    copy_static(out, cache)
    sources = out.parent / f"{out.name}-src"
    sources.mkdir(parents=True, exist_ok=True)

    traces = sources / "traces"  # the runs' traces the chapters offer (parlab.traces.offer)
    shutil.rmtree(traces, ignore_errors=True)
    saved = {k: os.environ.get(k) for k in ("PARLAB_TRACE_DIR", "PARLAB_TRACE_HREF")}
    os.environ.update(PARLAB_TRACE_DIR=str(traces), PARLAB_TRACE_HREF="traces")  # links beside the pages
    try:
        entries, failed = _execute_all(paths, sources)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    shutil.rmtree(out / "traces", ignore_errors=True)
    if traces.is_dir():  # copied next to the pages, so each chapter's link opens its file
        shutil.copytree(traces, out / "traces")
    footer = footer_text()
    for i, entry in enumerate(entries):
        link = lambda j: {"href": entries[j]["href"], "title": entries[j]["title"]} \
            if 0 <= j < len(entries) else None
        nav = {"title": entry["title"], "static": "_static", "footer": footer,
               "prev": link(i - 1), "next": link(i + 1)}
        render(sources / entry["path"].name, out / entry["href"], nav)
    write_index(out, entries, footer)
    return {"pages": [out / e["href"] for e in entries], "failed": failed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="only chapters whose file name starts with these")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "build" / "site")
    parser.add_argument("--notebooks", type=pathlib.Path, default=NOTEBOOKS, help="where the chapters are")
    args = parser.parse_args(argv)
    try:
        result = build(args.out, args.chapters or None, notebooks=args.notebooks)
    except (ValueError, RuntimeError, subprocess.CalledProcessError) as err:
        print(f"site: {err}", file=sys.stderr)
        return 2
    print(f"site: {len(result['pages'])} chapter page(s) → {args.out / 'index.html'}")
    for name, error in result["failed"].items():
        print(f"site: {name} failed: {error}", file=sys.stderr)
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
