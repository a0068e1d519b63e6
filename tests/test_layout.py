"""The package layout is a rule, not a habit: one folder per chapter, and imports that only go
down the layers (CONTRIBUTING.md, "Layout").

    core (chapter 00, the runtime) ← models ← engine ← a chapter's building blocks
        ← its schemes (`schemes.py`, `schemes_*.py`, `torch_*.py`) ← its explore / exercises / bench

A chapter may import another chapter's building blocks, never its schemes, explore or bench; no
import cycles anywhere; building blocks never import matplotlib (plots live in explore, `viz`).
The checkers are tested on small graphs that break each rule, so a checker that cannot fail
would fail here first.
"""

from __future__ import annotations

import ast
import pathlib
import re

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
    if len(parts) == 1 or parts[1] in ("__main__", "viz", "widgets", "exercises",
                                        "notebook_parameters"):
        return "api" if len(parts) == 1 or parts[1] == "__main__" else "explore"
    top, leaf = parts[1], parts[-1]
    if top in ("engine", "models"):
        return top
    if len(parts) == 2:  # a chapter package's __init__: documentation only
        return "blocks" if top != "core" else "core"
    if parts[2] == "explore" or leaf in ("bench", "draw", "exercises"):  # presentation
        return "explore"  # the chapter's `explore` package: its __init__ and one module per part
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
    foreign = layer_violations({"parlab.zero.zero_engine": {"parlab.data_parallel.explore"}})
    assert foreign and "upward" in foreign[0]
    sideways = layer_violations({"parlab.zero.schemes": {"parlab.data_parallel.schemes"}})
    assert sideways and "another chapter's schemes" in sideways[0]
    assert layer_violations({"parlab.zero.schemes": {"parlab.data_parallel.sync"}}) == []
    part = layer_violations({"parlab.zero.shard": {"parlab.zero.explore.summary"}})
    assert part and "upward" in part[0]  # a part of `explore` is presentation, as explore is


# ----------------------------------------------------------------------------- the package obeys
def test_no_import_goes_up_the_layers_or_into_another_chapters_schemes():
    assert layer_violations(import_graph()) == []


def chapter_order() -> dict[str, int]:
    """{chapter folder: its notebook's number}, read from notebooks/NN_<folder>.ipynb (00: core)."""
    order = {}
    for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"):
        number, slug = path.stem.split("_", 1)
        order["core" if number == "00" else slug] = int(number)
    return order


def later_chapter_imports(graph: dict[str, set[str]], order: dict[str, int]) -> list[str]:
    """Each import of a later chapter (by notebook number) by an earlier one's module: a chapter
    reads with only `core`, `engine`, `models` and the chapters before it; a later chapter extends
    an earlier one by registering with it (issue 48)."""
    problems = []
    for module, targets in sorted(graph.items()):
        mine = chapter_of(module)
        for target in sorted(targets):
            theirs = chapter_of(target)
            if mine in order and theirs in order and order[theirs] > order[mine]:
                problems.append(f"{module} (chapter {order[mine]:02d}) imports {target} "
                                f"(chapter {order[theirs]:02d})")
    return problems


def test_later_chapter_imports_checker_catches_one():
    order = {"core": 0, "data_parallel": 1, "compression": 8}
    graph = {"parlab.data_parallel.apply": {"parlab.compression.sync", "parlab.core.comm"},
             "parlab.compression.sync": {"parlab.data_parallel.flat"}}
    assert later_chapter_imports(graph, order) == [
        "parlab.data_parallel.apply (chapter 01) imports parlab.compression.sync (chapter 08)"]


def test_no_chapter_imports_a_later_one():
    assert later_chapter_imports(import_graph(), chapter_order()) == []


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_one_folder_per_chapter_and_no_flat_modules():
    flat = [p.name for p in PACKAGE.glob("*.py") if p.name.startswith(FLAT_PREFIXES)]
    assert flat == [], f"chapter modules belong in their chapter's folder: {flat}"
    assert [g for g in GONE if (PACKAGE / g).exists()] == []
    # a chapter's explore splits only into a package, one module per notebook part (issue 33)
    flat_parts = sorted(str(p.relative_to(ROOT)) for p in PACKAGE.glob("*/explore_*.py"))
    assert flat_parts == [], f"a part of explore is explore/<part>.py: {flat_parts}"
    both = sorted(p.parent.name for p in PACKAGE.glob("*/explore.py") if (p.parent / "explore").is_dir())
    assert both == [], f"explore.py beside an explore/ package: {both}"
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


