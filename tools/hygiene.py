"""What a stored chapter may carry: outputs only in golden cells, no run metadata, a parameters cell.

    python tools/hygiene.py notebooks/*.ipynb     # prints each problem, exits 1 if any

A chapter is stored stripped (`tools/update_golden.py` writes it so): code cells have no outputs
and no execution counts except the golden cells — cell metadata `"keep_output": true` and a
source starting with `# NBVAL_CHECK_OUTPUT`, whose outputs nbval checks on every `make test` —
and nothing a run leaves behind: papermill metadata, saved widget state, nbclient's execution
timings, a widget view in a golden output (its model is gone once the kernel is). The first code
cell is tagged `parameters` (papermill injects the CI parameters after it), and every CI
parameter set names only variables that cell assigns. tests/test_notebooks.py runs this check.

A summary never states a number its run did not make (`typed_measurements`): in a markdown cell
whose heading says "Summary" (or "Headline"), a figure with a measurement's unit — a ratio "1.5×",
a share "14%", a time "3 ms" — is flagged unless it is math (`$1.25\times$`: a closed form), or its
line cites where it comes from: a paper ("et al.", a year in parentheses), or a bench run under a
named clock ("`python -m parlab bench ...`" with "paced" / "A100" / "raw" on the line). Measured
headlines belong in a code cell that prints them from this run, with their verdict.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
import sys

GOLDEN_MARK = "# NBVAL_CHECK_OUTPUT"
RUN_METADATA = ("papermill", "widgets")
CELL_RUN_METADATA = ("papermill", "execution")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def is_golden(cell) -> bool:
    meta = cell.get("metadata", {})
    return bool(meta.get("keep_output")) or "keep_output" in meta.get("tags", [])


def problems(nb: dict, name: str = "notebook") -> list[str]:
    """Everything wrong with a stored notebook (as JSON), one line each; [] when it is clean."""
    found = [f"{name}: notebook metadata carries {key!r} (run metadata)"
             for key in RUN_METADATA if key in nb.get("metadata", {})]
    code = [(i, c) for i, c in enumerate(nb.get("cells", [])) if c["cell_type"] == "code"]
    for i, cell in enumerate(nb.get("cells", [])):
        where = f"{name} cell {i}"
        found += [f"{where}: metadata carries {key!r} (run metadata)"
                  for key in CELL_RUN_METADATA if key in cell.get("metadata", {})]
        if cell["cell_type"] != "code":
            continue
        golden, marked = is_golden(cell), _source(cell).lstrip().startswith(GOLDEN_MARK)
        if golden != marked:
            found.append(f"{where}: golden cells need both keep_output metadata and a first line "
                         f"{GOLDEN_MARK!r} (keep_output={golden}, marked={marked})")
        if not golden and cell.get("outputs"):
            found.append(f"{where}: carries {len(cell['outputs'])} output(s) but is not a golden cell")
        if not golden and cell.get("execution_count") is not None:
            found.append(f"{where}: carries execution count {cell['execution_count']}")
        if golden and any(WIDGET_VIEW in o.get("data", {}) for o in cell.get("outputs", [])):
            found.append(f"{where}: a golden output holds a widget view (its state is not stored)")
    if not code or "parameters" not in code[0][1].get("metadata", {}).get("tags", []):
        found.append(f"{name}: the first code cell is not tagged 'parameters'")
    else:
        try:
            tree = ast.parse(_source(code[0][1]))
        except SyntaxError as err:
            found.append(f"{name}: the parameters cell does not parse: {err}")
            tree = ast.Module(body=[], type_ignores=[])
        assigned = {t.id for node in tree.body if isinstance(node, ast.AnnAssign | ast.Assign)
                    for t in ([node.target] if isinstance(node, ast.AnnAssign) else node.targets)
                    if isinstance(t, ast.Name)}
        for k, params in enumerate(nb.get("metadata", {}).get("parlab", {}).get("ci_parameters", [])):
            unknown = sorted(set(params) - assigned)
            if unknown:
                found.append(f"{name}: ci_parameters[{k}] sets {unknown}, which the parameters cell "
                             f"does not define ({sorted(assigned)})")
    return found


SUMMARY_HEADING = re.compile(r"^#+ .*\b(summary|headline)", re.I | re.M)
MEASURED_FIGURE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?(?:\s*[–-]\s*\d+(?:\.\d+)?)?\s*"
                             r"(?:×|%|ms\b|µs\b|s\b(?![-\w])|GB/s|MB/s)")
CITED = re.compile(r"et al\.?|\((?:[^()]*\s)?(?:19|20)\d\d\)|parlab bench[^\n]*(?:paced|A100|H100|V100|raw)",
                   re.I)


def typed_measurements(nb: dict, name: str = "notebook") -> list[str]:
    """Figures with a measurement's unit typed into a summary's markdown (see the module doc)."""
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        text = _source(cell)
        if cell["cell_type"] != "markdown" or not SUMMARY_HEADING.search(text):
            continue
        for line in text.splitlines():
            prose = re.sub(r"\$\$.*?\$\$|\$[^$]*\$|`[^`]*`", " ", line)  # math and code are not claims
            if CITED.search(line):
                continue
            for figure in MEASURED_FIGURE.finditer(prose):
                found.append(f"{name} cell {i}: summary markdown types a measured figure "
                             f"{figure.group(0).strip()!r}: print it from this run with its verdict, "
                             "write a closed form as math, or cite its source")
    return found


def check(paths: list[pathlib.Path]) -> list[str]:
    found = []
    for path in paths:
        nb = json.loads(path.read_text())
        found += problems(nb, path.name) + typed_measurements(nb, path.name)
    return found


def main(argv: list[str] | None = None) -> int:
    found = check([pathlib.Path(a) for a in (sys.argv[1:] if argv is None else argv)])
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
