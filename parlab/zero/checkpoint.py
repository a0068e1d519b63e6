"""Distributed checkpoints: every rank writes its own shard; any world size can read them back.

The idea of PyTorch's `torch.distributed.checkpoint` (DCP) and of DeepSpeed's universal
checkpoints, in a format small enough to read: a checkpoint is a directory `step_<k>/` holding
`rank<r>.pt` per rank (this rank's flat shard of every unit: parameters and each optimizer-state
tensor, plus its loss contributions) and `meta.pt` (world size, steps done, every unit's layout),
which rank 0 writes last, after a barrier: a directory without `meta.pt` is an interrupted save
and is ignored. Files are written to a temporary name and renamed, so a rank killed mid-write
leaves no half file under the real name. Everything is loaded with `torch.load(weights_only=True)`
(tensors, numbers, strings, lists and dicts only: no pickled code runs).

A checkpoint can only go wrong silently if it is resumed into a run it does not belong to, or if
its bytes changed on disk; so `meta.pt` is a manifest: everything that defines the run (`run_fields`:
scheme family, model and its config, seed, optimizer, lr, global batch size — the data position is
`steps_done`, since step k's batch is a function of the seed and k) with their sha256, and the
sha256 of every rank file. `check_resume(cfg)` compares a run's configuration with the checkpoints
under its save_dir before any process starts and names each differing field; only the world size,
the ZeRO stage within zero1/2/3 and the number of steps may change. A rank file whose checksum
does not match is named, and `latest` falls back to the previous complete checkpoint with a
warning (the reason to keep more than one: Gemini, below, keeps two for the same purpose). Only
the last `keep` checkpoints are kept (option `keep=`, default 2); temporary files and step
directories of interrupted saves are removed at the next commit.

`meta.pt` is covered too: it carries `manifest_sha256`, the sha256 of its own content (canonical
JSON of every other field), so a flipped bit that changes what it says is caught like a damaged
shard, before any rank loads. A consistent rewrite (a valid manifest saying `steps_done=3` in
`step_000004/`, its hash recomputed) is caught by `verify`: the steps done must match the
directory's name and every rank file's losses, the world size its rank files. With `resume=True`
and only damaged checkpoints the run is refused (`allow_fresh_start=True` starts at step 0
instead, with a warning). A run that uses a save_dir holds `lock(save_dir)` (an fcntl lock on
`save_dir/.parlab.lock`, taken by rank 0, released by the kernel when that process ends however it
ends): a second run on the same directory is refused before spawn, naming the holder's pid.

Resharding (4 → 2, 2 → 4, any N → M) needs no all-to-all: a unit's flat vector is the same at every
world size but for the zero padding at its end, so the new rank r' reads, from the old files whose
chunks overlap its range [r'·P'/M, (r'+1)·P'/M), exactly the elements it needs (Ψ_u of them in
total over all new ranks) and zero-fills the new padding. (Rajbhandari et al., ZeRO, SC 2020 and
Zhao et al., PyTorch FSDP, VLDB 2023, for the flat sharding; Wang et al., "Gemini: Fast Failure
Recovery in Distributed Training with In-Memory Checkpoints", SOSP 2023, for why checkpoints are the
recovery path.)
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import io
import json
import os
import pathlib
import re
import shutil
import warnings

import torch

from parlab.zero.shard import FlatLayout, assemble_state


def step_dir(directory, steps_done: int) -> pathlib.Path:
    return pathlib.Path(directory) / f"step_{steps_done:06d}"


KEEP = 2  # checkpoints kept when the run does not say (option keep=)
_TMP = re.compile(r"\.tmp\d+$")


def _atomic_save(obj, path: pathlib.Path) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_hash(meta: dict) -> str:
    """sha256 of a manifest's content: canonical JSON of every field but `manifest_sha256`."""
    body = {k: v for k, v in meta.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=repr).encode()).hexdigest()


# ----------------------------------------------------------------------------- one run per save_dir
LOCK_NAME = ".parlab.lock"
_HELD: dict[str, int] = {}  # resolved save_dir -> descriptor of the lock this process holds


class DirectoryInUse(ValueError):
    """Another run holds the save_dir's lock."""


def _holder(file: pathlib.Path) -> str:
    try:
        text = file.read_text().strip()
    except OSError:
        text = ""
    return text or "unknown pid"


def lock(directory) -> None:
    """Take `directory`'s run lock for this process (kept until `unlock` or the process ends);
    DirectoryInUse naming the holder when another process or run holds it. Re-entrant per
    process (a torchrun worker runs several runs)."""
    root = pathlib.Path(directory)
    key = str(root.resolve())
    if key in _HELD:
        return
    root.mkdir(parents=True, exist_ok=True)
    file = root / LOCK_NAME
    while True:
        fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            check_unlocked(directory)  # raises the message naming the holder
            continue  # released in between: try again
        try:  # the holder before us may have unlinked the file after we opened it: retry
            same = os.stat(file).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}\n".encode())
    _HELD[key] = fd


