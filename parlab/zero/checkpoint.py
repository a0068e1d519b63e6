"""Distributed checkpoints: every rank writes its own shard; any world size can read them back.

The idea of PyTorch's `torch.distributed.checkpoint` (DCP) and DeepSpeed's universal checkpoints,
small enough to read: `step_<k>/` holds `rank<r>.pt` per rank (its flat shard of every unit and
its optimizer state) and `meta.pt`, the manifest rank 0 writes last (without it a directory is an
interrupted save). Files are renamed into place; everything loads with `weights_only=True`; the
last `keep` checkpoints are kept. Checks before a run trusts one: `parlab.zero.checkpoint_integrity`.
Resharding (any N → M) needs no all-to-all: a unit's flat vector is the same at every world size
but for its end padding, so each new rank reads exactly its range from the overlapping old files
(Rajbhandari et al., ZeRO, SC 2020 and Zhao et al., PyTorch FSDP, VLDB 2023, for the flat
sharding; Wang et al., "Gemini", SOSP 2023, for why checkpoints are the recovery path).
The layout and the manifest in full: docs/zero.md, `parlab.zero.checkpoint`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import pathlib
import re
import shutil

import torch

from parlab.data_parallel.checkpointing import KEEP  # kept when the run does not say (keep=)
from parlab.zero import dcp_format
from parlab.zero.shard import FlatLayout, assemble_state


def step_dir(directory, steps_done: int) -> pathlib.Path:
    return pathlib.Path(directory) / f"step_{steps_done:06d}"


_TMP = re.compile(r"\.tmp\d*$")  # ours (.tmp<pid>) and DCP's (.metadata.tmp)


def _atomic_save(obj, path: pathlib.Path) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def file_sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_hash(meta: dict) -> str:
    """sha256 of a manifest's content: canonical JSON of every field but `manifest_sha256`."""
    body = {k: v for k, v in meta.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=repr).encode()).hexdigest()


def family(scheme: str) -> str:
    """Schemes that share a checkpoint format and can reshard between each other: zero1/2/3 → zero."""
    return re.sub(r"\d+$", "", scheme)


def run_fields(cfg) -> dict:
    """Everything that decides the trajectory of a run but the world size, the stage and steps."""
    return {"family": family(cfg.scheme), "model": cfg.model,
            "model_config": dataclasses.asdict(cfg.model_config), "seed": cfg.seed,
            "optimizer": cfg.optimizer, "lr": float(cfg.lr), "batch_size": cfg.batch_size}


