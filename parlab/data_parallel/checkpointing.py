"""Checkpoint options of chapter 01's DDP schemes; chapter 02 registers what they do.

The checkpoints are ZeRO's (rank files of 1/N of each flat unit, a manifest with sha256, the run
lock, kill-during-save safety), readable by `torch.distributed.checkpoint`: chapter 02 writes
them (`parlab.zero.dp_checkpoint`, registered here by `register_checkpoints`), so this chapter
declares the options and calls the registered functions. Options as ZeRO's: save_dir,
save_every, resume, keep, allow_fresh_start, resume_from (fp32 only).
"""

from __future__ import annotations

from parlab.core.checks import Bool, Choice, Int

KEEP = 2  # checkpoints kept by default (ZeRO's `checkpoint.KEEP`; tests hold the two equal)
OPTIONS = {"save_dir": None, "save_every": Int(0, min=0),  # 0: never
           "resume": Choice(False, (False, True, "must")),
           "keep": Int(KEEP, min=1),
           "allow_fresh_start": Bool(False),
           "resume_from": None}  # a DCP checkpoint directory (parlab's or PyTorch's)
SAVER: dict = {}


def register_checkpoints(validate, hold, attach) -> None:
    """Chapter 02's checkpoints: `validate(cfg)` before spawn, `hold(cfg)` the run lock's context
    around the launch, `attach(ctx, strategy)` the strategy that resumes and saves."""
    SAVER.update(validate=validate, hold=hold, attach=attach)


def _saver():
    if not SAVER:
        raise ValueError("save_dir / resume_from: no checkpoint format is registered; import "
                         "parlab.zero.dp_checkpoint (chapter 02) first")
    return SAVER


def _wanted(cfg) -> bool:
    o = cfg.options
    return any(o.get(k) not in (None, False, 0) for k in ("save_dir", "resume", "resume_from"))


def validate(cfg) -> None:
    if _wanted(cfg) or SAVER:
        _saver()["validate"](cfg)


def hold(cfg):
    """The save_dir's run lock, held by `parlab.run` around the launch (as ZeRO's)."""
    from contextlib import nullcontext

    return _saver()["hold"](cfg) if SAVER else nullcontext()


def attach(ctx, strategy):
    """The strategy with the checkpoint options applied (unchanged without them)."""
    if not SAVER:
        if _wanted(ctx.cfg):
            _saver()
        return strategy
    return _saver()["attach"](ctx, strategy)
