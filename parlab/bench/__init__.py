"""Benchmarks: `python -m parlab bench NAME [args]` runs `parlab.bench.NAME.main(args)`.

Every benchmark measures in one run what it compares (ratios measured side by side on this
noisy shared machine), prints a table, and can save the raw numbers and a plot.
"""

import importlib
import pkgutil


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__))


def run(name: str, argv: list[str]) -> int:
    if name not in available():
        raise SystemExit(f"unknown benchmark {name!r}; available: {', '.join(available())}")
    return importlib.import_module(f"parlab.bench.{name}").main(argv) or 0