# ----------------------------------------------------------------------------- exercises
# CONTRIBUTING.md, "Layout": a chapter's notebook exercises live in one module, `exercises.py`;
# `explore` (and its parts) holds what the notebook runs, never an exercise or its check.
def notebook_has_exercises(notebook: dict) -> bool:
    """A markdown heading that names exercises ('## Exercises', '## 12. Summary and exercises')."""
    return any(line.startswith("#") and "exercise" in line.lower()
               for cell in notebook["cells"] if cell["cell_type"] == "markdown"
               for line in "".join(cell["source"]).splitlines())


def exercise_definitions(source: str) -> list[str]:
    """What makes a module hold exercises: an import of `parlab.exercises`, a call of `Exercise`,
    a function that takes the reader's `answer`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "parlab.exercises":
            found.append((node.lineno, "imports parlab.exercises"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "Exercise"):
            found.append((node.lineno, "Exercise(...)"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "answer" in [
                a.arg for a in node.args.args + node.args.kwonlyargs]:
            found.append((node.lineno, f"{node.name}(answer, ...)"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def exercise_problems(chapters: dict[str, tuple[bool, dict[str, str]]]) -> list[str]:
    """{chapter folder: (its notebook has exercises, {file: source} of its `exercises.py`, its
    `explore.py` or the modules of its `explore/` package)} -> a chapter with exercises but no
    `exercises.py`, and each exercise defined in explore code."""
    problems = []
    for folder, (has_exercises, files) in sorted(chapters.items()):
        if has_exercises and "exercises.py" not in files:
            problems.append(f"parlab/{folder}/: the notebook has exercises, parlab/{folder}/ no exercises.py")
        problems += [f"parlab/{folder}/{name}: {what} (exercises belong in exercises.py)"
                     for name, source in sorted(files.items()) if name.startswith("explore")
                     for what in exercise_definitions(source)]
    return problems


def test_the_exercise_checker_catches_a_missing_module_and_an_exercise_in_explore():
    explore = ("from parlab.exercises import Exercise, numeric\n"
               "EXERCISES = [Exercise('bytes', '?', numeric(1.0))]\n"
               "def check_crossover(answer, ratio=0.01):\n    return answer == 3\n"
               "def check_all(world_size, steps=3):\n    return {}\n")
    assert exercise_problems({"zero": (True, {"explore.py": explore}),
                              "serving": (True, {"exercises.py": explore, "explore/edge.py": ""}),
                              "core": (False, {"explore.py": ""})}) == [
        "parlab/zero/: the notebook has exercises, parlab/zero/ no exercises.py",
        "parlab/zero/explore.py: line 1: imports parlab.exercises (exercises belong in exercises.py)",
        "parlab/zero/explore.py: line 2: Exercise(...) (exercises belong in exercises.py)",
        "parlab/zero/explore.py: line 3: check_crossover(answer, ...) (exercises belong in exercises.py)"]
    markdown = {"cells": [{"cell_type": "markdown", "source": ["# Title\n", "## 12. Summary and exercises"]}]}
    assert notebook_has_exercises(markdown)
    assert not notebook_has_exercises({"cells": [{"cell_type": "code", "source": ["# exercises"]}]})


def test_every_chapter_with_exercises_has_exercises_py_and_explore_defines_none():
    import json

    chapters = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        number, slug = path.stem.split("_", 1)
        folder = PACKAGE / ("core" if number == "00" else slug)
        files = {str(p.relative_to(folder)): p.read_text() for p in
                 [*folder.glob("explore.py"), *folder.glob("explore/**/*.py"), *folder.glob("exercises.py")]}
        chapters[folder.name] = (notebook_has_exercises(json.loads(path.read_text())), files)
    assert exercise_problems(chapters) == []


# ----------------------------------------------------------------------------- one name, one thing
# CONTRIBUTING.md, "Names": each of these names was once defined in two modules with two meanings
# (two `Plan`s, two `Prediction`s, two `block_numels`, a second `train` and `single`); now one
# module of the package defines each, so a reader who greps a name finds the one thing it means.
ONE_DEFINITION = ("Plan", "PlacementPlan", "PipelinePlan", "Prediction", "PlanPrediction",
                  "block_numels", "block_tensor_numels", "block_dense_expert_numels", "Boundary",
                  "LocalBoundary", "ZeroEngine", "train", "train_stage", "train_grouped", "single",
                  # the one tensor-parallel model: apply_tp and the parts it plugs in (issue 33)
                  "apply_tp", "ParallelAttention", "ParallelMLP", "ColumnParallelLinear",
                  "RowParallelLinear")
PACKAGES = ("core", "engine", "models")  # no module below them is named like one of them


def top_level_definitions(path: pathlib.Path) -> set[str]:
    return {node.name for node in ast.parse(path.read_text()).body
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}


def name_clashes(definitions: dict[str, set[str]], names=ONE_DEFINITION) -> list[str]:
    """'name: module, module' for each of `names` that two modules define at top level."""
    where: dict[str, list[str]] = {}
    for module, defined in sorted(definitions.items()):
        for name in sorted(defined & set(names)):
            where.setdefault(name, []).append(module)
    return [f"{name}: {', '.join(modules)}" for name, modules in where.items() if len(modules) > 1]


def package_named_modules(modules, packages=PACKAGES) -> list[str]:
    """Modules below the top level named like a top-level package (`parlab.zero.engine` beside
    `parlab.engine` reads as the training engine)."""
    return sorted(m for m in modules if m.count(".") >= 2 and m.rpartition(".")[2] in packages)


def notebook_aliases(path: pathlib.Path) -> list[tuple[str, str]]:
    """(imported parlab name, alias) of every aliased import in the notebook's code cells."""
    import json

    found = []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        source = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("parlab"):
                found += [(f"{node.module}.{a.name}", a.asname) for a in node.names if a.asname]
            elif isinstance(node, ast.Import):
                found += [(a.name, a.asname) for a in node.names
                          if a.asname and a.name.startswith("parlab")]
    return found


