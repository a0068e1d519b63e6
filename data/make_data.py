"""Make the datasets in data/: run `python data/make_data.py` (deterministic; no network).

* tinytext.txt — ~120 KB of English prose: the documentation strings of a fixed list of Python
  standard-library modules (the Python Software Foundation License allows redistribution).
  The tiny GPT learns it character by character; its loss falls from ~4.3 (uniform over the
  vocabulary) towards ~2 within a few hundred steps.
* spirals.csv — 3 interleaved spirals in the plane (x, y, label), 3000 points with noise, seed 0.
  The MLP separates them; its loss falls from ~1.1 (ln 3) well below 0.5.
"""

import inspect
import math
import pathlib
import random

HERE = pathlib.Path(__file__).parent
MODULES = ["abc", "argparse", "bisect", "calendar", "collections", "contextlib", "copy", "csv",
           "dataclasses", "difflib", "enum", "fractions", "functools", "heapq", "inspect",
           "itertools", "json", "logging", "operator", "pathlib", "pickle", "queue", "random",
           "shutil", "statistics", "string", "textwrap", "threading", "typing", "unittest"]


def tiny_text(limit: int = 120_000) -> str:
    parts = []
    for name in MODULES:
        module = __import__(name)
        docs = [inspect.getdoc(module) or ""]
        for _, obj in sorted(vars(module).items()):
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == name:
                docs.append(inspect.getdoc(obj) or "")
        parts.extend(d for d in docs if len(d) > 80)
    text = "\n\n".join(parts)
    text = "".join(c for c in text if c.isascii() and (c.isprintable() or c == "\n"))
    return text[:limit]


def spirals(points: int = 3000, classes: int = 3, seed: int = 0) -> list[tuple[float, float, int]]:
    rng = random.Random(seed)
    rows = []
    for i in range(points):
        label = i % classes
        r = rng.random()
        angle = 4.0 * r + label * 2 * math.pi / classes
        x = r * math.cos(angle) + rng.gauss(0, 0.05)
        y = r * math.sin(angle) + rng.gauss(0, 0.05)
        rows.append((x, y, label))
    rng.shuffle(rows)
    return rows


if __name__ == "__main__":
    (HERE / "tinytext.txt").write_text(tiny_text())
    with open(HERE / "spirals.csv", "w") as f:
        f.write("x,y,label\n")
        for x, y, label in spirals():
            f.write(f"{x:.6f},{y:.6f},{label}\n")
    print("wrote", HERE / "tinytext.txt", "and", HERE / "spirals.csv")
