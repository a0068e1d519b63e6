"""The package layout is a rule, not a habit: one folder per chapter, and imports that only go
down the layers (CONTRIBUTING.md, "Layout").

    core (chapter 00, the runtime) ← models ← engine ← a chapter's building blocks
        ← its schemes (`schemes.py`, `schemes_*.py`, `torch_*.py`) ← its explore / bench

A chapter may import another chapter's building blocks, never its schemes, explore or bench; no
import cycles anywhere; building blocks never import matplotlib (plots live in explore, `viz`).
The checkers are tested on small graphs that break each rule, so a checker that cannot fail
would fail here first.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "parlab"
LAYERS = {"core": 0, "models": 1, "engine": 2, "blocks": 3, "schemes": 4, "explore": 5, "api": 6}
FLAT_PREFIXES = ("dp_", "tp_", "zero_", "ring_")
GONE = ("trainers", "explore", "bench")  # top-level packages of the old layout


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def chapter_of(module: str) -> str | None:
    """The chapter folder a module belongs to ('core' for chapter 00), or None."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] not in ("engine", "models"):
        return parts[1]
    return None


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("__main__", "viz", "widgets", "exercises"):
        return "api" if len(parts) == 1 or parts[1] == "__main__" else "explore"
    top, leaf = parts[1], parts[-1]
    if top in ("engine", "models"):
        return top
    if len(parts) == 2:  # a chapter package's __init__: documentation only
        return "blocks" if top != "core" else "core"
    if leaf.startswith("explore") or leaf in ("bench", "draw"):  # presentation: may plot
        return "explore"
    if leaf == "schemes" or leaf.startswith(("schemes_", "torch_")):
        return "schemes"
    return "core" if top == "core" else "blocks"


def imports_of(path: pathlib.Path, known: set[str]) -> set[str]:
    """The parlab modules `path` imports (at module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name.startswith("parlab") and name != "parlab":
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(paths)
    return {m: imports_of(p, known) - {m} - _parents(m) for m, p in paths.items()}


def _parents(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in graph.items():
        mine = layer_of(module)
        for target in targets:
            theirs = layer_of(target)
            if LAYERS[theirs] > LAYERS[mine]:
                problems.append(f"{module} ({mine}) imports {target} ({theirs}): upward")
            elif (chapter_of(module) != chapter_of(target) and chapter_of(target) is not None
                  and theirs in ("schemes", "explore") and mine != "api"):
                problems.append(f"{module} imports another chapter's {theirs}: {target}")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(root):
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# ----------------------------------------------------------------------------- the checkers fail
def test_the_checkers_catch_a_cycle_an_upward_import_and_a_foreign_explore():
    assert cycles({"parlab.a.x": {"parlab.a.y"}, "parlab.a.y": {"parlab.a.z"},
                   "parlab.a.z": {"parlab.a.x"}}) == [["parlab.a.x", "parlab.a.y", "parlab.a.z"]]
    assert cycles({"parlab.a.x": {"parlab.a.y"}, "parlab.a.y": set()}) == []
    upward = layer_violations({"parlab.core.comm": {"parlab.engine.loop"}})
    assert upward and "upward" in upward[0]
    foreign = layer_violations({"parlab.zero.engine": {"parlab.data_parallel.explore"}})
    assert foreign and "upward" in foreign[0]
    sideways = layer_violations({"parlab.zero.schemes": {"parlab.data_parallel.schemes"}})
    assert sideways and "another chapter's schemes" in sideways[0]
    assert layer_violations({"parlab.zero.schemes": {"parlab.data_parallel.sync"}}) == []


# ----------------------------------------------------------------------------- the package obeys
def test_no_import_goes_up_the_layers_or_into_another_chapters_schemes():
    assert layer_violations(import_graph()) == []


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_one_folder_per_chapter_and_no_flat_modules():
    flat = [p.name for p in PACKAGE.glob("*.py") if p.name.startswith(FLAT_PREFIXES)]
    assert flat == [], f"chapter modules belong in their chapter's folder: {flat}"
    assert [g for g in GONE if (PACKAGE / g).exists()] == []
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for stem in notebooks:
        number, slug = stem.split("_", 1)
        folder = "core" if number == "00" else slug
        assert (PACKAGE / folder / "__init__.py").exists(), f"{stem}.ipynb has no parlab/{folder}/"
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text()))
        assert doc and "Reading order" in doc, f"parlab/{folder}/__init__.py: papers, reading order"


def test_building_blocks_do_not_plot():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        module = module_name(path)
        if LAYERS[layer_of(module)] <= LAYERS["schemes"] and "matplotlib" in path.read_text():
            offenders.append(module)
    assert offenders == []


def test_the_project_cites_papers_and_its_own_docs_not_outside_files():
    """The team's planning notes (facts, design, paper summaries) live outside the repository, so
    a reader cannot open them: code and notebooks cite the paper or a page of docs/ instead. The
    names are assembled here so that this test does not itself cite them."""
    outside = tuple(stem + ".md" for stem in ("FAC" + "TS", "DES" + "IGN", "pap" + "ers"))
    found = [f"{p.relative_to(ROOT)}: {name}" for p in list(PACKAGE.rglob("*.py")) +
             list((ROOT / "notebooks").glob("*.ipynb")) for name in outside
             if name in p.read_text()]
    assert found == []
