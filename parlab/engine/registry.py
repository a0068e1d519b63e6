"""The scheme registry: `@register` a worker as a named scheme; `schemes()` lists them all.

Each chapter's `schemes.py`, `schemes_*.py` and `torch_*.py` register their workers when imported;
`get_scheme` and `schemes` import every such module first (`scheme_modules`), so a chapter's
schemes exist as soon as anyone asks, without a central list to keep. `parlab.engine.runner`
validates a configuration against the registered options and runs it.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field

from parlab.core import checks, precision


@dataclass
class Scheme:
    name: str
    summary: str
    exact: bool
    worker: Callable
    options: dict = field(default_factory=dict)
    validate: Callable | None = None
    assemble: Callable | None = None
    models: tuple = ("gpt", "mlp")
    cost: Callable | None = None
    precisions: tuple = ("fp32",)
    shapes: bool | Callable = False  # runs shapes-only (parlab.core.shapes): tested equal to its
    # real run; a callable(cfg) -> why a configuration cannot (None: it can)
    hold: Callable | None = None
    modelled_as: str | None = None  # the scheme whose closed-form step this one's is modelled as
    torch_collectives: bool = False  # its collectives are PyTorch's own: no link delays them
    baseline: str | None = None  # the scheme its chapter measures it against
    forms: dict = field(default_factory=dict)  # {name: closed form} its chapter's tables read
    sequence_parallel: bool = False  # activations sharded along the sequence between tp regions


@dataclass(frozen=True)
class SchemeInfo:
    summary: str
    exact: bool
    options: dict  # {name: default}
    cost: Callable | None = None  # cost(cfg) -> Prediction: the scheme's closed forms
    precisions: tuple = tuple(precision.PRECISIONS)  # the precision= values it honours


_REGISTRY: dict[str, Scheme] = {}
_DISCOVERED = False


def register(name: str, *, summary: str, exact: bool, options: dict | None = None,
             validate: Callable | None = None, assemble: Callable | None = None,
             models: tuple = ("gpt", "mlp"), cost: Callable | None = None,
             precisions: tuple = ("fp32",), shapes: bool | Callable = False,
             hold: Callable | None = None, modelled_as: str | None = None,
             torch_collectives: bool = False, baseline: str | None = None,
             forms: dict | None = None, sequence_parallel: bool = False):
    """Decorator: register `worker(ctx) -> RankResult` as scheme `name`.

    options: the scheme's own keyword options: typed (`parlab.core.checks.Int(1, min=1)`, checked
    by `make_config`) or plain defaults. validate(cfg): raise ValueError for a configuration the
    scheme cannot run (what depends on several values). assemble(outputs, cfg): full state from
    the ranks' results (for sharded schemes). cost(cfg) -> `parlab.engine.prediction.Prediction`:
    what the chapter's closed forms predict for this configuration (bytes each rank sends), so a
    planner can ask every scheme. precisions: the `precision=` values the scheme honours: the
    loop's mixed precision (`parlab.core.precision`) applies to any Strategy, but a scheme
    declares it only once a test holds it against `single` of that precision (fp16 also needs
    its loss through `model.loss`, where the loss scale is applied); the others refuse it.
    shapes: the scheme runs shapes-only (`shapes_only=True`, `parlab.core.shapes`), declared once
    a test holds its shapes-only run equal to its real paced run (ledger, step times, memory);
    a callable(cfg) returns why a configuration of the scheme cannot (None where it can).
    hold(cfg): a context manager `parlab.run` holds in the launching process from before the
    ranks start until they end (ZeRO: the save_dir's run lock, `parlab.zero.run_lock.held`), so
    that of two runs started at once the second is refused before spawn, not inside a rank.
    Facts its chapter's tables read instead of its name: modelled_as (a PyTorch reference whose
    step the closed forms model as that scheme's), torch_collectives (PyTorch's own gloo calls,
    not delayed by an emulated link nor paced), baseline (the scheme it is measured against),
    forms ({name: closed form}, e.g. the attention bytes of context parallelism's method),
    sequence_parallel (tensor parallelism's activations sharded along the sequence outside its
    regions, Korthikanti et al. 2022).
    """
    def decorate(worker):
        _REGISTRY[name] = Scheme(name, summary, exact, worker, dict(options or {}), validate,
                                 assemble, tuple(models), cost, tuple(precisions), shapes, hold,
                                 modelled_as, torch_collectives, baseline, dict(forms or {}),
                                 sequence_parallel)
        return worker
    return decorate


def chapter_packages() -> list[str]:
    """Every chapter's package (`parlab/<slug>/`), chapter 00's `core` first."""
    import parlab
    return sorted((info.name for info in pkgutil.iter_modules(parlab.__path__) if info.ispkg
                   and info.name not in ("engine", "models")), key=lambda n: (n != "core", n))


def scheme_modules() -> list[str]:
    """The modules that register schemes: the reference, and each chapter's `schemes` (or
    `schemes_*`, where one file would grow too long) and `torch_*` baselines, in the chapter's
    folder or one of its subpackages (chapter 13's `planner.placement.schemes`)."""
    found = ["parlab.engine.reference"]
    for package in chapter_packages():
        path = importlib.import_module(f"parlab.{package}").__path__
        folders = [(f"parlab.{package}", path)] + [
            (f"parlab.{package}.{info.name}", [os.path.join(path[0], info.name)])
            for info in pkgutil.iter_modules(path) if info.ispkg and info.name != "explore"]
        found += [f"{prefix}.{info.name}" for prefix, where in folders
                  for info in pkgutil.iter_modules(where)
                  if info.name == "schemes" or info.name.startswith(("schemes_", "torch_"))]
    return found


def _discover() -> None:
    global _DISCOVERED
    if not _DISCOVERED:
        for module in scheme_modules():
            importlib.import_module(module)
        _DISCOVERED = True


def get_scheme(name: str) -> Scheme:
    _discover()
    if name not in _REGISTRY:
        raise ValueError(f"scheme={name!r} is unknown; registered: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def schemes() -> dict[str, SchemeInfo]:
    """{name: SchemeInfo(summary, exact, options)} of every registered scheme."""
    _discover()
    return {n: SchemeInfo(s.summary, s.exact, checks.defaults(s.options), s.cost, s.precisions)
            for n, s in sorted(_REGISTRY.items())}
