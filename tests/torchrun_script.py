"""Run under torchrun by tests/test_torchrun.py: the same parlab.run, env:// rendezvous."""

import json
import sys

import parlab

result = parlab.run("ddp-naive", world_size=2, model="mlp", steps=2)
if result.config.world_size == 2:
    import os

    if os.environ["RANK"] == "0":
        with open(sys.argv[1], "w") as f:
            json.dump({"losses": result.losses, "state": {k: v.tolist() for k, v in result.state.items()},
                       "bytes": result.bytes_per_rank()}, f)
