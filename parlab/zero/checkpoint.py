"""Distributed checkpoints: every rank writes its own shard; any world size can read them back.

The idea of PyTorch's `torch.distributed.checkpoint` (DCP) and of DeepSpeed's universal
checkpoints, in a format small enough to read: a checkpoint is a directory `step_<k>/` holding
`rank<r>.pt` per rank (this rank's flat shard of every unit: parameters and each optimizer-state
tensor, plus its loss contributions) and `meta.pt` (world size, steps done, every unit's layout),
which rank 0 writes last, after a barrier: a directory without `meta.pt` is an interrupted save
and is ignored. Files are written to a temporary name and renamed, so a rank killed mid-write
leaves no half file under the real name. Everything is loaded with `torch.load(weights_only=True)`
(tensors, numbers, strings, lists and dicts only: no pickled code runs).

Resharding (4 → 2, 2 → 4, any N → M) needs no all-to-all: a unit's flat vector is the same at every
world size but for the zero padding at its end, so the new rank r' reads, from the old files whose
chunks overlap its range [r'·P'/M, (r'+1)·P'/M), exactly the elements it needs (Ψ_u of them in
total over all new ranks) and zero-fills the new padding. (Rajbhandari et al., ZeRO, SC 2020 and
Zhao et al., PyTorch FSDP, VLDB 2023, for the flat sharding; Wang et al., "Gemini: Fast Failure
Recovery in Distributed Training with In-Memory Checkpoints", SOSP 2023, for why checkpoints are the
recovery path.)
"""

from __future__ import annotations

import os
import pathlib

import torch

from parlab.zero.shard import FlatLayout, assemble_state


def step_dir(directory, steps_done: int) -> pathlib.Path:
    return pathlib.Path(directory) / f"step_{steps_done:06d}"


def _atomic_save(obj, path: pathlib.Path) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def optimizer_shard_state(optimizer, shard: torch.Tensor) -> dict:
    """{key: tensor} of the optimizer's state for one shard (AdamW: step, exp_avg, exp_avg_sq)."""
    return {k: v.detach().clone() if torch.is_tensor(v) else torch.tensor(v)
            for k, v in optimizer.state.get(shard, {}).items()}


def save(directory, comm, steps_done: int, layouts: list[FlatLayout], shards: list[torch.Tensor],
         optimizer, losses: list[float], scheme: str = "") -> pathlib.Path:
    """Collective: every rank of `comm` writes its shards; rank 0 then commits `meta.pt`."""
    path = step_dir(directory, steps_done)
    path.mkdir(parents=True, exist_ok=True)
    units = {}
    for layout, shard in zip(layouts, shards):
        units[layout.name] = {"param": shard.detach().clone(),
                              **optimizer_shard_state(optimizer, shard)}
    _atomic_save({"rank": comm.rank, "world_size": comm.size, "units": units,
                  "losses": [float(x) for x in losses]}, path / f"rank{comm.rank}.pt")
    comm.barrier(phase="checkpoint")  # every shard is on disk before the checkpoint counts
    if comm.rank == 0:
        _atomic_save({"world_size": comm.size, "steps_done": steps_done, "scheme": scheme,
                      "layouts": [layout.to_meta() for layout in layouts],
                      "keys": {name: list(unit) for name, unit in units.items()}},
                     path / "meta.pt")
    return path


def latest(directory) -> pathlib.Path | None:
    """The committed checkpoint with the most steps done under `directory`, or None."""
    root = pathlib.Path(directory)
    done = sorted(p for p in root.glob("step_*") if (p / "meta.pt").exists()) if root.exists() \
        else []
    return done[-1] if done else None


class Checkpoint:
    """A committed checkpoint, read lazily: one old rank's file at a time, only when needed."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        meta = torch.load(self.path / "meta.pt", weights_only=True)
        self.world_size, self.steps_done = meta["world_size"], meta["steps_done"]
        self.scheme = meta["scheme"]
        self.layouts = {m["name"]: FlatLayout.from_meta(m) for m in meta["layouts"]}
        self.keys = meta["keys"]  # {unit: ["param", "step", "exp_avg", ...]}
        self._files: dict[int, dict] = {}
        self.files_read: list[int] = []

    def rank_file(self, rank: int) -> dict:
        if rank not in self._files:
            self._files[rank] = torch.load(self.path / f"rank{rank}.pt", weights_only=True)
            self.files_read.append(rank)
        return self._files[rank]

    def read_range(self, unit: str, key: str, lo: int, hi: int) -> torch.Tensor:
        """Elements [lo, hi) of unit's flat `key` vector (zeros past Ψ_u: the new padding),
        read from the old ranks whose chunks overlap; a scalar key (a step count) as is."""
        layout = self.layouts[unit]
        k = layout.shard_numel(self.world_size)
        pieces = [(old, max(old * k, lo), min((old + 1) * k, hi, layout.numel))
                  for old in range(self.world_size)]
        pieces = [(old, s, e) for old, s, e in pieces if s < e]
        probe = self.rank_file(pieces[0][0] if pieces else 0)["units"][unit][key]
        if probe.dim() == 0:  # the same on every rank
            return probe.clone()
        out = torch.zeros(hi - lo, dtype=probe.dtype)  # (hi-lo,)
        for old, s, e in pieces:
            out[s - lo:e - lo] = self.rank_file(old)["units"][unit][key][s - old * k:e - old * k]
        return out

    def losses(self) -> list[float]:
        """The global loss of every step done (the sum of every old rank's contributions)."""
        per_rank = [self.rank_file(r)["losses"] for r in range(self.world_size)]
        return [sum(values) for values in zip(*per_rank)]

    def consolidate(self) -> dict:
        """The full {param name: tensor}, as `RunResult.state` holds it."""
        layouts = list(self.layouts.values())
        shards = [{u: self.rank_file(r)["units"][u]["param"] for u in self.layouts}
                  for r in range(self.world_size)]
        return assemble_state(layouts, shards)


def load_into(ckpt: Checkpoint, units, optimizer, world: int, rank: int) -> None:
    """Fill each unit's shard (and its optimizer state) for `rank` of `world`, resharding."""
    for unit in units:
        layout = ckpt.layouts.get(unit.name)
        if layout is None or layout.params != unit.layout.params:
            raise ValueError(f"checkpoint {ckpt.path} has no unit {unit.name!r} of this layout; "
                             f"it holds {sorted(ckpt.layouts)}")
        lo, hi = layout.shard_range(world, rank)
        with torch.no_grad():
            if getattr(unit, "flat", None) is not None:  # stages 1, 2: every rank holds it all
                unit.flat.copy_(ckpt.read_range(unit.name, "param", 0, unit.padded))  # (padded',)
            else:  # stage 3: only the own shard
                unit.shard.copy_(ckpt.read_range(unit.name, "param", lo, hi))  # (padded'/M,)
        state = {key: ckpt.read_range(unit.name, key, lo, hi) for key in ckpt.keys[unit.name]
                 if key != "param"}
        if state:
            optimizer.state[unit.shard] = state

