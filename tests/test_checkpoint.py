"""Sharded checkpoints: resharding math, resume at another world size, a killed rank recovered."""

import pathlib

import pytest
import torch

import parlab
from parlab.core.launch import RankError
from parlab.zero import checkpoint, checkpoint_integrity
from parlab.zero.shard import FlatLayout, assemble_state, reshard

STEPS = 4


@pytest.fixture(scope="module")
def uninterrupted():
    return parlab.run("zero3", world_size=2, steps=STEPS)


def test_reshard_round_trip_keeps_every_element():
    layout = FlatLayout("u", (("a", (3, 5)), ("b", (7,))))  # 22 elements
    flat = torch.arange(22, dtype=torch.float32)
    four = reshard([flat], 22, 4)
    assert [s.numel() for s in four] == [6, 6, 6, 6] and four[-1][-2:].eq(0).all()  # padded to 24
    three = reshard(four, 22, 3)
    assert [s.numel() for s in three] == [8, 8, 8]
    state = assemble_state([layout], [{"u": s} for s in three])
    assert torch.equal(state["a"], flat[:15].reshape(3, 5)) and torch.equal(state["b"], flat[15:])


class FakeComm:
    """Enough of a Comm for `checkpoint.save` in one process: a rank, a size, a no-op barrier."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def barrier(self, phase=None):
        pass


def test_a_new_rank_reads_only_the_old_files_it_overlaps(tmp_path):
    layout = FlatLayout("u", (("w", (10,)),))  # 10 elements; 4 ranks hold 3 each (2 padding)
    flat = torch.arange(10, dtype=torch.float32) + 1
    shards = reshard([flat], 10, 4)
    for rank in reversed(range(4)):  # rank 0 commits last, as after the barrier of a real run
        checkpoint.save(tmp_path, FakeComm(rank, 4), 1, [layout], [shards[rank]],
                        torch.optim.SGD([torch.zeros(1)]), [0.25])
    saved = checkpoint.Checkpoint(checkpoint_integrity.latest(tmp_path))
    assert torch.equal(saved.read_range("u", "param", 5, 10), flat[5:])  # new rank 1 of 2
    assert saved.files_read == [1, 2, 3]  # old chunks [3, 6), [6, 9), [9, 12): not rank 0's
    assert saved.world_size == 4 and saved.losses() == [1.0]  # 4 ranks × 0.25
    fresh = checkpoint.Checkpoint(checkpoint_integrity.latest(tmp_path))
    assert torch.equal(fresh.read_range("u", "param", 0, 5), flat[:5])
    assert fresh.files_read == [0, 1]
    assert torch.equal(fresh.read_range("u", "param", 8, 12), torch.tensor([9.0, 10, 0, 0]))
    assert torch.equal(saved.consolidate()["w"], flat)


def test_an_unfinished_save_is_ignored(tmp_path):
    (tmp_path / "step_000009").mkdir()  # shards written, meta.pt never committed
    (tmp_path / "step_000009" / "rank0.pt").write_bytes(b"partial")
    assert checkpoint_integrity.latest(tmp_path) is None


@pytest.mark.parametrize("scheme,before,after", [("zero3", 4, 2), ("zero3", 2, 4),
                                                 ("zero1", 4, 2), ("zero2", 2, 4)])
def test_resume_at_another_world_size_continues_the_same_run(tmp_path, uninterrupted, scheme,
                                                             before, after):
    parlab.run(scheme, world_size=before, steps=2, save_dir=str(tmp_path), save_every=2)
    resumed = parlab.run(scheme, world_size=after, steps=STEPS, save_dir=str(tmp_path),
                         resume=True)
    assert [out.extras["first_step"] for out in resumed.outputs] == [2] * after
    assert resumed.outputs[0].extras["resumed_from"] == before
    comparison = resumed.compare(uninterrupted)  # losses of all 4 steps and final parameters
    assert comparison.match, comparison.problems
    assert {r["step"] for r in resumed.ledger} == {2, 3}  # only the last 2 steps ran


def test_a_killed_rank_fails_cleanly_and_the_restart_loses_nothing(tmp_path, uninterrupted):
    # noticed by the launcher (the kill is named), not by the 60 s timeout ("timed out")
    with pytest.raises(RankError, match="rank 1 was killed by signal SIGKILL") as info:
        parlab.run("zero3", world_size=2, steps=STEPS, save_dir=str(tmp_path), save_every=1,
                   fail_at_step=3, fail_rank=1, timeout=60)
    assert "timed out" not in str(info.value)
    assert checkpoint_integrity.latest(tmp_path).name == "step_000003"
    restarted = parlab.run("zero3", world_size=2, steps=STEPS, save_dir=str(tmp_path),
                           resume=True)
    assert restarted.outputs[0].extras["first_step"] == 3
    assert restarted.compare(uninterrupted).match
    assert restarted.state.keys() == uninterrupted.state.keys()
    for name, value in restarted.state.items():
        assert torch.allclose(value, uninterrupted.state[name], rtol=1e-5, atol=1e-6), name


def test_checkpoint_files_are_plain_tensors(tmp_path):
    parlab.run("zero2", world_size=2, steps=1, save_dir=str(tmp_path), save_every=1)
    path = checkpoint_integrity.latest(tmp_path)
    for rank in range(2):
        data = torch.load(path / f"rank{rank}.pt", weights_only=True)
        assert set(data["units"]["root"]) == {"param", "step", "exp_avg", "exp_avg_sq"}
    full = checkpoint.Checkpoint(path).consolidate()
    assert set(full) == set(parlab.run("single", steps=1).state)


# ----------------------------------------------------------------------------- issue 22: 5, 6, 7, 8
# A resume that cannot go wrong silently: the manifest, up-front refusals, checksums, keep=.
import warnings  # noqa: E402

from parlab.engine.runner import make_config  # noqa: E402
from tests.helpers import saved_checkpoints  # noqa: E402

saved = saved_checkpoints(STEPS)  # zero2, 2 ranks, 4 steps (keep=2: steps 3 and 4 stay); ckdir: a copy


def test_the_manifest_records_the_run_and_a_checksum_per_shard(saved):
    meta = checkpoint.read_meta(checkpoint_integrity.latest(saved[0]))
    assert meta["run"] == {"family": "zero", "model": "gpt", "seed": 0, "optimizer": "adamw",
                           "lr": 3e-3, "batch_size": 12,
                           "model_config": {"vocab_size": 96, "block_size": 32, "n_layer": 4,
                                            "n_head": 4, "n_embd": 32, "n_kv_head": None,
                                            "mlp": "gelu", "d_ff": None, "norm": "layernorm",
                                            "norm_eps": 1e-5, "positions": "learned",
                                            "rope_theta": 10000.0, "tie_head": True}}
    assert meta["config_hash"] == checkpoint.config_hash(meta["run"])
    assert set(meta["checksums"]) == {"rank0.pt", "rank1.pt"}


def test_only_the_last_keep_checkpoints_stay(saved, tmp_path):
    assert [p.name for p in checkpoint.committed(saved[0])] == ["step_000003", "step_000004"]
    parlab.run("zero1", world_size=2, steps=3, save_dir=str(tmp_path), save_every=1, keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000003"]


@pytest.mark.parametrize("change,field", [
    (dict(model_config={"n_layer": 2}), "model_config.n_layer: checkpoint 4, this run 2"),
    (dict(seed=1), "seed: checkpoint 0, this run 1"),
    (dict(optimizer="sgd"), "optimizer: checkpoint 'adamw', this run 'sgd'"),
    (dict(lr=1e-3), "lr: checkpoint 0.003, this run 0.001"),
    (dict(batch_size=8), "batch_size: checkpoint 12, this run 8"),
    (dict(model="mlp"), "model: checkpoint 'gpt', this run 'mlp'"),
])
def test_a_resume_into_another_run_is_refused_before_any_process(ckdir, change, field):
    with pytest.raises(ValueError, match="another run") as info:
        make_config("zero3", **{"world_size": 2, "steps": 6, "save_dir": str(ckdir),
                                "resume": True, **change})
    assert field in str(info.value)


def test_world_size_and_stage_may_change_on_resume(ckdir):
    for scheme, world in (("zero3", 4), ("zero1", 1), ("zero2", 3)):
        make_config(scheme, world_size=world, steps=6, save_dir=str(ckdir), resume=True)


def test_a_resume_into_another_family_is_refused(ckdir):
    meta = checkpoint.read_meta(checkpoint_integrity.latest(ckdir))
    fields = {**meta["run"], "family": "ddp-naive"}
    assert checkpoint_integrity.differences(meta["run"], fields) == \
        ["family: checkpoint 'zero', this run 'ddp-naive'"]


def test_a_reused_save_dir_of_another_run_is_refused(ckdir):
    with pytest.raises(ValueError, match=r"already holds checkpoint step_00000\d of another run.*"
                                         r"seed: checkpoint 0, this run 7"):
        make_config("zero2", world_size=2, steps=4, seed=7, save_dir=str(ckdir), save_every=1)
    make_config("zero2", world_size=2, steps=4, save_dir=str(ckdir), save_every=1)  # same run: ok


@pytest.mark.parametrize("steps", [2, 4])
def test_resume_with_no_steps_left_is_refused_up_front(ckdir, steps):
    with pytest.raises(ValueError, match=f"steps={steps} but checkpoint .*step_000004 has 4 steps "
                                         "done: resuming needs steps > 4"):
        make_config("zero3", world_size=2, steps=steps, save_dir=str(ckdir), resume=True)


def test_resume_without_a_checkpoint_warns_or_refuses(tmp_path):
    with pytest.warns(RuntimeWarning, match="holds no complete checkpoint: the run starts at step 0"):
        make_config("zero3", world_size=2, save_dir=str(tmp_path), resume=True)
    with pytest.raises(ValueError, match="resume='must' but save_dir=.* holds no complete"):
        make_config("zero3", world_size=2, save_dir=str(tmp_path), resume="must")
    with pytest.raises(ValueError, match="resume='yes'"):
        make_config("zero3", world_size=2, save_dir=str(tmp_path), resume="yes")


def _flip(file: pathlib.Path, offset: int = -100) -> None:
    data = bytearray(file.read_bytes())
    data[offset] ^= 0xFF
    file.write_bytes(bytes(data))


def test_a_damaged_shard_is_named_and_the_previous_checkpoint_is_used(ckdir, saved):
    _flip(ckdir / "step_000004" / "rank1.pt")
    with pytest.warns(RuntimeWarning, match=r"step_000004/rank1.pt does not match its sha256.*"
                                            "falling back to the previous complete checkpoint"):
        assert checkpoint_integrity.latest(ckdir).name == "step_000003"
    with pytest.raises(ValueError, match=r"step_000004/rank1.pt does not match its sha256"):
        checkpoint.Checkpoint(ckdir / "step_000004").rank_file(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        resumed = parlab.run("zero2", world_size=2, steps=STEPS, save_dir=str(ckdir), resume=True)
    assert {r["step"] for r in resumed.ledger} == {3}  # only step 3 ran again: from step_000003
    comparison = resumed.compare(saved[1])
    assert comparison.match, comparison.problems


def test_a_truncated_shard_names_its_file(ckdir):
    file = ckdir / "step_000004" / "rank0.pt"
    file.write_bytes(file.read_bytes()[:50])
    saved = checkpoint.Checkpoint(ckdir / "step_000004")
    saved.checksums = {}  # as an older manifest without checksums: the load itself must name it
    with pytest.raises(ValueError, match=r"step_000004/rank0.pt cannot be loaded \(truncated"):
        saved.rank_file(0)


def test_interrupted_saves_leave_no_temporary_files(tmp_path):
    layout = FlatLayout("u", (("w", (4,)),))
    (tmp_path / "step_000001").mkdir()  # an interrupted save: shards, no meta.pt
    (tmp_path / "step_000001" / "rank0.pt").write_bytes(b"partial")
    (tmp_path / "step_000001" / "rank1.pt.tmp4242").write_bytes(b"half")
    (tmp_path / "step_000002").mkdir()
    (tmp_path / "step_000002" / "rank0.pt.tmp4243").write_bytes(b"half")
    checkpoint.save(tmp_path, FakeComm(0, 1), 2, [layout], [torch.ones(4)],
                    torch.optim.SGD([torch.zeros(1)]), [0.5])
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == ["step_000002", "step_000002/.metadata", "step_000002/__0_0.distcp",
                    "step_000002/meta.pt", "step_000002/rank0.pt"]  # DCP's files, then ours


def test_a_checkpoint_with_more_blocks_than_the_model_is_refused(ckdir):
    class Unit:
        def __init__(self, name, layout):
            self.name, self.layout = name, layout

    saved = checkpoint.Checkpoint(checkpoint_integrity.latest(ckdir))
    units = [Unit(n, lay) for n, lay in saved.layouts.items() if not n.endswith("3")]
    with pytest.raises(ValueError, match="holds units .* that this model does not have"):
        checkpoint.load_into(saved, units, None, 2, 0)


def test_an_unwritable_save_dir_is_refused_before_any_process(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ValueError, match="save_dir=.*file/ck.* is not a writable directory"):
        make_config("zero3", world_size=2, save_dir=str(tmp_path / "file" / "ck"), save_every=1)
