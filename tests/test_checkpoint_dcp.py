"""Checkpoints PyTorch reads (`torch.distributed.checkpoint`), and PyTorch's that parlab resumes."""

import math
import shutil
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import parlab
from parlab.engine.loop import build_model, make_optimizer
from parlab.engine.run_config import make_config
from parlab.zero import checkpoint_integrity

STEPS = 4

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """zero3 at world size 2, a checkpoint every 2 steps: (its result, its save_dir)."""
    directory = tmp_path_factory.mktemp("zero3")
    return parlab.run("zero3", world_size=2, steps=STEPS, save_dir=str(directory),
                      save_every=2), directory


def _plain_load(config, step_dir) -> dict:
    """What a user does in a plain Python process: a fresh model, its state_dict, dcp.load."""
    model = build_model(config)
    state = model.state_dict()
    dcp.load(state, checkpoint_id=str(step_dir))
    model.load_state_dict(state)
    return dict(model.named_parameters())


def _equal(state: dict, expected: dict) -> None:
    assert sorted(state) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(state[name].detach(), tensor), name


def test_a_zero3_checkpoint_loads_into_a_plain_model(saved):
    result, directory = saved
    _equal(_plain_load(result.config, directory / "step_000004"), result.state)


@pytest.mark.parametrize("scheme", ["zero1", "zero2"])
def test_every_zero_stage_writes_a_checkpoint_a_plain_model_loads(scheme, tmp_path):
    result = parlab.run(scheme, world_size=2, steps=2, save_dir=str(tmp_path), save_every=2)
    _equal(_plain_load(result.config, tmp_path / "step_000002"), result.state)


def test_plain_data_parallelism_resumes_a_zero_checkpoint_and_writes_its_own(saved, tmp_path):
    """ddp-naive from zero3's step 2 (the DCP files, at the same world size here) to step 4,
    saving there: it equals the uninterrupted zero3 run, and its checkpoint loads in plain torch."""
    result, directory = saved
    ddp = parlab.run("ddp-naive", world_size=2, steps=STEPS, resume_from=str(directory / "step_000002"),
                     save_dir=str(tmp_path), save_every=STEPS)
    assert ddp.losses[:2] == result.losses[:2]  # parlab's checkpoint records its losses
    assert ddp.losses[2:] == pytest.approx(result.losses[2:], abs=1e-6)
    for name, tensor in result.state.items():
        assert torch.allclose(ddp.state[name], tensor, rtol=0, atol=1e-6), name
    _equal(_plain_load(ddp.config, tmp_path / "step_000004"), ddp.state)
    assert sorted(p.name for p in (tmp_path / "step_000004").iterdir()) == [
        ".metadata", "__0_0.distcp", "meta.pt", "rank0.pt", "rank1.pt"]


def _torch_checkpoint(config, step_dir, out) -> torch.optim.Optimizer:
    """A checkpoint PyTorch writes: parlab's step loaded into a plain model and AdamW with the
    documented state_dict API, then `dcp.save({"model", "optimizer"})` from this one process."""
    model = build_model(config)
    optimizer = make_optimizer(model.parameters(), config)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.load({**model_sd, "optimizer": optim_sd}, checkpoint_id=str(step_dir))
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(out))
    return optimizer


def test_a_checkpoint_pytorch_wrote_resumes_at_another_world_size_and_stage(saved, tmp_path):
    result, directory = saved
    optimizer = _torch_checkpoint(result.config, directory / "step_000002", tmp_path)
    assert {float(s["step"]) for s in optimizer.state.values()} == {2.0}  # AdamW's state came too
    resumed = parlab.run("zero2", world_size=1, steps=STEPS, resume_from=str(tmp_path))
    assert resumed.outputs[0].extras["first_step"] == 2
    assert all(math.isnan(x) for x in resumed.losses[:2])  # PyTorch's checkpoint has no losses
    assert resumed.losses[2:] == pytest.approx(result.losses[2:], abs=1e-6)
    for name, tensor in result.state.items():
        assert torch.allclose(resumed.state[name], tensor, rtol=0, atol=1e-6), name


