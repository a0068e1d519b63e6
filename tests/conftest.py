import dataclasses
import hashlib
import pathlib
import shutil
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# ----------------------------------------------------------------------------- one cache of runs
def run_key(scheme: str, **kwargs) -> str:
    """What decides a run: its validated RunConfig (every default filled in), less `timeout`, which
    only bounds how long a broken run may hang. Two calls with the same key train the same run."""
    from parlab.engine.runner import make_config

    kwargs.pop("timeout", None)
    cfg = make_config(scheme, **kwargs)
    return repr(dataclasses.replace(cfg, timeout=0.0, options=dict(sorted(cfg.options.items()))))


def fingerprint(result) -> str:
    """A digest of everything a test reads from a result: a cached result must come back as it was
    stored, so a test that mutated one would fail the session (see `run_cached`)."""
    import torch

    from parlab.engine.runner import RunResult

    digest = hashlib.sha256()

    def tensors(state):
        for name, tensor in (state or {}).items():
            digest.update(name.encode())
            digest.update(tensor.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())

    if isinstance(result, RunResult):
        digest.update(repr((result.losses, result.ledger, result.timeline, result.memory,
                            result.step_times, result.config)).encode())
        tensors(result.state)
        for out in result.outputs:  # every rank's RankResult: its state as bytes, the rest as text
            fields = vars(out) if hasattr(out, "__dict__") else {"out": out}
            digest.update(repr({k: v for k, v in fields.items() if k != "state"}).encode())
            tensors(fields.get("state"))
    elif hasattr(result, "jobs"):  # parlab.serving's JobsResult: every job's RunResult and the rest
        for name, job in sorted(result.jobs.items()):
            digest.update(f"{name}:{fingerprint(job)}".encode())
        digest.update(repr({k: v for k, v in vars(result).items() if k != "jobs"}).encode())
    else:
        digest.update(repr(result).encode())
    return digest.hexdigest()


class RunCache:
    """`parlab.run` once per distinct run for the whole session, shared by every test file that
    asks for it (keyed by `run_key`); `memo` does the same for a launch of several runs at once."""

    def __init__(self):
        self.results: dict = {}
        self.prints: dict = {}
        self.calls = 0

    def __call__(self, scheme: str, world_size: int = 1, model: str = "gpt", optimizer: str = "adamw",
                 **options):
        import parlab

        options.update(world_size=world_size, model=model, optimizer=optimizer)
        return self.memo(("run", run_key(scheme, **options)), lambda: parlab.run(scheme, **options))

    def memo(self, key, build):
        self.calls += 1
        if key not in self.results:
            self.results[key] = build()
            self.prints[key] = fingerprint(self.results[key])
        return self.results[key]

    def mutated(self) -> list:
        return [key for key, result in self.results.items() if fingerprint(result) != self.prints[key]]


CACHE = RunCache()


@pytest.fixture(scope="session")
def run_cached():
    """`run_cached(scheme, world_size=1, model="gpt", optimizer="adamw", **options)`: the result of
    `parlab.run` with those arguments, launched once per session. A file binds its own defaults with
    `functools.partial(run_cached, steps=STEPS)`. Results are shared: never modify one."""
    yield CACHE
    mutated = CACHE.mutated()
    assert not mutated, f"tests modified {len(mutated)} cached results: {[str(k)[:200] for k in mutated]}"


def pytest_terminal_summary(terminalreporter):
    if CACHE.calls:
        terminalreporter.write_line(f"run cache: {len(CACHE.results)} launches for {CACHE.calls} "
                                    "requests (tests/conftest.py run_cached)")


# ----------------------------------------------------------------------------- checkpoints
@pytest.fixture
def ckdir(saved, tmp_path):
    """A private copy of the module's `saved` checkpoints (tests.helpers.saved_checkpoints), free
    to damage."""
    return pathlib.Path(shutil.copytree(saved[0], tmp_path / "ck"))


# ----------------------------------------------------------------------------- shards of the suite
def _shard() -> tuple[int, int]:
    import os

    spec = os.environ.get("PARLAB_UNIT_SHARD", "0/1")
    try:
        index, count = (int(part) for part in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"PARLAB_UNIT_SHARD={spec!r} must be 'i/n' with 0 <= i < n") from None
    if not 0 <= index < count:
        raise pytest.UsageError(f"PARLAB_UNIT_SHARD={spec!r} must be 'i/n' with 0 <= i < n")
    return index, count


def shard_of_files(seconds: dict, count: int, together: frozenset = frozenset()) -> dict:
    """{test file: shard}: the longest files first, each to the shard with the least time so far
    (Graham's LPT rule); `seconds` is each file's measured time (tests/durations.json, written by
    tools/durations.py from a run's build/test-unit.xml); a file missing there counts 1 s. The files
    in `together` go to one shard as one unit: those that share `run_cached`'s runs, which a
    shard launches once for all its files (split, each shard launched ~60 of them again)."""
    units = {name: (name,) for name in seconds if name not in together}
    if together:
        units[min(together)] = tuple(sorted(together))
    unit_seconds = {key: sum(seconds[name] for name in names) for key, names in units.items()}
    loads, where = [0.0] * count, {}
    for key in sorted(units, key=lambda n: (-unit_seconds[n], n)):
        shard = loads.index(min(loads))
        where.update({name: shard for name in units[key]})
        loads[shard] += unit_seconds[key]
    return where


def pytest_collection_modifyitems(config, items):
    """PARLAB_UNIT_SHARD="i/n" keeps the test files of shard i of n (`make unit` runs the suite as
    two shards beside the browser test: a rank waiting on a peer or a fault test waiting for its
    timeout leaves a core idle, which the other shard uses)."""
    import json

    index, count = _shard()
    if count == 1:
        return
    measured = json.loads((ROOT / "tests" / "durations.json").read_text())
    files = sorted({item.path.name for item in items})
    sharing = frozenset(item.path.name for item in items if "run_cached" in item.fixturenames)
    where = shard_of_files({name: measured.get(name, 1.0) for name in files}, count, sharing)
    keep = [item for item in items if where[item.path.name] == index]
    config.hook.pytest_deselected(items=[item for item in items if where[item.path.name] != index])
    items[:] = keep