def unlock(directory) -> None:
    """Release this process's lock of `directory` (and remove the lock file)."""
    key = str(pathlib.Path(directory).resolve())
    fd = _HELD.pop(key, None)
    if fd is None:
        return
    try:
        (pathlib.Path(directory) / LOCK_NAME).unlink(missing_ok=True)  # while still held
    finally:
        os.close(fd)


def check_unlocked(directory) -> None:
    """Before spawn: DirectoryInUse if a run (of any process, this one included) holds
    `directory`'s lock now. A probe: takes the lock on a fresh descriptor and lets it go."""
    file = pathlib.Path(directory) / LOCK_NAME
    try:
        fd = os.open(file, os.O_RDONLY)
    except OSError:
        return  # no lock file: nobody holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise DirectoryInUse(f"save_dir={str(directory)!r} is in use by another run "
                             f"({_holder(file)}): two runs writing one save_dir would prune and "
                             "overwrite each other's checkpoints; wait for it to end or choose "
                             "another save_dir") from None
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- what defines a run
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


def differences(saved: dict | None, fields: dict) -> list[str]:
    """'name: checkpoint X, this run Y' for every field of `fields` that `saved` does not share."""
    if saved is None:
        return ["manifest: the checkpoint records no run configuration (an older format)"]
    out = []
    for key, value in fields.items():
        old = saved.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            out += [f"{key}.{k}: checkpoint {old.get(k)!r}, this run {v!r}" for k, v in value.items()
                    if old.get(k) != v]
        elif old != value:
            out.append(f"{key}: checkpoint {old!r}, this run {value!r}")
    return out


def _launch_config():
    """The RunConfig of the parlab.run this rank belongs to (None outside one, e.g. in a test)."""
    from parlab.core.launch import current

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
         optimizer, losses: list[float], scheme: str = "") -> pathlib.Path:
    """Collective: every rank of `comm` writes its shards; rank 0 then commits `meta.pt` (the
    manifest: the run's fields, every file's sha256) and removes what `keep` does not keep."""
    path = step_dir(directory, steps_done)
    path.mkdir(parents=True, exist_ok=True)
    if comm.rank == 0:  # an older save of this step stops counting before its files change
        (path / "meta.pt").unlink(missing_ok=True)
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
        meta = {"format": 3, "world_size": comm.size, "steps_done": steps_done,
                "scheme": scheme, "layouts": [layout.to_meta() for layout in layouts],
                "keys": {name: list(unit) for name, unit in units.items()},
                "run": fields, "config_hash": config_hash(fields) if fields else None,
                "checksums": {name: _sha256(path / name) for name in files}}
        meta["manifest_sha256"] = manifest_hash(meta)
        _atomic_save(meta, path / "meta.pt")
        keep = cfg.options.get("keep", KEEP) if cfg is not None else KEEP
        prune(directory, keep, steps_done)
    return path


def _steps_of(path: pathlib.Path) -> int:
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
                                  and _steps_of(p) < current]
    for p in doomed:
        (p / "meta.pt").unlink(missing_ok=True)  # first: a half-removed one is not a checkpoint
        shutil.rmtree(p, ignore_errors=True)


def read_meta(path) -> dict:
    return torch.load(pathlib.Path(path) / "meta.pt", weights_only=True)


def problems(path) -> list[str]:
    """What is wrong with the committed checkpoint `path` (missing or altered files), or []."""
    path = pathlib.Path(path)
    try:
        meta = read_meta(path)
    except Exception as err:  # noqa: BLE001 - a damaged manifest is one more problem
        return [f"{path / 'meta.pt'} cannot be read ({type(err).__name__}: {err})"]
    if not isinstance(meta, dict):
        return [f"{path / 'meta.pt'} is not a checkpoint manifest"]
    if "manifest_sha256" in meta and meta["manifest_sha256"] != manifest_hash(meta):
        return [f"{path / 'meta.pt'} does not match its own sha256 (manifest_sha256): damaged or "
                "altered"]
    if meta.get("format", 2) >= 3 and "manifest_sha256" not in meta:
        return [f"{path / 'meta.pt'} lacks its manifest_sha256: damaged or altered"]
    found = []
    steps, world = meta.get("steps_done"), meta.get("world_size")
    if steps != _steps_of(path):
        found.append(f"{path / 'meta.pt'} says steps_done={steps!r} but its directory is "
                     f"{path.name}: altered or misplaced")
    checksums = meta.get("checksums") or {}
    if checksums and sorted(checksums) != sorted(f"rank{r}.pt" for r in range(world or 0)):
        found.append(f"{path / 'meta.pt'} says world_size={world!r} but lists rank files "
                     f"{sorted(checksums)}: altered")
    for name, digest in checksums.items():
        file = path / name
        if not file.exists():
            found.append(f"{file} is missing")
        elif _sha256(file) != digest:
            found.append(f"{file} does not match its sha256 in the manifest (damaged or altered)")
    return found