def test_a_torch_fsdp2_checkpoint_resumes_in_parlab(saved, tmp_path):
    """torch-fsdp (FSDP2 `fully_shard`, world size 2) writes PyTorch's own DCP checkpoint with
    `dcp.save` of `get_state_dict` (DTensor shards, one .distcp per rank) after step 2; zero1 at
    world size 2 resumes it and equals the uninterrupted zero3 run."""
    result, _ = saved
    parlab.run("torch-fsdp", world_size=2, steps=2, dcp_dir=str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".metadata", "__0_0.distcp",
                                                          "__1_0.distcp"]
    resumed = parlab.run("zero1", world_size=2, steps=STEPS, resume_from=str(tmp_path))
    assert resumed.losses[2:] == pytest.approx(result.losses[2:], abs=1e-6)
    for name, tensor in result.state.items():
        assert torch.allclose(resumed.state[name], tensor, rtol=0, atol=1e-6), name


def _flip_byte(path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_damaged_dcp_file_is_refused_naming_it_before_any_process_starts(saved, tmp_path):
    _, directory = saved
    copy = tmp_path / "step_000004"
    shutil.copytree(directory / "step_000004", copy)
    _flip_byte(copy / "__0_0.distcp", 4000)
    with pytest.raises(ValueError, match=r"resume_from=.*__0_0\.distcp does not match its sha256"):
        make_config("zero2", world_size=2, steps=6, resume_from=str(copy))
    assert any("__0_0.distcp" in p for p in checkpoint_integrity.problems(copy))
    # PyTorch's own (no manifest, no hashes): a truncated data file, named before spawn
    theirs = tmp_path / "theirs"
    _torch_checkpoint(make_config("zero3", world_size=2, steps=STEPS), directory / "step_000002",
                      theirs)
    data = theirs / "__0_0.distcp"
    data.write_bytes(data.read_bytes()[:-5000])
    with pytest.raises(ValueError, match=r"theirs/__0_0\.distcp cannot be read"):
        make_config("zero2", world_size=2, steps=6, resume_from=str(theirs))


def test_a_checkpoint_of_another_model_is_refused_naming_what_differs(tmp_path):
    config = make_config("zero2", world_size=2, steps=3)
    state = build_model(config).state_dict()
    name = sorted(state)[0]
    state[name] = torch.zeros(3)
    dcp.save({**state, "step": torch.tensor(1)}, checkpoint_id=str(tmp_path / "shape"))
    with pytest.raises(ValueError, match=rf"'{name}' has shape \(3,\)"):
        make_config("zero2", world_size=2, steps=3, resume_from=str(tmp_path / "shape"))
    del state[name]
    dcp.save({**state, "step": torch.tensor(1)}, checkpoint_id=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=rf"lacks the model's parameters \['{name}'\]"):
        make_config("zero2", world_size=2, steps=3, resume_from=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"resume_from=.*nowhere' is not a directory"):
        make_config("zero2", world_size=2, steps=3, resume_from=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="shapes_only=True cannot run resume_from"):
        make_config("zero2", world_size=2, steps=3, shapes_only=True, clock="A100",
                    resume_from=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="choose one"):
        make_config("zero2", world_size=2, steps=3, save_dir=str(tmp_path), resume=True,
                    resume_from=str(tmp_path / "missing"))


def test_a_save_killed_before_its_manifest_leaves_no_dcp_checkpoint_of_that_step(saved, tmp_path):
    """A save writes `.metadata` last but one (DCP renames it into place) and `meta.pt` last; a
    step directory without `meta.pt` is no checkpoint to parlab, and resume skips it."""
    _, directory = saved
    copy = tmp_path / "run"
    shutil.copytree(directory, copy)
    (copy / "step_000004" / "meta.pt").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert checkpoint_integrity.latest(copy).name == "step_000002"
