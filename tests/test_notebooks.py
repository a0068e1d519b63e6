"""Every chapter in notebooks/ runs top to bottom under papermill, into build/, at each parameter set
listed in its metadata (`metadata.parlab.ci_parameters`) that differs from its own parameters cell:
the stored defaults already run under nbval (`make notebooks`) and in the browser test, so running
them a third time here would only cost CI minutes. A chapter lists another parameter set only where
it is cheap (00 at four ranks); every chapter's panel is re-run at another world size by the
browser test, and every scheme at every world size by the unit tests."""

import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def stored_parameters(nb: dict) -> dict:
    """The literals of the notebook's `parameters` cell."""
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            values: dict = {}
            exec("".join(cell["source"]), {}, values)  # typed literals only (tools/hygiene.py)
            return values
    return {}


def _cases():
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        meta, stored = nb.get("metadata", {}).get("parlab", {}), stored_parameters(nb)
        for i, params in enumerate(meta.get("ci_parameters", [{}])):
            if all(stored.get(k) == v for k, v in params.items()):
                continue  # the stored defaults: nbval and the browser test run them
            label = ",".join(f"{k}={v}" for k, v in params.items()) or "defaults"
            yield pytest.param(path, params, i, id=f"{path.stem}[{label}]")


@pytest.mark.parametrize("path,params,index", list(_cases()))
def test_notebook_executes(path, params, index):
    import papermill

    out_dir = ROOT / "build" / "executed"
    out_dir.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(str(path), str(out_dir / f"{path.stem}-{index}.ipynb"),
                               parameters=params, kernel_name="python3", cwd=str(path.parent),
                               progress_bar=False, execution_timeout=600)  # a hung cell fails


def test_notebooks_are_stripped():
    """Stored notebooks carry outputs only in golden cells, and no run metadata (tools/hygiene.py)."""
    from tools.hygiene import check

    assert check(NOTEBOOKS) == []


def test_hygiene_flags_measured_figures_typed_into_a_summary():
    """A summary's prose may not state a measured number: figures with ×, % or a time unit are
    flagged, unless they are math (a closed form) or cite their source."""
    from tools.hygiene import typed_measurements

    def nb(*cells):
        return {"cells": [{"cell_type": "markdown", "source": c, "metadata": {}} for c in cells]}

    flagged = typed_measurements(nb("## 7. Summary\n- ep-allgather takes 2.0–2.3× ep's time, "
                                    "36% idle, 122 ms"))
    assert [p.split("figure ")[1].split(":")[0] for p in flagged] == ["'2.0–2.3×'", "'36%'", "'122 ms'"]
    assert typed_measurements(nb("## Summary\n- sequence parallelism moves $1.25\\times$ tp's bytes",
                                 "## Summary\n- 14–32% exposed (Hsia et al., ISCA 2024)",
                                 "## Results\n- measured 2.3× here (not a summary cell)",
                                 "## Summary\n- `python -m parlab bench x`: 1.5× paced (A100)")) == []
