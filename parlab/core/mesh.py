"""Device meshes: the world's ranks arranged as a grid with named dimensions (dp × pp × tp ...).

torchtitan's `ParallelDims` and PyTorch's `DeviceMesh` in a few lines, built on `Comm.split`.
Ranks are laid out row-major with the *last* dimension fastest, so the innermost dimension (tp,
which talks most) holds neighbouring ranks: with dims (("dp", 2), ("tp", 2)) ranks 0,1 form a tp
group and ranks 0,2 a dp group.

`validate_degrees` checks a factorisation before any process starts and names every factor.
"""

from __future__ import annotations

import itertools
import math


def validate_degrees(world_size: int, **degrees: int) -> dict[str, int]:
    """Check that the degrees are ints >= 1 whose product is world_size; return them.

    A degree given as None is inferred as world_size divided by the others (one at most).
    """
    for name, value in degrees.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(f"{name}={value!r} must be an int >= 1")
    missing = [name for name, value in degrees.items() if value is None]
    if len(missing) > 1:
        raise ValueError(f"at most one degree may be inferred, got None for {missing}")
    known = math.prod(v for v in degrees.values() if v is not None)
    if missing:
        if world_size % known:
            given = " × ".join(f"{k}={v}" for k, v in degrees.items() if v is not None)
            raise ValueError(f"world_size={world_size} is not divisible by {given} = {known}, "
                             f"so {missing[0]} cannot be inferred")
        degrees = {**degrees, missing[0]: world_size // known}
    product = math.prod(degrees.values())
    if product != world_size:
        factors = " × ".join(f"{k}={v}" for k, v in degrees.items())
        raise ValueError(f"world_size={world_size} != {factors} = {product}")
    return dict(degrees)


class Mesh:
    """Named grid of ranks over a world Comm; `mesh["tp"]` is this rank's Comm along tp."""

    def __init__(self, comm, dims: list[tuple[str, int]]):
        names = [n for n, _ in dims]
        sizes = [s for _, s in dims]
        if len(set(names)) != len(names):
            raise ValueError(f"mesh dimension names repeat: {names}")
        validate_degrees(comm.size, **dict(dims))
        self.world, self.names, self.sizes = comm, names, sizes
        self.coords = dict(zip(names, self.coordinate(comm.rank)))
        self._comms = {}
        for name in names:  # every rank creates every group, in the same order
            groups = self.groups(name)
            self._comms[name] = comm.split(groups, name)

    def coordinate(self, rank: int) -> tuple[int, ...]:
        coord = []
        for size in reversed(self.sizes):
            coord.append(rank % size)
            rank //= size
        return tuple(reversed(coord))

    def rank_of(self, **coords: int) -> int:
        rank = 0
        for name, size in zip(self.names, self.sizes):
            rank = rank * size + coords.get(name, self.coords[name])
        return rank

    def groups(self, name: str) -> list[list[int]]:
        """All groups along dimension `name`: ranks that differ only in that coordinate."""
        axis = self.names.index(name)
        others = [range(s) for i, s in enumerate(self.sizes) if i != axis]
        result = []
        for fixed in itertools.product(*others):
            group = []
            for k in range(self.sizes[axis]):
                coord = list(fixed)
                coord.insert(axis, k)
                group.append(self.rank_of(**dict(zip(self.names, coord))))
            result.append(group)
        return result

    def size(self, name: str) -> int:
        return self.sizes[self.names.index(name)]

    def degree(self, name: str) -> int:
        """The size of dimension `name`, 1 when the mesh leaves it out (a plan's size-1 dims)."""
        return self.size(name) if name in self.names else 1

    def coord(self, name: str) -> int:
        """This rank's coordinate along `name`, 0 when the mesh leaves it out."""
        return self.coords.get(name, 0)

    def groups_by(self, key) -> list[list[int]]:
        """The world's ranks grouped by key(rank, {name: coordinate}), each group sorted."""
        groups: dict = {}
        for rank in range(self.world.size):
            groups.setdefault(key(rank, dict(zip(self.names, self.coordinate(rank)))), []).append(rank)
        return sorted(groups.values())

    def group_over(self, names: tuple, label: str):
        """The Comm of the ranks that differ only along `names` (e.g. dp × cp), or None when the
        mesh has none of them. Collective: every rank of the mesh calls it with the same names."""
        if not any(n in self.names for n in names):
            return None
        return self.world.split(self.groups_by(lambda r, c: tuple(v for n, v in c.items()
                                                                  if n not in names)), label)

    def __getitem__(self, name: str):
        """The Comm along `name` (a one-rank Comm when that dimension has size 1)."""
        return self._comms[name]

    def __repr__(self) -> str:
        dims = " × ".join(f"{n}={s}" for n, s in zip(self.names, self.sizes))
        return f"Mesh({dims}, rank {self.world.rank} at {self.coords})"
