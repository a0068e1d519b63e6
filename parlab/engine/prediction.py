"""What a scheme's closed forms predict for one configuration, asked through the registry:

    parlab.schemes()["zero3"].cost(cfg)   # Prediction(bytes_sent=[... per rank ...])

Each chapter writes its closed forms in its `cost.py`; a scheme registers a `cost=` function that
applies them to a `RunConfig` (`register(..., cost=...)`), so a planner can compare every scheme
without knowing its name, and a test can hold every prediction against a measured ledger.
"""

from __future__ import annotations

from dataclasses import dataclass

from parlab.engine.loop import build_model


@dataclass(frozen=True)
class Prediction:
    bytes_sent: list[int]  # per rank, over the whole run (every step), as the ledger counts them
    source: str  # the closed form it comes from, to cite beside the measurement


def param_numels(cfg) -> list[int]:
    """Elements of each parameter of the config's model, in registration order."""
    return [p.numel() for p in build_model(cfg).parameters()]


def no_communication(cfg) -> Prediction:
    return Prediction([0] * cfg.world_size, "one process: nothing moves")