def alias_problems(aliases: dict[str, list[tuple[str, str]]]) -> list[str]:
    """An alias says which module it is: `explore` as `ex`, its part `explore.<part>` as
    `ex_<part>`, any other name as itself or ending in `_<name>` (`dp_sync`, `tp_layers`), never
    starting `ex_`; and one alias means one module name in every notebook (`ee` cannot be
    `explore.eager` in one, `explore.edge` in another)."""
    problems, meaning = [], {}
    for notebook, pairs in sorted(aliases.items()):
        for name, alias in pairs:
            package, _, leaf = name.rpartition(".")
            if package.rpartition(".")[2] == "explore":  # a part: `parlab.x.explore.<part>`
                leaf = "explore." + leaf
            if leaf == "explore":
                honest = alias == "ex"
            elif leaf.startswith("explore."):
                honest = alias == "ex_" + leaf.removeprefix("explore.")
            else:  # `ex_` says explore: `exercises` is `exercises`, never `ex_exercises`
                honest = (alias == leaf or alias.endswith("_" + leaf)) and not alias.startswith("ex_")
            if not honest:
                problems.append(f"{notebook}: {leaf} as {alias}")
            first = meaning.setdefault(alias, (leaf, notebook))
            if first[0] != leaf:
                problems.append(f"{notebook}: {alias} is {leaf} here, {first[0]} in {first[1]}")
    return problems


