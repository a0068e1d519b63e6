"""A parallel dimension as an object on the model: the hooks one training step calls, in order.

torchtitan's `parallelize_llama` applies each dimension by a function that takes the mesh and
returns the model; what the step then has to do for that dimension (FSDP's reduce-scatter, DDP's
all-reduce, the pipeline's embedding group) lives with the module it wrapped. Here each chapter's
`apply_*` registers one `Dimension` on the model (`add_dimension`), in mesh order, and the
composed step (`parlab.planner.schemes.ND`) is a loop over them; it never asks which dimensions
are there:

    start_step()           before a step's first micro-batch        (ZeRO: its step counter)
    before_micro(last)     before each micro-batch's forward        (an overlapped reducer:
                                                                      only the last communicates)
    after_backward()       after the step's backwards, in order     (the tie's sum, dp's average,
                                                                      ZeRO's reduce-scatter)
    after_sync()           then, in reverse order                   (a late tie, the experts' sum)
    after_step()           after the optimizer's step               (ZeRO's all-gather)
    clear_grads(opt)       the gradients' reset, when it is its own (ZeRO's flat shards)

and what the run reports: the tensors the optimizer steps (`trainable`), `memory`, `extras`.
The parent glues the ranks' states into the reference-named one by the same objects
(`assemble_pieces`): each dimension, the last applied first, joins the pieces that differ only in
its mesh `axes` (ZeRO's shards, the pipeline's stages, ep's experts, tp's slices).
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS: dict[str, type] = {}  # every Dimension subclass by its name: what the parent assembles by


class Dimension:
    """No-op hooks: a dimension overrides what its step needs."""

    name = "dimension"
    owns_update = False  # True: it steps the optimizer itself (DeAR, P3: `own_update`, `flush`)
    during_backward = False  # True: its messages start inside backward (an overlapped reducer)
    holds_full_slice = True  # False: the rank keeps only a shard of its slice (ZeRO)
    axes: tuple = ()  # the mesh coordinates its ranks' pieces of the state differ in
    # the compute span the step runs `after_backward` in (its own work is priced on a paced clock:
    # chapter 08's encoding and decoding); None: it only communicates, and messages price themselves
    after_backward_span: str | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        KINDS[cls.name] = cls

    @staticmethod
    def assemble(pieces: list) -> dict:
        """One state from `pieces` (Piece), the ones differing only in `axes`, in their order."""
        return pieces[0].state

    def start_step(self) -> None:
        pass

    def before_micro(self, last: bool) -> None:
        pass

    def after_backward(self) -> None:
        pass

    def after_sync(self) -> None:
        pass

    def after_step(self) -> None:
        pass

    def clear_grads(self, optimizer) -> bool:
        """Reset the gradients if they are this dimension's to reset; True when it did."""
        return False

    def syncs_apart(self) -> list:
        """Parameters this dimension averages itself, which data parallelism must leave out."""
        return []

    def trainable(self) -> list | None:
        """The tensors the optimizer steps, when not the model's parameters (ZeRO's shards)."""
        return None

    def memory(self, memory: dict, optimizer) -> dict:
        """The rank's memory dict with this dimension's own entries (or its own accounting)."""
        return memory

    def extras(self) -> dict:
        """What the parent process needs to assemble the full state."""
        return {}


def add_dimension(model, dimension: Dimension):
    """Register `dimension` on `model` after the ones already there; returns the model."""
    model.__dict__.setdefault("dimensions", []).append(dimension)
    return model


def dimensions(model) -> list:
    """The model's dimensions in the order they were applied."""
    return model.__dict__.get("dimensions", [])


def dimension(model, name: str) -> Dimension | None:
    """The model's dimension called `name`, None when it has none."""
    return next((d for d in dimensions(model) if d.name == name), None)


@dataclass
class Piece:
    """What one rank (or an assembled group of ranks) holds of the full state."""

    coords: dict  # mesh coordinate -> value, for the axes not yet assembled
    state: dict | None  # {reference name: tensor}; None where `extras` carries it (ZeRO)
    extras: dict  # the rank's `extras` (its dimensions' own)


def assemble_pieces(pieces: list[Piece], names: list[str]) -> dict:
    """The full state from the ranks' `pieces` of a model whose dimensions `names` were applied in
    that order: the last applied first, each dimension's pieces that differ only in its `axes`
    (sorted by those still there: ZeRO may have glued dp already) glued into one by its
    `assemble`."""
    for kind in reversed([KINDS[name] for name in names]):
        if not kind.axes:
            continue
        groups: dict[tuple, list[Piece]] = {}
        for piece in pieces:
            rest = tuple((a, v) for a, v in piece.coords.items() if a not in kind.axes)
            groups.setdefault(rest, []).append(piece)
        pieces = [Piece(dict(rest), kind.assemble(sorted(group, key=lambda p: [
            p.coords[a] for a in kind.axes if a in p.coords])), group[0].extras)
            for rest, group in groups.items()]
    if len(pieces) != 1:
        raise ValueError(f"{len(pieces)} pieces left after assembling {names}: "
                         f"{[p.coords for p in pieces]}")
    return pieces[0].state
