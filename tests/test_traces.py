"""Traces one click away (issue 50, item 3): a chapter's run written as Chrome/Perfetto trace JSON
(Google's Trace Event Format) with a link to it; chapters 01, 04 and 13 offer theirs; `make site`
copies the files beside the pages and the pages link them."""

import json
import pathlib

import pytest

import parlab
import parlab.traces
from parlab.core.trace import KINDS
from parlab.pipeline.explore import COMPUTE_HEAVY

ROOT = pathlib.Path(__file__).resolve().parent.parent
OFFERING = ("01_data_parallel", "04_pipeline", "13_planner")


def _check_chrome_trace(path: pathlib.Path, result) -> list[dict]:
    """Valid trace-event JSON: a name per rank's process and per kind's thread, one complete event
    ("X", ts and dur in µs) per span of the run's timeline."""
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    ranks = {e["rank"] for e in result.timeline}
    named = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert named == ranks
    spans = [e for e in events if e["ph"] == "X"]
    assert len(spans) == len(result.timeline)
    for e in spans:
        assert e["pid"] in ranks and e["cat"] in KINDS and isinstance(e["name"], str)
        assert e["ts"] >= 0 and e["dur"] >= 0
    assert {e["cat"] for e in spans} >= {"compute", "comm", "wait"}
    return spans


def test_chapter_04_run_writes_a_valid_perfetto_trace(tmp_path):
    # chapter 04's drawn run: pp-zb, 2 stages, 4 micro-batches, 2 steps, A100 time
    r = parlab.run("pp-zb", world_size=2, steps=2, model_config=COMPUTE_HEAVY, microbatches=4,
                   clock="A100")
    offered = parlab.traces.offer(r, "04_pipeline_pp-zb", folder=tmp_path)
    path = offered.paths["04_pipeline_pp-zb"]
    assert path == tmp_path / "04_pipeline_pp-zb.json"
    spans = _check_chrome_trace(path, r)
    assert offered.counts["04_pipeline_pp-zb"] == len(spans)
    page = offered._repr_html_()
    assert f'href="{tmp_path.as_posix()}/04_pipeline_pp-zb.json" download' in page
    assert "ui.perfetto.dev" in page and "ui.perfetto.dev" in repr(offered)


def test_several_runs_one_file_each_linked_under_the_href(tmp_path, monkeypatch):
    monkeypatch.setenv("PARLAB_TRACE_DIR", str(tmp_path / "t"))
    monkeypatch.setenv("PARLAB_TRACE_HREF", "traces")
    runs = {name: parlab.run(name, world_size=2, steps=2) for name in ("ddp-naive", "ddp-overlap")}
    offered = parlab.traces.offer(runs, "01_data_parallel")
    assert offered.hrefs == {n: f"traces/01_data_parallel_{n}.json" for n in runs}
    for name, r in runs.items():
        _check_chrome_trace(tmp_path / "t" / f"01_data_parallel_{name}.json", r)


@pytest.mark.parametrize("name", ["", "a b", "../up", 3])
def test_a_bad_name_is_refused(name, tmp_path):
    with pytest.raises(ValueError, match="name="):
        parlab.traces.offer(object(), name, folder=tmp_path)


def test_not_a_run_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"runs\['x'\] is a int"):
        parlab.traces.offer({"x": 3}, "t", folder=tmp_path)


@pytest.mark.parametrize("chapter", OFFERING)
def test_chapter_offers_its_trace(chapter):
    nb = json.loads((ROOT / "notebooks" / f"{chapter}.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert any("parlab.traces.offer(" in src and f'"{chapter}' in src for src in code), chapter
