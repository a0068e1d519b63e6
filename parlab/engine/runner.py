"""`parlab.run`: the one entry point that notebooks, tests and the CLI share.

    r = parlab.run("ddp-naive", world_size=4, model="gpt", steps=5, seed=0, link=None, **options)

A scheme is a worker function registered with `@register(...)` (`parlab.engine.registry`). It
runs on every rank with a `RankContext` (rank, world `Comm`, ledger, timeline, `RunConfig`) and
returns `parlab.engine.loop.train(ctx, strategy)`: a `RankResult` (this rank's loss shares,
state, measured memory, step clock). The parent sums the loss shares, assembles the full state
and returns a `RunResult`. Everything (scheme, options, world size, predicted memory) is
validated before a process starts, with a ValueError naming the bad value; a run that diverges
stops naming the step, rank and tensor unless `on_nonfinite="record"`.

Here: the worker's side (`RankContext`) and `run`; the configuration and its checks are
`parlab.engine.run_config`, the result `parlab.engine.run_result`. The contract in full:
docs/engine.md, `parlab.engine.runner`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from parlab.core import pacer as pacers
from parlab.core import precision, shapes, speeds
from parlab.core.launch import launch
from parlab.core.rank_process import report_progress
from parlab.core.rendezvous import under_torchrun
from parlab.engine.registry import (  # noqa: F401  (re-exported: schemes import register here)
    Scheme,
    SchemeInfo,
    chapter_packages,
    get_scheme,
    register,
    scheme_modules,
    schemes,
)
from parlab.engine.run_config import RunConfig, make_config
from parlab.engine.run_result import RunResult


# ----------------------------------------------------------------------------- in each rank
@dataclass
class RankContext:
    """What a scheme's worker gets on its rank."""

    rank: int
    world_size: int
    cfg: RunConfig
    comm: Any  # parlab.core.comm.Comm on the world group
    ledger: Any
    timeline: Any

    def span(self, name: str, kind: str = "compute", **args):
        """A span on this rank's timeline; a compute span lasts 1/speed as long on a slow rank
        (`speeds=`, parlab.core.speeds); on a paced clock the timeline's pacer keeps its time,
        speed included (parlab.core.clock)."""
        if self.timeline.pacer is not None:
            return self.timeline.span(name, kind, **args)
        return speeds.span(self.timeline, name, kind, speeds.speed_of(self.cfg, self.rank), **args)

    def step(self, step: int):
        """Label this step's communication and report progress to the parent."""
        report_progress(step, self.cfg.steps)
        return self.ledger.label(step=step)


def _rank_main(rank: int, world_size: int, cfg: RunConfig, module: str | None = None):
    """One rank of `run`. `module`: where the scheme's worker is defined, imported first, so a
    scheme registered outside parlab (`parlab.register` in the user's own module) exists in a rank
    started by the forkserver, which imported only parlab."""
    import importlib

    from parlab.core.comm import Comm, Ledger
    from parlab.core.trace import Timeline
    from parlab.engine.loop import RankResult

    if module is not None:
        importlib.import_module(module)
    pacer = (pacers.Pacer(cfg.clock, speeds.speed_of(cfg, rank)) if cfg.clock.paced else None)
    ledger, timeline = Ledger(rank), Timeline(rank, pacer)
    comm = Comm(None, ledger=ledger, timeline=timeline, link=cfg.link)
    ctx = RankContext(rank, world_size, cfg, comm, ledger, timeline)
    if cfg.shapes_only:  # fake tensors: the scheme's own code, no numbers (parlab.core.shapes)
        with shapes.shapes():
            out = get_scheme(cfg.scheme).worker(ctx)
        out.losses, out.state, out.extras, out.nonfinite = None, None, {}, []
    else:
        out = get_scheme(cfg.scheme).worker(ctx)
    comm.close()
    if not isinstance(out, RankResult):
        raise TypeError(f"scheme {cfg.scheme!r} returned {type(out).__name__}, not a RankResult "
                        "(return parlab.engine.loop.train(ctx, strategy))")
    if pacer is not None:
        out.pace = pacer.stats()
    report_progress(cfg.steps, cfg.steps)
    return out, ledger.records, timeline.records()


def _default_assemble(outputs: list, cfg: RunConfig) -> dict:
    for out in outputs:
        if out.state is not None:
            return out.state
    return {}


def _warn_skips(outputs: list, cfg: RunConfig) -> None:
    """fp16-mixed: warn when SKIP_WARN or more updates in a row were skipped (gradient overflow):
    the loss scale was far too large, or the run is diverging."""
    skipped = list(outputs[0].skipped) if outputs else []
    length, first = precision.longest_skip_run(skipped)
    if length >= precision.SKIP_WARN:
        scales = list(outputs[0].loss_scales)
        warnings.warn(f"fp16-mixed: {length} steps in a row skipped on gradient overflow (steps "
                      f"{first}..{first + length - 1} of {cfg.steps}, loss scale "
                      f"{scales[first]:g} → {scales[first + length - 1]:g}): those steps did not "
                      "train", RuntimeWarning, stacklevel=3)


def run(scheme: str, world_size: int = 1, model: str = "gpt", steps: int = 5, seed: int = 0,
        link=None, progress: Callable[[int, int], None] | None = None, **options) -> RunResult:
    """Train `model` for `steps` steps with `scheme` on `world_size` ranks; see the module doc."""
    cfg = make_config(scheme, world_size, model, steps, seed, link, **options)
    spec = get_scheme(scheme)
    # what the run must hold alone (a save_dir), taken before spawn; under torchrun every worker
    # runs this line, so there the scheme's rank 0 takes it instead
    held = spec.hold(cfg) if spec.hold is not None and not under_torchrun() else nullcontext()
    with held:
        t0 = time.perf_counter()
        returned = launch(_rank_main, world_size, cfg, spec.worker.__module__,
                          timeout=cfg.timeout, link=cfg.link, start_method=cfg.start_method,
                          progress=progress)
        wall = time.perf_counter() - t0
    outputs = [out for out, _, _ in returned]
    losses, state = None, None  # shapes-only: no numbers were computed
    if not cfg.shapes_only:
        losses = [0.0] * steps
        for out in outputs:
            for i, value in enumerate(out.losses or []):
                losses[i] += value
        state = (spec.assemble or _default_assemble)(outputs, cfg)
    ledger = [record for _, records, _ in returned for record in records]
    from parlab.core.trace import normalize
    from parlab.engine.loop import step_times
    timeline = normalize([event for _, _, events in returned for event in events])
    memory = [out.memory for out in outputs]
    _warn_skips(outputs, cfg)
    return RunResult(losses, state, ledger, timeline, memory, wall, cfg,
                     step_times([out.step_marks for out in outputs]), outputs)
