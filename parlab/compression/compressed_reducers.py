"""This chapter's compressors as gradient reducers, looked up by the name of their scheme.

`parlab.data_parallel.apply.apply_dp(..., compressor="topk")` (and the planner's
`Plan.dp_compressor`) name a compressor by the chapter-08 scheme that trains with it: `topk`,
`randomk`, `qsgd`, `signsgd` (a message per rank, all-gathered: `sync.CompressedReducer`) and
`powersgd` (two all-reduces of the factors: `powersgd.PowerSGDReducer`). The scheme's registered
closed form (`register(..., cost=)`, `parlab.compression.cost`) says which reducer it is and
builds its compressor object, and its registered options are the defaults — so a new compressor
is one more registration, not an edit here, and the bytes such a reducer sends are that closed
form's (`cost_of(name).step_bytes`).

`option_problems` holds the chapter's option checks (ratio, bits, rank, the flags), which its
schemes' `validate` and the planner's `Plan.problems` both call.
"""

from __future__ import annotations

from parlab.compression.cost import Gathered, PowerSGDCost, cost_of
from parlab.compression.powersgd import PowerSGDReducer
from parlab.compression.sync import CompressedReducer
from parlab.data_parallel.apply import register_compression

OPTIONS = ("ratio", "bits", "rank", "error_feedback", "warm_start")  # what a compressor may take


def _gathered(form, comm, params, options, seed, phase):
    return CompressedReducer(comm, params, form.compressor(**options),
                             options.get("error_feedback", False), seed=seed, phase=phase)


def _powersgd(form, comm, params, options, seed, phase):
    return PowerSGDReducer(comm, params, options["rank"], options["error_feedback"],
                           options["warm_start"], seed=seed, phase=phase)


REDUCER_OF_COST = {Gathered: _gathered, PowerSGDCost: _powersgd}  # closed form's type -> reducer


def compressors() -> tuple[str, ...]:
    """The registered schemes whose closed form is a compressor's (sorted): the valid names."""
    from parlab.engine.registry import schemes

    return tuple(name for name, info in schemes().items()
                 if type(info.cost) in REDUCER_OF_COST)


def check_compressor(name: str) -> None:
    """ValueError naming `name` and the choices unless it is one of `compressors()`."""
    choices = compressors()
    if name not in choices:
        raise ValueError(f"compressor={name!r} must be one of {choices}")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def option_problems(options: dict, prefix: str = "") -> list[str]:
    """Each bad value among the chapter's compressor options present in `options`, named
    (`prefix` + name: the planner's `dp_ratio`, ...)."""
    out = []
    o = options
    if "ratio" in o and not (_is_number(o["ratio"]) and 0 < o["ratio"] <= 1):
        out.append(f"{prefix}ratio={o['ratio']!r} must be a number in (0, 1]")
    if "bits" in o and not (_is_int(o["bits"]) and 2 <= o["bits"] <= 8):
        out.append(f"{prefix}bits={o['bits']!r} must be an int in [2, 8] (sign bit + level bits)")
    if "rank" in o and not (_is_int(o["rank"]) and o["rank"] >= 1):
        out.append(f"{prefix}rank={o['rank']!r} must be an int >= 1")
    for flag in ("error_feedback", "warm_start"):
        if flag in o and not isinstance(o[flag], bool):
            out.append(f"{prefix}{flag}={o[flag]!r} must be True or False")
    return out


def compressor_options(name: str, options: dict | None = None, prefix: str = "") -> dict:
    """The options compressor `name` runs with: its scheme's registered defaults, overridden by
    `options`; ValueError naming any option it does not take or any bad value."""
    from parlab.engine.registry import schemes

    check_compressor(name)
    defaults = schemes()[name].options
    options = dict(options or {})
    foreign = sorted(set(options) - set(defaults))
    if foreign:
        raise ValueError(f"{', '.join(f'{prefix}{k}={options[k]!r}' for k in foreign)}: not an "
                         f"option of compressor {name!r} (it takes "
                         f"{', '.join(prefix + k for k in sorted(defaults))})")
    merged = {**defaults, **options}
    problems = option_problems(merged, prefix)
    if problems:
        raise ValueError("; ".join(problems))
    return merged


def compressed_reducer(name: str, comm, params, options: dict | None = None, seed: int = 0,
                       phase: str | None = None):
    """The reducer of compressor `name` (a chapter-08 scheme) over `comm`, on `params`, with
    `options` over the scheme's defaults; `seed`: the run's (shared random draws)."""
    options = compressor_options(name, options)
    form = cost_of(name)
    return REDUCER_OF_COST[type(form)](form, comm, params, options, seed, phase).attach()


def step_bytes(name: str, shapes, n: int, sender: int = 0, step: int = 0, steps: int = 1,
               options: dict | None = None) -> dict[str, int]:
    """{op: bytes} rank `sender` of `n` sends in one step with compressor `name` on parameters of
    `shapes`: the scheme's registered closed form, at the options it runs with."""
    return cost_of(name).step_bytes(shapes, n, sender, step, steps,
                                    **compressor_options(name, options))


def step_messages(name: str, shapes, n: int, options: dict | None = None) -> list[tuple[str, int, int]]:
    """(op, elements, bytes per element) of every collective one step of compressor `name` issues
    on parameters of `shapes` over `n` ranks (the messages `step_bytes` counts)."""
    return cost_of(name).messages(shapes, n, **compressor_options(name, options))


# chapter 01's apply_dp takes these compressors by registration (it never imports chapter 08)
register_compression(check_compressor, compressor_options, compressed_reducer)
