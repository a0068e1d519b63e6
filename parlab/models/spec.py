"""One model, one spec: everything the package asks of a model by name, in one registry.

Each model module registers one `ModelSpec` beside its class (`register_model(ModelSpec("gpt",
...))`): its config class, how to build it, its parameter and activation counts before any tensor
exists (the memory check of `parlab.engine.run_config`), its batches and longest sequence
(`parlab.models.data`), whether checkpointing may recompute its blocks. The public functions look
the name up here, so adding a model means registering its spec, never editing a branch. This
module imports nothing of the package (no import cycle with `parlab.models.data`). In full:
docs/models.md, `parlab.models.spec`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def no_sequence() -> None:
    """The longest sequence of a dataset without sequences (spirals, volumes, ...): None."""
    return None


@dataclass(frozen=True)
class ModelSpec:
    """What the package knows of model `name` (the `model=` of a run).

    config: the config dataclass; its defaults are the model's defaults, `validate()` checks it.
    model: model(cfg, seed=seed) -> nn.Module, parameters drawn in a fixed order from the seed.
    param_count(cfg): parameters from the config alone (no tensor is made), equal to the built
        model's count (tested).
    activation_count(cfg, batch_size): a generous count of the elements a forward saves.
    global_batch(step, batch_size, seed, seq_len): the step's whole batch (inputs, targets).
    max_seq_len(): the longest sequence a batch can draw from the dataset (None: no sequence).
    no_checkpointing: why `checkpoint=True` is refused, or None where the model supports it.
    """

    name: str
    config: type
    model: Callable
    param_count: Callable[[object], int]
    activation_count: Callable[[object, int], int]
    global_batch: Callable[[int, int, int, int], tuple]
    max_seq_len: Callable[[], int | None] = no_sequence
    no_checkpointing: str | None = None


SPECS: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec) -> ModelSpec:
    """Make `spec.name` a model every run may name; a second spec under one name is an error."""
    if spec.name in SPECS:
        raise ValueError(f"model={spec.name!r} is registered twice")
    SPECS[spec.name] = spec
    return spec


def model_spec(name: str) -> ModelSpec:
    """The spec of model `name`; ValueError naming it and the known models when it is unknown."""
    if name not in SPECS:
        raise ValueError(f"model={name!r} is unknown; choose one of {sorted(SPECS)}")
    return SPECS[name]
