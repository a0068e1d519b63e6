"""Checkpoints PyTorch reads, and PyTorch's checkpoints parlab resumes: the DCP layout.

Every committed `step_<k>/` of a `save_dir` is also a `torch.distributed.checkpoint` (DCP)
checkpoint (`.metadata` and `__0_0.distcp`, written by rank 0 with `no_dist=True`), keyed as
PyTorch's own tools key it, so one plain process reads it back:

    model = GPT(config)                       # freshly built
    sd = model.state_dict()
    dcp.load(sd, checkpoint_id="runs/a/step_000004")
    model.load_state_dict(sd)                 # the trained weights (= r.state)

`TorchCheckpoint` resumes a checkpoint PyTorch wrote, resharding to any world size; only tensors
are read (`weights_only=True`). The keys, the checksums, why rank 0 holds the whole state while
it writes, and what resuming accepts: docs/zero.md, `parlab.zero.dcp_format`.
"""

from __future__ import annotations

import pathlib
import warnings

import torch

METADATA = ".metadata"
MODEL_PREFIXES = ("", "model.")
OPTIMIZER_PREFIXES = ("optimizer.", "optim.")


def _rank_data(path: pathlib.Path, world: int) -> list[dict]:
    return [torch.load(path / f"rank{r}.pt", weights_only=True) for r in range(world)]


def full_state(path, world: int, layouts, names: list[str], extra: dict, optimizer,
               steps_done: int, losses: list[float] | None) -> dict:
    """The DCP state dict of the shards every rank wrote to `path`: model parameters at the top
    level (in `names` order, plus `extra`, e.g. buffers), "optimizer" as
    `get_optimizer_state_dict` lays it out, "step" and "losses" (tensors)."""
    from parlab.zero.shard import unpad_concat

    ranks = _rank_data(pathlib.Path(path), world)
    params, state = {}, {}
    for layout in layouts:
        unit = [data["units"][layout.name] for data in ranks]
        for key in unit[0]:
            parts = [u[key] for u in unit]
            if parts[0].dim() == 0:  # a step count: the same on every rank and every parameter
                per_param = {name: parts[0].clone() for name, *_ in layout.offsets()}
            else:
                per_param = layout.unflatten(unpad_concat(parts, layout.numel))
            if key == "param":
                params.update(per_param)
            else:
                for name, tensor in per_param.items():
                    state.setdefault(name, {})[key] = tensor
    group = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
    out = {name: params[name] for name in names if name in params}
    out.update(extra)
    out["optimizer"] = {"state": {name: state[name] for name in names if name in state},
                        "param_groups": [{**group, "params": [n for n in names if n in params]}]}
    out["step"] = torch.tensor(steps_done)
    if losses is not None:
        out["losses"] = torch.tensor(losses, dtype=torch.float64)  # (steps_done,)
    return out


