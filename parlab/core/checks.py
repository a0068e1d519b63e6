"""Validators shared by every scheme: typed options and parallel degrees, checked before any
process starts, each error naming the offending value (torchtitan's `ParallelDims` is the model:
one message that names every factor).

A scheme declares its options with types instead of repeating `isinstance` checks:

    register("ddp-bucketed", ..., options={"bucket_mb": Float(0.05, min=0),
                                           "accum_steps": Int(1, min=1),
                                           "algo": Choice("gloo", ("gloo", "ring", "tree"))})

and `parlab.engine.run_config.make_config` checks every value (`check_options`). A plain value in
`options` is a default that is not type-checked (paths, partitions given as lists ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Option:
    """An option's default; subclasses check a value and return it (normalised)."""

    default: object = None

    def check(self, name: str, value):
        return value


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Int(Option):
    """An int in [min, max]; `none=True` also allows None (meaning: the scheme picks)."""

    min: int | None = None
    max: int | None = None
    none: bool = False

    def check(self, name, value):
        if value is None and self.none:
            return value
        if not _is_int(value) or (self.min is not None and value < self.min) \
                or (self.max is not None and value > self.max):
            bounds = " and ".join(b for b in (f">= {self.min}" if self.min is not None else "",
                                             f"<= {self.max}" if self.max is not None else "") if b)
            extra = " (or None: the scheme picks)" if self.none else ""
            raise ValueError(f"{name}={value!r} must be an int{' ' + bounds if bounds else ''}"
                             f"{extra}")
        return value


@dataclass(frozen=True)
class Float(Option):
    """A finite number >= min (> min with `strict=True`) and <= max.

    Finite unless the option says otherwise (`finite=False` admits ±inf, never NaN): an option
    whose infinite value would reach the arithmetic (a learning rate, a delay, a weight) must
    not pass validation. Give `max` where a larger value cannot be honoured (a sleep beyond the
    platform's time_t, an LP coefficient that overflows): the error then names the range."""

    min: float | None = None
    strict: bool = False
    unit: str = ""
    max: float | None = None
    finite: bool = True

    def check(self, name, value):
        ok = _is_number(value) and not math.isnan(value) and (not self.finite or math.isfinite(value))
        if ok and self.min is not None:
            ok = value > self.min if self.strict else value >= self.min
        if ok and self.max is not None:
            ok = value <= self.max
        if not ok:
            op = ">" if self.strict else ">="
            bounds = " and ".join(b for b in (f"{op} {self.min:g}" if self.min is not None else "",
                                             f"<= {self.max:g}" if self.max is not None else "") if b)
            unit = f" ({self.unit})" if self.unit else ""
            kind = "a finite number" if self.finite else "a number (not NaN)"
            raise ValueError(f"{name}={value!r} must be {kind}{' ' + bounds if bounds else ''}{unit}")
        return value


@dataclass(frozen=True)
class Bool(Option):
    def check(self, name, value):
        if not isinstance(value, bool):
            raise ValueError(f"{name}={value!r} must be True or False")
        return value


@dataclass(frozen=True)
class Choice(Option):
    choices: tuple = ()

    def check(self, name, value):
        # type-strict: 1 is not True, 0 is not False
        if not any(value == c and type(value) is type(c) for c in self.choices):
            raise ValueError(f"{name}={value!r} must be one of {tuple(self.choices)}")
        return value


def defaults(options: dict) -> dict:
    """{name: default} of a scheme's declared options (typed or plain)."""
    return {k: v.default if isinstance(v, Option) else v for k, v in options.items()}


def check_options(declared: dict, values: dict) -> dict:
    """Every declared option's value (given or default), checked by its type."""
    out = {}
    for name, spec in declared.items():
        value = values.get(name, spec.default if isinstance(spec, Option) else spec)
        out[name] = spec.check(name, value) if isinstance(spec, Option) else value
    return out