def config_hash(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _launch_config():
    """The RunConfig of the parlab.run this rank belongs to (None outside one, e.g. in a test)."""
    from parlab.core.rank_process import current

    info = current()
    for arg in info.args if info is not None else ():
        if hasattr(arg, "model_config") and hasattr(arg, "options"):
            return arg
    return None


def optimizer_shard_state(optimizer, shard: torch.Tensor) -> dict:
    """{key: tensor} of the optimizer's state for one shard (AdamW: step, exp_avg, exp_avg_sq)."""
    return {k: v.detach().clone() if torch.is_tensor(v) else torch.tensor(v)
            for k, v in optimizer.state.get(shard, {}).items()}


def save(directory, comm, steps_done: int, layouts: list[FlatLayout], shards: list[torch.Tensor],
         optimizer, losses: list[float], scheme: str = "", model=None) -> pathlib.Path:
    """Collective: every rank of `comm` writes its shards; rank 0 then writes the same state as a
    `torch.distributed.checkpoint` (`parlab.zero.dcp_format`: the model's parameters under their
    names in `model.state_dict()`, its buffers too), commits `meta.pt` (the manifest: the run's
    fields, every file's sha256) and removes what `keep` does not keep; every rank returns once
    the checkpoint is committed."""
    path = step_dir(directory, steps_done)
    path.mkdir(parents=True, exist_ok=True)
    if comm.rank == 0:  # an older save of this step stops counting before its files change
        (path / "meta.pt").unlink(missing_ok=True)
        (path / dcp_format.METADATA).unlink(missing_ok=True)
    units = {}
    for layout, shard in zip(layouts, shards):
        units[layout.name] = {"param": shard.detach().clone(),
                              **optimizer_shard_state(optimizer, shard)}
    _atomic_save({"rank": comm.rank, "world_size": comm.size, "units": units,
                  "losses": [float(x) for x in losses]}, path / f"rank{comm.rank}.pt")
    comm.barrier(phase="checkpoint")  # every shard is on disk before the checkpoint counts
    if comm.rank == 0:
        cfg = _launch_config()
        fields = run_fields(cfg) if cfg is not None else None
        files = [f"rank{r}.pt" for r in range(comm.size)]
        dcp_files = dcp_format.write(path, dcp_state(path, comm.size, layouts, optimizer,
                                                     steps_done, model))
        meta = {"format": 3, "world_size": comm.size, "steps_done": steps_done,
                "scheme": scheme, "layouts": [layout.to_meta() for layout in layouts],
                "keys": {name: list(unit) for name, unit in units.items()},
                "run": fields, "config_hash": config_hash(fields) if fields else None,
                "checksums": {name: file_sha256(path / name) for name in files},
                "dcp_checksums": {name: file_sha256(path / name) for name in dcp_files}}
        meta["manifest_sha256"] = manifest_hash(meta)
        _atomic_save(meta, path / "meta.pt")
        keep = cfg.options.get("keep", KEEP) if cfg is not None else KEEP
        prune(directory, keep, steps_done)
    # no rank goes on before the checkpoint is committed: a rank that dies in the next step would
    # otherwise have the launcher stop rank 0 while it still writes this one
    comm.barrier(phase="checkpoint")
    return path


def dcp_state(path, world: int, layouts, optimizer, steps_done: int, model=None) -> dict:
    """What rank 0 writes as the DCP checkpoint: the full state of every rank's file in `path`,
    the parameters in `model.named_parameters()` order with its persistent buffers (no model:
    the layouts' order) and the global losses (the sum of every rank's shares)."""
    names = [name for layout in layouts for name, *_ in layout.offsets()]
    extra = {}
    if model is not None:
        params = dict(model.named_parameters(remove_duplicate=False))
        names = [n for n in params if n in set(names)] + [n for n in names if n not in params]
        extra = {k: v.detach().clone() for k, v in model.state_dict().items() if k not in params}
    per_rank = [torch.load(path / f"rank{r}.pt", weights_only=True)["losses"]
                for r in range(world)]
    losses = [sum(values) for values in zip(*per_rank)]
    return dcp_format.full_state(path, world, layouts, names, extra, optimizer, steps_done, losses)


def steps_of(path: pathlib.Path) -> int:
    return int(path.name.split("_")[1])


def prune(directory, keep: int, current: int) -> None:
    """Keep the last `keep` committed checkpoints; remove interrupted saves before `current`."""
    root = pathlib.Path(directory)
    dirs = sorted(p for p in root.glob("step_*") if p.is_dir() and p.name[5:].isdigit())
    for p in dirs:
        for tmp in p.iterdir():
            if _TMP.search(tmp.name):
                tmp.unlink(missing_ok=True)
    committed = [p for p in dirs if (p / "meta.pt").exists()]
    doomed = committed[:-keep] + [p for p in dirs if not (p / "meta.pt").exists()
                                  and steps_of(p) < current]
    for p in doomed:
        (p / "meta.pt").unlink(missing_ok=True)  # first: a half-removed one is not a checkpoint
        shutil.rmtree(p, ignore_errors=True)


def read_meta(path) -> dict:
    return torch.load(pathlib.Path(path) / "meta.pt", weights_only=True)


def committed(directory) -> list[pathlib.Path]:
    """Every committed checkpoint under `directory`, oldest first (unverified)."""
    root = pathlib.Path(directory)
    return sorted(p for p in root.glob("step_*") if (p / "meta.pt").exists()) if root.exists() \
        else []


class Checkpoint:
    """A committed checkpoint, read lazily: one old rank's file at a time, only when needed."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        meta = read_meta(self.path)
        self.checksums = meta.get("checksums") or {}
        self.run = meta.get("run")
        self.world_size, self.steps_done = meta["world_size"], meta["steps_done"]
        self.scheme = meta["scheme"]
        self.layouts = {m["name"]: FlatLayout.from_meta(m) for m in meta["layouts"]}
        self.keys = meta["keys"]  # {unit: ["param", "step", "exp_avg", ...]}
        self._files: dict[int, dict] = {}
        self.files_read: list[int] = []

    def rank_file(self, rank: int) -> dict:
        if rank not in self._files:
            file = self.path / f"rank{rank}.pt"
            try:
                data = file.read_bytes()
            except OSError as err:
                raise ValueError(f"checkpoint file {file} cannot be read: {err}") from None
            digest = self.checksums.get(file.name)
            if digest is not None and hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"checkpoint file {file} does not match its sha256 in the "
                                 "manifest: damaged or altered")
            try:
                self._files[rank] = torch.load(io.BytesIO(data), weights_only=True)
            except Exception as err:  # noqa: BLE001 - name the file whatever went wrong
                raise ValueError(f"checkpoint file {file} cannot be loaded (truncated or not a "
                                 f"checkpoint): {type(err).__name__}: {err}") from None
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
        for rank, values in enumerate(per_rank):
            if len(values) != self.steps_done:
                raise ValueError(f"checkpoint file {self.path / f'rank{rank}.pt'} holds "
                                 f"{len(values)} losses but its manifest says steps_done="
                                 f"{self.steps_done}: altered")
        return [sum(values) for values in zip(*per_rank)]

    def consolidate(self) -> dict:
        """The full {param name: tensor}, as `RunResult.state` holds it."""
        layouts = list(self.layouts.values())
        shards = [{u: self.rank_file(r)["units"][u]["param"] for u in self.layouts}
                  for r in range(self.world_size)]
        return assemble_state(layouts, shards)


def load_into(ckpt: Checkpoint, units, optimizer, world: int, rank: int) -> None:
    """Fill each unit's shard (and its optimizer state) for `rank` of `world`, resharding."""
    extra = sorted(set(ckpt.layouts) - {unit.name for unit in units})
    if extra:
        raise ValueError(f"checkpoint {ckpt.path} holds units {extra} that this model does not have")
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