def write(path, state: dict) -> list[str]:
    """Write `state` as a DCP checkpoint in `path` from this one process; the files written."""
    import torch.distributed.checkpoint as dcp

    path = pathlib.Path(path)
    (path / METADATA).unlink(missing_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "assuming ... a single process": we are
        dcp.save(state, storage_writer=dcp.FileSystemWriter(path), no_dist=True)
    return files(path)


def read_metadata(path):
    """DCP's Metadata of the checkpoint in `path`; a ValueError naming the file otherwise."""
    from torch.distributed.checkpoint import FileSystemReader

    file = pathlib.Path(path) / METADATA
    if not file.exists():
        raise ValueError(f"{file} is missing: {path} is not a torch.distributed.checkpoint "
                         "checkpoint (or its save did not finish)")
    try:
        return FileSystemReader(str(path)).read_metadata()
    except Exception as err:  # noqa: BLE001 - name the file whatever went wrong
        raise ValueError(f"{file} cannot be read ({type(err).__name__}: {err}): damaged, or not "
                         "a DCP checkpoint") from None


def files(path) -> list[str]:
    """The DCP checkpoint's files: `.metadata` and every data file it refers to."""
    md = read_metadata(path)
    return [METADATA] + sorted({info.relative_path for info in md.storage_data.values()})


def _is_tensor(entry) -> bool:
    return hasattr(entry, "chunks")  # TensorStorageMetadata (BytesStorageMetadata has none)


class TorchCheckpoint:
    """A DCP checkpoint, parlab's or PyTorch's, read as full tensors for parameters `names`."""

    def __init__(self, path, shapes: dict[str, tuple]):
        self.path = pathlib.Path(path)
        self.md = read_metadata(self.path)
        entries = self.md.state_dict_metadata
        self.shapes = shapes
        self.problems: list[str] = []
        prefix = next((p for p in MODEL_PREFIXES if all(p + n in entries for n in shapes)), None)
        if prefix is None:
            missing = [n for n in shapes if n not in entries and "model." + n not in entries]
            self.problems.append(f"{self.path} lacks the model's parameters {missing[:4]}"
                                 f"{' ...' if len(missing) > 4 else ''} (neither at the top level "
                                 f"nor under 'model.'); it holds {sorted(entries)[:6]} ...")
            return
        self.model = {n: prefix + n for n in shapes}
        for name, key in self.model.items():
            entry = entries[key]
            if not _is_tensor(entry) or tuple(entry.size) != tuple(shapes[name]):
                got = tuple(entry.size) if _is_tensor(entry) else "not a tensor"
                self.problems.append(f"{self.path}: {key!r} has shape {got}, this model's "
                                     f"{name} has {tuple(shapes[name])}")
        self.optimizer: dict[str, dict[str, str]] = {}
        for p in OPTIMIZER_PREFIXES:
            found = {n: {k[len(f"{p}state.{n}."):]: k for k in entries
                         if k.startswith(f"{p}state.{n}.") and _is_tensor(entries[k])}
                     for n in shapes}
            if any(found.values()):
                self.optimizer = found
                break
        step = entries.get("step")
        self.step_key = "step" if step is not None and _is_tensor(step) and not step.size else None
        adam = [k for keys in self.optimizer.values() for s, k in keys.items() if s == "step"]
        if self.step_key is None and adam:
            self.step_key = adam[0]
        if self.step_key is None:
            self.problems.append(f"{self.path} records no steps done: save a tensor 'step' "
                                 "(e.g. {'step': torch.tensor(k)}) or an AdamW state")
        losses = entries.get("losses")
        self.has_losses = losses is not None and _is_tensor(losses) and len(losses.size) == 1

    def _read(self, keys: list[str]) -> dict:
        import torch.distributed.checkpoint as dcp

        entries = self.md.state_dict_metadata
        target = {k: torch.empty(tuple(entries[k].size), dtype=entries[k].properties.dtype)
                  for k in keys}
        from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                dcp.load(target, storage_reader=dcp.FileSystemReader(str(self.path)), no_dist=True)
        except (Exception, CheckpointException) as err:  # noqa: BLE001 - name the damaged file
            raise ValueError(f"{self._culprit()} cannot be read ({type(err).__name__}: "
                             f"{str(err)[:300]}): damaged or truncated") from None
        return target

    def _culprit(self) -> str:
        """The data file a failed read most likely came from: the first one missing or too
        short for what `.metadata` says it holds; otherwise all of them."""
        ends: dict[str, int] = {}
        for info in self.md.storage_data.values():
            ends[info.relative_path] = max(ends.get(info.relative_path, 0), info.offset + info.length)
        for name, end in sorted(ends.items()):
            file = self.path / name
            if not file.exists() or file.stat().st_size < end:
                return str(file)
        return "checkpoint file(s) " + ", ".join(str(self.path / n) for n in sorted(ends))

    def steps_done(self) -> int:
        return int(self._read([self.step_key])[self.step_key].item())

    def load(self) -> tuple[dict, dict, int, list[float] | None]:
        """({name: full tensor}, {name: {state key: tensor}}, steps done, losses or None)."""
        keys = list(self.model.values()) + [k for ks in self.optimizer.values() for k in ks.values()]
        keys += [self.step_key] + (["losses"] if self.has_losses else [])
        data = self._read(list(dict.fromkeys(keys)))
        params = {n: data[k] for n, k in self.model.items()}
        state = {n: {s: data[k] for s, k in ks.items()} for n, ks in self.optimizer.items() if ks}
        steps = int(data[self.step_key].item())
        losses = data["losses"].tolist() if self.has_losses else None
        return params, state, steps, losses

    def check(self, steps: int) -> int:
        """Before any process starts: everything readable and fitting; the steps done."""
        if self.problems:
            raise ValueError("; ".join(self.problems))
        done = self.load()[2]
        if steps <= done:
            raise ValueError(f"steps={steps} but checkpoint {self.path} has {done} steps done: "
                             f"resuming needs steps > {done}")
        return done


def load_into(ckpt: TorchCheckpoint, units, optimizer, world: int, rank: int):
    """Fill each unit's shard (and its optimizer state, where the checkpoint has it) for `rank`
    of `world` from the full tensors; (steps done, losses or None)."""
    params, state, steps, losses = ckpt.load()
    for unit in units:
        names = [name for name, *_ in unit.layout.offsets()]
        lo, hi = unit.layout.shard_range(world, rank)

        def flat(tensors, unit=unit):  # (padded,)
            return unit.flatten([t.to(unit.params[0].dtype) for t in tensors])

        with torch.no_grad():
            whole = flat([params[n] for n in names])
            if getattr(unit, "flat", None) is not None:  # stages 1, 2: every rank holds it all
                unit.flat.copy_(whole)
            else:  # stage 3: only the own shard
                unit.shard.copy_(whole[lo:hi])
        keys = set.intersection(*(set(state.get(n, ())) for n in names))
        own = {}
        for key in sorted(keys):
            first = state[names[0]][key]
            own[key] = first.clone() if first.dim() == 0 else \
                flat([state[n][key] for n in names])[lo:hi].clone()
        if own:
            optimizer.state[unit.shard] = own
    return steps, losses

