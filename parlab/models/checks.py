"""The check every model's config starts with: each field a whole number of at least one.

A config arrives from a notebook's parameters cell or the CLI, so a 0, a float or a bool (which
`isinstance(x, int)` accepts) is refused here, naming the field, before any process starts.
"""

from __future__ import annotations

from dataclasses import fields


def require_positive_ints(config) -> None:
    """Raise ValueError naming the first field of the dataclass `config` that is not an int >= 1."""
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{type(config).__name__}.{f.name}={value!r} must be an int >= 1")
