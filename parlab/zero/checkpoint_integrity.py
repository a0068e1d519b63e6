"""Whether a checkpoint can be trusted and resumed: every check before a rank loads one.

`meta.pt` (`parlab.zero.checkpoint`) is a manifest, checked here: `check_resume(cfg)` names each
field that differs from the run's configuration before any process starts (only world size,
ZeRO stage and steps may change); `problems` names a rank file whose checksum fails, and `latest`
falls back to the previous complete checkpoint with a warning (Wang et al., "Gemini", SOSP 2023,
keeps two for the same purpose); `manifest_sha256` covers the manifest itself and `verify` catches
a consistent rewrite. Only damaged checkpoints with `resume=True`: refused unless
`allow_fresh_start=True`. The manifest and these checks are ours, not a paper's. In full:
docs/zero.md, `parlab.zero.checkpoint_integrity`.
"""

from __future__ import annotations

import os
import pathlib
import warnings

from parlab.zero import dcp_format
from parlab.zero.checkpoint import (
    Checkpoint,
    committed,
    file_sha256,
    manifest_hash,
    read_meta,
    run_fields,
    steps_of,
)
from parlab.zero.run_lock import check_unlocked


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
    if steps != steps_of(path):
        found.append(f"{path / 'meta.pt'} says steps_done={steps!r} but its directory is "
                     f"{path.name}: altered or misplaced")
    checksums = meta.get("checksums") or {}
    if checksums and sorted(checksums) != sorted(f"rank{r}.pt" for r in range(world or 0)):
        found.append(f"{path / 'meta.pt'} says world_size={world!r} but lists rank files "
                     f"{sorted(checksums)}: altered")
    for name, digest in {**checksums, **(meta.get("dcp_checksums") or {})}.items():
        file = path / name
        if not file.exists():
            found.append(f"{file} is missing")
        elif file_sha256(file) != digest:
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


def check_options(cfg) -> None:
    """Before any process starts: the checkpoint options (`save_dir`, `save_every`, `resume`,
    `allow_fresh_start`, `resume_from`) of a run, each bad value named; then `check_resume` and,
    with resume_from, `check_resume_from`. Shared by ZeRO and plain data parallelism."""
    o = cfg.options
    if o["save_dir"] is not None and not isinstance(o["save_dir"], (str, os.PathLike)):
        raise ValueError(f"save_dir={o['save_dir']!r} must be a path or None")
    every = o["save_every"]
    if every and o["save_dir"] is None:
        raise ValueError(f"save_every={every} needs save_dir=")
    if o["resume"] and o["save_dir"] is None:
        raise ValueError(f"resume={o['resume']!r} needs save_dir=")
    if o["allow_fresh_start"] and not o["resume"]:
        raise ValueError("allow_fresh_start=True needs resume=True")
    if every:
        _check_writable(o["save_dir"])
    if o["resume"] and o["resume_from"] is not None:
        raise ValueError(f"resume={o['resume']!r} and resume_from={str(o['resume_from'])!r}: "
                         "choose one")
    if cfg.precision != "fp32" and (every or o["resume"]):
        raise ValueError(f"save_every={every!r} / resume={o['resume']!r} with precision="
                         f"{cfg.precision!r}: the sharded checkpoint keeps the 16-bit shards, not "
                         "the fp32 master weights; checkpoint in fp32")
    check_resume(cfg)
    if o["resume_from"] is not None:
        check_resume_from(cfg)


def model_shapes(cfg) -> dict:
    """{parameter name: shape} of the config's model, built on the meta device (no memory)."""
    import torch

    from parlab.engine.loop import build_model

    with torch.device("meta"):
        model = build_model(cfg)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def check_resume_from(cfg) -> None:
    """resume_from: a readable DCP checkpoint of this model (parlab's manifest, where it has one,
    intact) with fewer steps done than cfg.steps; every file read once, before any process."""
    o = cfg.options
    where = o["resume_from"]
    if not isinstance(where, (str, os.PathLike)):
        raise ValueError(f"resume_from={where!r} must be a path to a DCP checkpoint directory")
    if cfg.precision != "fp32":
        raise ValueError(f"resume_from={str(where)!r} with precision={cfg.precision!r}: resume "
                         "in fp32")
    if not pathlib.Path(where).is_dir():
        raise ValueError(f"resume_from={str(where)!r} is not a directory")
    if (pathlib.Path(where) / "meta.pt").exists():  # one of parlab's: its manifest's hashes first
        found = problems(where)
        if found:
            raise ValueError(f"resume_from={str(where)!r}: {'; '.join(found)}")
    saved = dcp_format.TorchCheckpoint(where, model_shapes(cfg))
    saved.check(cfg.steps)
    if not saved.optimizer:
        warnings.warn(f"resume_from={str(where)!r} holds no optimizer state: the optimizer "
                      "starts fresh", RuntimeWarning, stacklevel=4)


def _check_writable(directory) -> None:
    """save_dir must take a file now, not at the first save (after the ranks trained)."""
    import tempfile

    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".parlab-probe"):
            pass
    except OSError as err:
        raise ValueError(f"save_dir={str(directory)!r} is not a writable directory: "
                         f"{err.strerror or err}") from None