def test_the_name_checkers_catch_a_second_definition_a_package_name_and_an_ambiguous_alias():
    assert name_clashes({"parlab.planner.plan": {"Plan", "enumerate_plans"},
                         "parlab.planner.placement": {"Plan", "evaluate"}}) == \
        ["Plan: parlab.planner.placement, parlab.planner.plan"]
    assert name_clashes({"parlab.a.x": {"evaluate"}, "parlab.a.y": {"evaluate"}}) == []
    assert package_named_modules(["parlab.engine", "parlab.engine.loop", "parlab.zero.engine",
                                  "parlab.zero.zero_engine", "parlab.pipeline.models"]) == \
        ["parlab.pipeline.models", "parlab.zero.engine"]
    assert alias_problems({"01": [("parlab.data_parallel.sync", "dp_loop")]}) == ["01: sync as dp_loop"]
    assert alias_problems({"13": [("parlab.planner.exercises", "ex_exercises")]}) == \
        ["13: exercises as ex_exercises"]
    assert alias_problems({"04": [("parlab.pipeline.explore.eager", "ee")],
                           "12": [("parlab.serving.explore.edge", "ee")]}) == \
        ["04: explore.eager as ee", "12: explore.edge as ee",
         "12: ee is explore.edge here, explore.eager in 04"]
    assert alias_problems({"01": [("parlab.data_parallel.sync", "dp_sync"),
                                  ("parlab.data_parallel.explore", "ex")],
                           "09": [("parlab.asynchrony.explore.dualbatch", "ex_dualbatch"),
                                  ("parlab.asynchrony.explore", "ex")]}) == []


def test_each_concept_name_has_one_definition():
    definitions = {module_name(p): top_level_definitions(p) for p in PACKAGE.rglob("*.py")}
    assert name_clashes(definitions) == []


def test_no_module_is_named_like_a_top_level_package():
    assert package_named_modules(module_name(p) for p in PACKAGE.rglob("*.py")) == []


def test_notebook_aliases_say_which_module_they_are():
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert alias_problems({p.stem: notebook_aliases(p) for p in notebooks}) == []


# ----------------------------------------------------------------------------- one byte model
# CONTRIBUTING.md, "One byte model": a chapter's closed forms live in its `cost.py`, which only
# computes (bytes, memory, time) and launches nothing; a scheme's cost, colour or stage is data
# on its registration (`register(..., cost=)`) or on its own objects, never a branch on its
# registered name: adding a scheme never means editing an if-chain or a table keyed by names.
LAUNCHERS = ("parlab.engine.runner", "parlab.core.launch", "parlab.run", "multiprocessing")
# Scheme names that are also the mesh's dimension names (`parlab.core.mesh`): `dim == "pp"` and
# `{"tp": 2}` name a dimension or a degree, and the checker cannot tell them from a scheme.
MESH_DIMS = ("dp", "tp", "pp", "cp", "ep")
# The reference and the baseline every chapter measures against: explore and bench code may pick
# their runs by name to take ratios against them (cost code and building blocks never do).
REFERENCES = ("single", "ddp-naive")
# (file, scheme name): why that file may still compare with or key a table by that name.
SCHEME_NAMES_ALLOWED = {
    ("parlab/engine/bench_regimes.py", "ddp-naive"): "the baseline's own per-message overhead, noted",
    ("parlab/engine/many_ranks.py", "single"): "the reference is not scaled",
    ("parlab/planner/scaling/step_model.py", "ddp-overlap"):
        "the scaling model's four dimensions (dp = ddp-overlap, zero3, tp, pp) are named like them",
    ("parlab/planner/scaling/points.py", "zero3"):
        "the scaling model's four dimensions (dp = ddp-overlap, zero3, tp, pp) are named like them",
}


