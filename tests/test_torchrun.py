"""Under torchrun the same code joins the env:// rendezvous (gloo on CPU) and matches single."""

import json
import os
import pathlib
import subprocess
import sys

import torch

import parlab

HERE = pathlib.Path(__file__).resolve().parent


def test_ddp_naive_under_torchrun_matches_single(tmp_path):
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(HERE.parent), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", str(HERE / "torchrun_script.py"), str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())
    ref = parlab.run("single", model="mlp", steps=2)
    assert max(abs(a - b) for a, b in zip(got["losses"], ref.losses)) < 1e-5
    for name, value in ref.state.items():
        assert torch.allclose(torch.tensor(got["state"][name]), value, atol=1e-5)
    assert got["bytes"][0] > 0
