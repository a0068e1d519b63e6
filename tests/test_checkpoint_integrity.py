"""Checkpoints that cannot be resumed wrongly (issue 35, item 4): meta.pt is covered by a hash
like every rank file, a consistent rewrite of it is caught before any rank loads, a resume that
finds only damaged checkpoints is refused, and two runs cannot write one save_dir at once."""

import os
import pathlib
import shutil
import warnings

import pytest
import torch

import parlab
from parlab.core.launch import RankError, launch
from parlab.engine.runner import make_config
from parlab.zero import checkpoint, checkpoint_integrity, run_lock
from tests import workers_faults
from tests.helpers import saved_checkpoints

STEPS = 2
saved = saved_checkpoints(STEPS)  # zero2, 2 ranks: step_000001 and step_000002; ckdir: a copy


def _resume(directory, steps=STEPS + 1, **options):
    return make_config("zero3", world_size=2, steps=steps, save_dir=str(directory),
                       **{"resume": True, **options})


def _flip_bit(file: pathlib.Path, bit: int) -> None:
    data = bytearray(file.read_bytes())
    data[bit // 8] ^= 1 << (bit % 8)
    file.write_bytes(bytes(data))


def test_a_run_leaves_no_lock_and_the_manifest_hashes_itself(saved):
    directory = saved[0]
    assert not (directory / run_lock.LOCK_NAME).exists()
    meta = checkpoint.read_meta(directory / "step_000002")
    assert meta["manifest_sha256"] == checkpoint.manifest_hash(meta)
    assert checkpoint_integrity.verify(directory / "step_000002") == []


def test_every_bit_flip_of_meta_is_caught_or_harmless(saved, tmp_path):
    """24 single-bit flips spread over meta.pt: each one is either refused as damaged (and the
    resume falls back to step_000001, before any process starts) or changed nothing meta says."""
    original = checkpoint.read_meta(saved[0] / "step_000002")
    size = (saved[0] / "step_000002" / "meta.pt").stat().st_size
    caught = 0
    for i, bit in enumerate(range(7, size * 8, size * 8 // 24)):
        directory = pathlib.Path(shutil.copytree(saved[0], tmp_path / f"ck{i}"))
        _flip_bit(directory / "step_000002" / "meta.pt", bit)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            cfg = _resume(directory)  # never "another run", never an exception
        found = checkpoint_integrity.problems(directory / "step_000002")
        if found:
            caught += 1
            assert checkpoint_integrity.latest(directory, warn=False).name == "step_000001", bit
            assert any("step_000002/meta.pt" in str(w.message) for w in seen), bit
        else:
            assert checkpoint.read_meta(directory / "step_000002") == original, bit
        assert cfg.options["resume"] is True
    assert caught >= 12  # measured: 19 of 24; the other 5 hit bytes torch.load does not return


def test_an_edited_meta_without_its_hash_is_damaged(ckdir):
    meta = checkpoint.read_meta(ckdir / "step_000002")
    meta["run"]["seed"] = 7  # would otherwise read as "written by another run"
    torch.save(meta, ckdir / "step_000002" / "meta.pt")
    assert checkpoint_integrity.problems(ckdir / "step_000002") == [
        f"{ckdir / 'step_000002' / 'meta.pt'} does not match its own sha256 (manifest_sha256): "
        "damaged or altered"]
    with pytest.warns(RuntimeWarning, match="falling back"):
        _resume(ckdir)  # resumes from step_000001 instead of refusing as "another run"


def _rewrite(directory: pathlib.Path, steps_done: int) -> None:
    """A consistent rewrite: a valid manifest with another steps_done, its own hash recomputed."""
    meta = checkpoint.read_meta(directory)
    meta["steps_done"] = steps_done
    meta["manifest_sha256"] = checkpoint.manifest_hash(meta)
    torch.save(meta, directory / "meta.pt")


def test_a_consistent_rewrite_of_steps_done_falls_back_and_the_resume_is_right(ckdir, saved):
    _rewrite(ckdir / "step_000002", 1)
    with pytest.warns(RuntimeWarning, match=r"steps_done=1 but its directory is step_000002"):
        assert checkpoint_integrity.latest(ckdir).name == "step_000001"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        resumed = parlab.run("zero2", world_size=2, steps=STEPS, save_dir=str(ckdir), resume=True)
    assert resumed.outputs[0].extras["first_step"] == 1  # from step_000001, no IndexError
    comparison = resumed.compare(saved[1])
    assert comparison.match, comparison.problems


@pytest.mark.filterwarnings("ignore:checkpoint .* is not usable:RuntimeWarning")
def test_a_rewrite_moved_to_its_own_name_is_caught_by_the_losses(ckdir):
    """steps_done 2 -> 1 and the directory renamed to match: the rank files still hold 2 losses."""
    shutil.rmtree(ckdir / "step_000001")
    _rewrite(ckdir / "step_000002", 1)
    (ckdir / "step_000002").rename(ckdir / "step_000001")
    assert checkpoint_integrity.problems(ckdir / "step_000001") == []  # the checksums all hold
    assert "holds 2 losses but meta.pt says steps_done=1" in "; ".join(
        checkpoint_integrity.verify(ckdir / "step_000001"))
    with pytest.raises(ValueError, match="every checkpoint in save_dir=.* is damaged .*holds 2 "
                                         "losses.*refusing to start again from step 0"):
        _resume(ckdir)


@pytest.mark.filterwarnings("ignore:checkpoint .* is not usable:RuntimeWarning")
def test_only_damaged_checkpoints_refuse_the_resume_unless_allowed(ckdir):
    for step in ("step_000001", "step_000002"):
        _flip_bit(ckdir / step / "rank1.pt", 8 * 200)
    for resume in (True, "must"):
        with pytest.raises(ValueError, match=r"every checkpoint in save_dir=.* is damaged "
                                             r"\(step_000001: .*rank1.pt does not match its "
                                             r"sha256.*allow_fresh_start=True"):
            _resume(ckdir, resume=resume)
    with pytest.warns(RuntimeWarning, match="only damaged checkpoints .*starts at step 0"):
        _resume(ckdir, allow_fresh_start=True)
    with pytest.raises(ValueError, match="allow_fresh_start=True needs resume=True"):
        make_config("zero2", world_size=2, save_dir=str(ckdir), allow_fresh_start=True)


def test_a_fresh_run_into_a_damaged_save_dir_is_refused(ckdir):
    _flip_bit(ckdir / "step_000002" / "meta.pt", 8 * 300)
    if not checkpoint_integrity.problems(ckdir / "step_000002"):  # pragma: no cover - a harmless byte
        pytest.skip("the flipped bit did not change meta.pt")
    with pytest.raises(ValueError, match="holds a damaged checkpoint step_000002"):
        make_config("zero2", world_size=2, steps=STEPS, save_dir=str(ckdir), save_every=1)


def test_a_second_run_on_a_locked_save_dir_is_refused(ckdir):
    run_lock.lock(ckdir)  # as rank 0 of a run in flight holds it
    try:
        for options in ({"save_every": 1}, {"resume": True}):
            with pytest.raises(ValueError, match=rf"save_dir=.* is in use by another run \(pid "
                                                 rf"{os.getpid()}\)"):
                make_config("zero2", world_size=2, steps=3, save_dir=str(ckdir), **options)
        # a rank that gets past the check (the other run started in between) is refused too
        with pytest.raises(RankError, match="is in use by another run"):
            launch(workers_faults.lock_save_dir, 1, str(ckdir), timeout=60)
    finally:
        run_lock.unlock(ckdir)
    assert not (ckdir / run_lock.LOCK_NAME).exists()
    make_config("zero2", world_size=2, steps=3, save_dir=str(ckdir), save_every=1)


def test_a_lock_file_left_by_a_killed_run_does_not_block(ckdir):
    (ckdir / run_lock.LOCK_NAME).write_text("pid 999999\n")  # its holder is gone: no flock
    make_config("zero2", world_size=2, steps=3, save_dir=str(ckdir), save_every=1)


def test_two_runs_started_at_once_into_one_save_dir_one_is_refused_before_spawn(tmp_path,
                                                                                 monkeypatch):
    """Issue 46: both runs passed the check before spawn and the second was refused only inside
    its rank 0. Here both pass it (a barrier after the configuration's checks), then race for
    the lock: the loser is refused in the launching process, naming save_dir, and never spawns."""
    import threading

    from parlab.engine import runner

    directory = tmp_path / "ck"
    checked = threading.Barrier(2, timeout=60)
    launched = []

    def make_config_then_meet(*args, **kwargs):
        cfg = make_config(*args, **kwargs)  # check_unlocked: the directory is free for both
        checked.wait()
        return cfg

    def launch_and_count(*args, **kwargs):
        launched.append(threading.current_thread().name)
        return launch(*args, **kwargs)

    monkeypatch.setattr(runner, "make_config", make_config_then_meet)
    monkeypatch.setattr(runner, "launch", launch_and_count)
    outcomes = {}

    def start(name):
        try:
            outcomes[name] = parlab.run("zero2", world_size=2, model="mlp", steps=2,
                                        save_dir=str(directory), save_every=1)
        except Exception as err:  # noqa: BLE001 - the test reads it
            outcomes[name] = err

    threads = [threading.Thread(target=start, args=(name,), name=name) for name in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    refused = [n for n, out in outcomes.items() if isinstance(out, Exception)]
    assert len(refused) == 1, outcomes
    err = outcomes[refused[0]]
    assert isinstance(err, run_lock.DirectoryInUse), err  # a ValueError, not a RankError
    assert f"save_dir={str(directory)!r} is in use by another run" in str(err)
    assert launched == [n for n in "ab" if n not in refused]  # the refused run never spawned
    winner = outcomes[launched[0]]
    assert len(winner.losses) == 2 and (directory / "step_000002").is_dir()
    assert not (directory / run_lock.LOCK_NAME).exists()  # released after the run