def launcher_imports(source: str) -> list[str]:
    """The launchers (`LAUNCHERS`) a module imports, or calls as `parlab.run`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "parlab"):
            names = [f"parlab.{node.attr}"]
        else:
            continue
        found |= {launcher for name in names for launcher in LAUNCHERS
                  if name == launcher or name.startswith(launcher + ".")}
    return sorted(found)


def cost_module_problems(chapters: dict[str, str | None]) -> list[str]:
    """{chapter: source of its cost.py, None when it has none} -> what breaks the rule."""
    problems = []
    for chapter, source in sorted(chapters.items()):
        if source is None:
            problems.append(f"parlab/{chapter}/ has no cost.py")
        else:
            problems += [f"parlab/{chapter}/cost.py imports {name}"
                         for name in launcher_imports(source)]
    return problems


def _strings(node) -> list[str]:
    elements = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def scheme_name_branches(source: str, names) -> list[tuple[int, str, str]]:
    """(line, scheme name, what) of each comparison with a registered scheme name (`==`, `!=`,
    `in`, also against a literal tuple, list or set of names) and each dict literal keyed only by
    scheme names whose values are data (no call): a table of colours, stages or cost functions,
    not a table of runs or of results."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                found += [(node.lineno, s, "comparison") for s in _strings(operand) if s in names]
        elif isinstance(node, ast.Dict) and node.keys:
            keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
            if all(k in names for k in keys) and not any(
                    isinstance(n, ast.Call) for v in node.values for n in ast.walk(v)):
                found += [(node.lineno, k, "table keyed by scheme names") for k in keys]
    return sorted(set(found))


def scheme_name_problems(sources: dict[str, str], names, allowed=None) -> list[str]:
    """{path relative to the repository: source} -> 'path:line: what' of each branch on a scheme
    name that no rule above allows, and each allowance that no longer matches anything."""
    allowed = SCHEME_NAMES_ALLOWED if allowed is None else allowed
    problems, used = [], set()
    for path, source in sorted(sources.items()):
        if path == "parlab/engine/registry.py":
            continue
        presentation = layer_of(module_name(ROOT / path)) == "explore"
        for line, name, what in scheme_name_branches(source, names):
            if name in MESH_DIMS or (presentation and name in REFERENCES):
                continue
            if (path, name) in allowed:
                used.add((path, name))
                continue
            problems.append(f"{path}:{line}: {what} on scheme {name!r}")
    problems += [f"{path}: allowed {name!r} but no longer compares it (remove the allowance)"
                 for path, name in sorted(set(allowed) - used)]
    return problems


def test_the_byte_model_checkers_catch_a_missing_cost_a_launch_and_a_scheme_name_branch():
    assert cost_module_problems({"zero": None, "core": "from parlab.core import comm\n"}) == \
        ["parlab/zero/ has no cost.py"]
    assert cost_module_problems({"data_parallel": "from parlab.core.launch import launch\n"}) == \
        ["parlab/data_parallel/cost.py imports parlab.core.launch"]
    assert launcher_imports("import parlab\n\ndef f():\n    return parlab.run('single')\n") == \
        ["parlab.run"]
    assert launcher_imports("import multiprocessing as mp\nfrom parlab.engine.runner import "
                            "schemes\n") == ["multiprocessing", "parlab.engine.runner"]
    assert launcher_imports("from parlab.engine.registry import schemes\n") == []
    source = ("def f(scheme, dim):\n"
              "    if scheme == 'topk':\n"
              "        return 1\n"
              "    return scheme in ('qsgd', 'other') or dim == 'pp'\n"
              "COLORS = {'topk': 'red', 'qsgd': 'blue'}\n"
              "RUNS = {'topk': run('topk')}\n"
              "ROW = {'topk': 1.0, 'speedup': 2.0}\n")
    names = {"topk", "qsgd", "pp"}
    assert scheme_name_branches(source, names) == [
        (2, "topk", "comparison"), (4, "pp", "comparison"), (4, "qsgd", "comparison"),
        (5, "qsgd", "table keyed by scheme names"), (5, "topk", "table keyed by scheme names")]
    blocks = scheme_name_problems({"parlab/x/cost.py": source}, names, allowed={})
    assert blocks == ["parlab/x/cost.py:2: comparison on scheme 'topk'",
                      "parlab/x/cost.py:4: comparison on scheme 'qsgd'",
                      "parlab/x/cost.py:5: table keyed by scheme names on scheme 'qsgd'",
                      "parlab/x/cost.py:5: table keyed by scheme names on scheme 'topk'"]
    reference = "def g(scheme):\n    return scheme == 'single'\n"
    assert scheme_name_problems({"parlab/x/explore.py": reference}, {"single"}, allowed={}) == []
    assert scheme_name_problems({"parlab/x/cost.py": reference}, {"single"}, allowed={}) == \
        ["parlab/x/cost.py:2: comparison on scheme 'single'"]
    allowed = {("parlab/x/cost.py", "single"): "a reason", ("parlab/x/y.py", "topk"): "stale"}
    assert scheme_name_problems({"parlab/x/cost.py": reference}, {"single"}, allowed) == \
        ["parlab/x/y.py: allowed 'topk' but no longer compares it (remove the allowance)"]