def verify(path) -> list[str]:
    """`problems(path)`, then what only the rank files can tell: each holds this rank's shards
    for the manifest's units and exactly `steps_done` losses (a consistent rewrite of meta.pt,
    e.g. steps_done 4 -> 3 with its hash recomputed, is caught here, before any rank loads)."""
    found = problems(path)
    if found:
        return found
    try:
        ckpt = Checkpoint(path)
        for rank in range(ckpt.world_size):
            data = ckpt.rank_file(rank)
            file = ckpt.path / f"rank{rank}.pt"
            if data.get("rank") != rank or data.get("world_size") != ckpt.world_size:
                found.append(f"{file} is rank {data.get('rank')!r} of "
                             f"{data.get('world_size')!r}, not rank {rank} of {ckpt.world_size}")
            if len(data.get("losses", ())) != ckpt.steps_done:
                found.append(f"{file} holds {len(data.get('losses', ()))} losses but meta.pt says "
                             f"steps_done={ckpt.steps_done}: altered")
            missing = sorted(set(ckpt.layouts) - set(data.get("units", {})))
            if missing:
                found.append(f"{file} lacks units {missing}")
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        found.append(f"{path} is not a consistent checkpoint ({type(err).__name__}: {err})")
    return found


def committed(directory) -> list[pathlib.Path]:
    """Every committed checkpoint under `directory`, oldest first (unverified)."""
    root = pathlib.Path(directory)
    return sorted(p for p in root.glob("step_*") if (p / "meta.pt").exists()) if root.exists() \
        else []


def latest(directory, warn: bool = True, deep: bool = False) -> pathlib.Path | None:
    """The intact committed checkpoint with the most steps done under `directory`, or None; a
    damaged newer one is skipped with a warning that names its file. deep=True: `verify` (loads
    the rank files) rather than `problems` (checksums and the manifest only)."""
    for path in reversed(committed(directory)):
        found = verify(path) if deep else problems(path)
        if not found:
            return path
        if warn:
            warnings.warn(f"checkpoint {path} is not usable: {'; '.join(found)}; falling back to "
                          "the previous complete checkpoint, if one is intact", RuntimeWarning,
                          stacklevel=2)
    return None


def check_resume(cfg) -> None:
    """Before any process starts: refuse a resume or a reused save_dir that does not fit `cfg`.

    resume=True: the latest intact checkpoint must have been written by a run with the same
    `run_fields` (each differing field is named) and fewer steps done than cfg.steps; with no
    checkpoint a warning says the run starts at step 0 (resume="must" refuses instead). A fresh
    run that will save into save_dir: every checkpoint there must be of the same run (otherwise a
    later resume would mix two runs)."""
    o = cfg.options
    if o.get("save_dir") is None:
        return
    fields, where = run_fields(cfg), f"save_dir={str(o['save_dir'])!r}"
    rule = "only world_size, the ZeRO stage and steps may change on resume"
    from parlab.core.rendezvous import under_torchrun

    if not under_torchrun():  # there every worker probes while rank 0 may hold it already
        check_unlocked(o["save_dir"])
    if o.get("resume"):
        path = latest(o["save_dir"], deep=True)
        if path is None:
            damaged = committed(o["save_dir"])
            if damaged and not o.get("allow_fresh_start"):
                reasons = "; ".join(f"{p.name}: {'; '.join(verify(p))}" for p in damaged)
                raise ValueError(f"resume={o['resume']!r} but every checkpoint in {where} is "
                                 f"damaged ({reasons}); refusing to start again from step 0 "
                                 "(allow_fresh_start=True does, or remove them)")
            if o["resume"] == "must":
                raise ValueError(f"resume='must' but {where} holds no complete checkpoint")
            what = ("only damaged checkpoints (allow_fresh_start=True)" if damaged
                    else "no complete checkpoint")
            warnings.warn(f"resume=True but {where} holds {what}: the run starts at step 0 "
                          "(resume='must' refuses instead)", RuntimeWarning, stacklevel=3)
            return
        meta = read_meta(path)
        diff = differences(meta.get("run"), fields)
        if diff:
            raise ValueError(f"{where}: checkpoint {path.name} was written by another run, it "
                             f"cannot be resumed ({rule}); differing: {'; '.join(diff)}")
        if cfg.steps <= meta["steps_done"]:
            raise ValueError(f"steps={cfg.steps} but checkpoint {path} has {meta['steps_done']} "
                             f"steps done: resuming needs steps > {meta['steps_done']}")
    elif o.get("save_every"):
        for path in committed(o["save_dir"]):
            found = problems(path)
            if found:
                raise ValueError(f"{where} holds a damaged checkpoint {path.name} "
                                 f"({'; '.join(found)}); remove it or choose an empty save_dir")
            diff = differences(read_meta(path).get("run"), fields)
            if diff:
                raise ValueError(f"{where} already holds checkpoint {path.name} of another run "
                                 f"(differing: {'; '.join(diff)}); choose an empty save_dir or "
                                 "remove it")


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

