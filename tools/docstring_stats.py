"""How much of the package is docstring: per module, its module docstring's length and the share
of docstring lines among non-blank lines (issue 48 item 6).

    python tools/docstring_stats.py [--top N] [ROOT]     # ROOT defaults to parlab/

A docstring line is a non-blank source line inside a module, class or function docstring (found
with `ast`, counted from the string literal's first to last source line). The share is
docstring lines / non-blank lines; for comparison: picotron ~9%, torchtitan ~13%, nanoGPT ~5%.
Long derivations belong in docs/<chapter>.md; a module docstring names the paper and the idea.
"""

from __future__ import annotations

import argparse
import ast
import pathlib
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_MODULE_DOC_LINES = 30


@dataclass(frozen=True)
class ModuleStats:
    path: str
    nonblank: int  # non-blank source lines
    doc: int  # non-blank lines inside module/class/function docstrings
    module_doc: int  # source lines of the module docstring (0 if none)

    @property
    def share(self) -> float:
        return self.doc / self.nonblank if self.nonblank else 0.0


def _docstring_nodes(tree: ast.Module):
    """The string-constant expression that opens each module, class and function body."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                yield node, body[0]


def stats_of_source(source: str, path: str = "<string>") -> ModuleStats:
    """Counts for one module's source text."""
    lines = source.splitlines()
    tree = ast.parse(source)
    doc_lines: set[int] = set()
    module_doc = 0
    for owner, expr in _docstring_nodes(tree):
        span = range(expr.lineno, expr.end_lineno + 1)
        doc_lines.update(n for n in span if lines[n - 1].strip())
        if isinstance(owner, ast.Module):
            module_doc = len(span)
    nonblank = sum(1 for line in lines if line.strip())
    return ModuleStats(path, nonblank, len(doc_lines), module_doc)


def collect(root: pathlib.Path) -> list[ModuleStats]:
    """Stats of every .py file under root, paths relative to root's parent."""
    return [stats_of_source(p.read_text(), str(p.relative_to(root.parent)))
            for p in sorted(root.rglob("*.py"))]


def overall_share(stats: list[ModuleStats]) -> float:
    nonblank = sum(s.nonblank for s in stats)
    return sum(s.doc for s in stats) / nonblank if nonblank else 0.0


def too_long(stats: list[ModuleStats], limit: int = MAX_MODULE_DOC_LINES) -> list[ModuleStats]:
    """Modules whose module docstring runs over `limit` source lines, longest first."""
    return sorted((s for s in stats if s.module_doc > limit), key=lambda s: -s.module_doc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=str(ROOT / "parlab"))
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    stats = collect(pathlib.Path(args.root).resolve())
    print(f"{len(stats)} modules, {sum(s.nonblank for s in stats)} non-blank lines, "
          f"{sum(s.doc for s in stats)} docstring lines: share {overall_share(stats):.1%}")
    longest = max(stats, key=lambda s: s.module_doc, default=None)
    if longest:
        print(f"longest module docstring: {longest.path} ({longest.module_doc} lines)")
    over = too_long(stats)
    print(f"module docstrings over {MAX_MODULE_DOC_LINES} lines: {len(over)}")
    for s in over:
        print(f"  {s.module_doc:4d}  {s.path}")
    print(f"worst {args.top} by docstring share (modules with >= 40 non-blank lines):")
    big = [s for s in stats if s.nonblank >= 40]
    for s in sorted(big, key=lambda s: -s.share)[:args.top]:
        print(f"  {s.share:6.1%}  {s.doc:4d}/{s.nonblank:<5d} module doc {s.module_doc:3d}  {s.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