def test_every_chapter_has_a_cost_module_that_launches_nothing():
    from parlab.engine.registry import chapter_packages

    chapters = {c: (PACKAGE / c / "cost.py").read_text() if (PACKAGE / c / "cost.py").exists()
                else None for c in chapter_packages()}
    assert cost_module_problems(chapters) == []


def test_no_branch_on_a_registered_scheme_name_outside_the_registry():
    import parlab

    names = set(parlab.schemes())
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in PACKAGE.rglob("*.py")}
    assert scheme_name_problems(sources, names) == []


# ----------------------------------------------------------------------------- one attention
HEAD_SPLIT = re.compile(r"\.view\([^()]*(\([^()]*\))?[^()]*\)\.(transpose|permute)\(")
ATTENTION_HOME = "parlab/models/gpt.py"  # multi_head: the one head split
ATTENDS = {"parlab/models/gpt.py", "parlab/context_parallel/ring_attention.py",
           "parlab/context_parallel/ring_recompute.py"}  # causal attention and its ring forms


def attention_definitions(sources: dict[str, str]) -> list[str]:
    """{path: source} -> where attention is written again: a head split (view to heads, then
    transpose / permute) outside models/gpt.py, or softmax scores q·kᵀ outside the attend
    functions (the model's `attention` and ring attention's blockwise forms)."""
    found = []
    for path, text in sources.items():
        for n, line in enumerate(text.splitlines(), 1):
            if HEAD_SPLIT.search(line) and path != ATTENTION_HOME:
                found.append(f"{path}:{n}: a head split (use parlab.models.gpt.multi_head)")
            if "k.transpose(-2, -1)" in line and path not in ATTENDS:
                found.append(f"{path}:{n}: attention scores (plug an `attend` into multi_head)")
    return found


def test_attention_checker_catches_a_copy():
    copy_ = {"parlab/x/layers.py": "q = q.view(B, T, nh, hs).transpose(1, 2)\n"
                                   "s = q @ k.transpose(-2, -1)\n",
             ATTENTION_HOME: "q = q.view(B, T, heads, head_dim).transpose(1, 2)\n"}
    assert len(attention_definitions(copy_)) == 2


def test_one_definition_of_attention():
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in PACKAGE.rglob("*.py")}
    assert attention_definitions(sources) == []


# ----------------------------------------------------------------------------- models as data
# A chapter's schemes never branch on the model's name (`cfg.model == "unet3d"`): what a model
# gives a chapter is an object registered where the model's stages live (the pipeline's
# `stages.StagedModel`, looked up with `staged_model(cfg.model)`).
def model_name_branches(source: str) -> list[int]:
    """Lines comparing a `.model` attribute with a string (`cfg.model == "unet3d"`)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = any(isinstance(s, ast.Attribute) and s.attr == "model" for s in sides)
            text = any(isinstance(s, ast.Constant) and isinstance(s.value, str)
                       or isinstance(s, (ast.Tuple, ast.List, ast.Set)) for s in sides)
            if named and text:
                lines.append(node.lineno)
    return sorted(set(lines))


def test_pipeline_schemes_do_not_branch_on_the_model_name():
    assert model_name_branches('if cfg.model == "unet3d":\n    pass\n'
                               'x = ctx.cfg.model in ("gpt", "mlp")\n') == [1, 3]
    assert model_name_branches("kind = staged_model(cfg.model)\n") == []
    found = {str(p.relative_to(ROOT)): model_name_branches(p.read_text())
             for p in sorted((PACKAGE / "pipeline").glob("schemes*.py"))}
    assert {path: lines for path, lines in found.items() if lines} == {}
