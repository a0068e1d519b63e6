"""Under torchrun the same code joins the env:// rendezvous (gloo on CPU) and matches single:
several runs in one process (each its own namespace of the store), `single` as a local run, and
two torchrun "nodes" on loopback."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest
import torch

import parlab

HERE = pathlib.Path(__file__).resolve().parent
ENV = {**os.environ, "PYTHONPATH": str(HERE.parent), "OMP_NUM_THREADS": "1"}


def _check(got: dict, model: str) -> None:
    ref = parlab.run("single", model=model, steps=2)
    for name, run in got.items():
        assert run["match"], f"{name} under torchrun differs from single (compared there)"
        assert max(abs(a - b) for a, b in zip(run["losses"], ref.losses)) < 1e-5, name
        assert run["state"].keys() == ref.state.keys(), name
        for key, value in ref.state.items():
            assert torch.allclose(torch.tensor(run["state"][key]), value, atol=1e-5), (name, key)


def test_several_runs_and_single_in_one_torchrun_process(tmp_path):
    """Four runs in one process (three distributed, one `single`): before each run had its own
    store namespace, a later run read the previous run's addresses and hung or failed; `single`
    failed with `world_size=1 but WORLD_SIZE=2`."""
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", str(HERE / "torchrun_script.py"), str(out),
                           "ddp-naive,zero3,ddp-naive,single", "mlp"],
                          capture_output=True, text=True, timeout=300, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())
    assert set(got) == {"ddp-naive", "zero3", "single"}
    assert got["ddp-naive"]["bytes"][0] > 0 and got["single"]["bytes"] == [0]
    _check(got, "mlp")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_torchrun_nodes_on_loopback_match_single(tmp_path):
    """--nnodes 2, one process per node, static rendezvous on 127.0.0.1: a data-parallel scheme,
    ZeRO-3 and tensor parallelism (tp=2) each equal to single."""
    out, port = tmp_path / "result.json", _free_port()
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                               "--node-rank", str(node), "--nproc-per-node", "1",
                               "--master-addr", "127.0.0.1", "--master-port", str(port),
                               str(HERE / "torchrun_script.py"), str(out), "ddp-naive,zero3,tp"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
             for node in (0, 1)]
    try:
        outputs = [node.communicate(timeout=400) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    for node, (_, err) in zip(nodes, outputs):
        assert node.returncode == 0, err[-3000:]
    got = json.loads(out.read_text())
    assert set(got) == {"ddp-naive", "zero3", "tp"}
    assert all(run["bytes"][0] > 0 for run in got.values())
    _check(got, "gpt")


@pytest.mark.slow
def test_elastic_restart_resumes_from_the_last_checkpoint_and_equals_an_uninterrupted_run(tmp_path):
    """--max-restarts: rank 1 is killed mid-run, torchrun restarts both workers, the run resumes
    from the checkpoint of step 3 and ends with the losses and parameters of a run never killed."""
    out, save = tmp_path / "result.json", tmp_path / "ckpt"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", "--max-restarts", "2",
                           str(HERE / "torchrun_elastic.py"), str(out), str(save)],
                          capture_output=True, text=True, timeout=400, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())
    # restarted after the kill and resumed from a committed checkpoint (step 3, or later if a
    # restarted attempt itself died: seen once in 20 runs, a C++ abort in the second attempt, so
    # the agent may restart twice)
    assert got["attempt"] >= 1 and got["first_step"] >= 3
    ref = parlab.run("single", model="mlp", steps=6)
    assert max(abs(a - b) for a, b in zip(got["losses"], ref.losses)) < 1e-5
    for key, value in ref.state.items():
        assert torch.allclose(torch.tensor(got["state"][key]), value, atol=1e-5), key
