"""Sharded checkpoints: resharding math, resume at another world size, a killed rank recovered."""

import time

import pytest
import torch

import parlab
from parlab.core.launch import RankError
from parlab.zero import checkpoint
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
    for rank in range(4):
        checkpoint.save(tmp_path, FakeComm(rank, 4), 1, [layout], [shards[rank]],
                        torch.optim.SGD([torch.zeros(1)]), [0.25])
    saved = checkpoint.Checkpoint(checkpoint.latest(tmp_path))
    assert torch.equal(saved.read_range("u", "param", 5, 10), flat[5:])  # new rank 1 of 2
    assert saved.files_read == [1, 2, 3]  # old chunks [3, 6), [6, 9), [9, 12): not rank 0's
    assert saved.world_size == 4 and saved.losses() == [1.0]  # 4 ranks × 0.25
    fresh = checkpoint.Checkpoint(checkpoint.latest(tmp_path))
    assert torch.equal(fresh.read_range("u", "param", 0, 5), flat[:5])
    assert fresh.files_read == [0, 1]
    assert torch.equal(fresh.read_range("u", "param", 8, 12), torch.tensor([9.0, 10, 0, 0]))
    assert torch.equal(saved.consolidate()["w"], flat)


def test_an_unfinished_save_is_ignored(tmp_path):
    (tmp_path / "step_000009").mkdir()  # shards written, meta.pt never committed
    (tmp_path / "step_000009" / "rank0.pt").write_bytes(b"partial")
    assert checkpoint.latest(tmp_path) is None


@pytest.mark.parametrize("scheme,before,after", [("zero3", 4, 2), ("zero3", 2, 4),
                                                 ("zero1", 4, 2), ("zero2", 2, 4)])
def test_resume_at_another_world_size_continues_the_same_run(tmp_path, uninterrupted, scheme,
                                                             before, after):
    parlab.run(scheme, world_size=before, steps=2, save_dir=str(tmp_path), save_every=2)
    resumed = parlab.run(scheme, world_size=after, steps=STEPS, save_dir=str(tmp_path),
                         resume=True)
    assert [out["first_step"] for out in resumed.outputs] == [2] * after
    assert resumed.outputs[0]["resumed_from"] == before
    comparison = resumed.compare(uninterrupted)  # losses of all 4 steps and final parameters
    assert comparison.match, comparison.problems
    assert {r["step"] for r in resumed.ledger} == {2, 3}  # only the last 2 steps ran


def test_a_killed_rank_fails_cleanly_and_the_restart_loses_nothing(tmp_path, uninterrupted):
    t0 = time.perf_counter()
    with pytest.raises(RankError, match="rank 1 was killed by signal SIGKILL"):
        parlab.run("zero3", world_size=2, steps=STEPS, save_dir=str(tmp_path), save_every=1,
                   fail_at_step=3, fail_rank=1, timeout=60)
    assert time.perf_counter() - t0 < 30  # noticed by the launcher, not by a timeout
    assert checkpoint.latest(tmp_path).name == "step_000003"
    restarted = parlab.run("zero3", world_size=2, steps=STEPS, save_dir=str(tmp_path),
                           resume=True)
    assert restarted.outputs[0]["first_step"] == 3
    assert restarted.compare(uninterrupted).match
    assert restarted.state.keys() == uninterrupted.state.keys()
    for name, value in restarted.state.items():
        assert torch.allclose(value, uninterrupted.state[name], rtol=1e-5, atol=1e-6), name


def test_checkpoint_files_are_plain_tensors(tmp_path):
    parlab.run("zero2", world_size=2, steps=1, save_dir=str(tmp_path), save_every=1)
    path = checkpoint.latest(tmp_path)
    for rank in range(2):
        data = torch.load(path / f"rank{rank}.pt", weights_only=True)
        assert set(data["units"]["root"]) == {"param", "step", "exp_avg", "exp_avg_sq"}
    full = checkpoint.Checkpoint(path).consolidate()
    assert set(full) == set(parlab.run("single", steps=1).state)
