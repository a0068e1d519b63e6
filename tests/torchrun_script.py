"""Run under torchrun by tests/test_torchrun.py: several parlab.run calls in one process.

    torchrun ... tests/torchrun_script.py OUT.json ddp-naive,zero3,tp,single

Each run uses env:// rendezvous (its own namespace of the store); `single` runs locally on every
rank. Rank 0 writes {scheme: {losses, state, bytes, match}} to OUT.json, where `match` is the run
compared, inside torchrun, with the `single` reference run there too.
"""

import json
import os
import sys

import parlab

out_path = sys.argv[1]
names = sys.argv[2].split(",") if len(sys.argv) > 2 else ["ddp-naive"]
model = sys.argv[3] if len(sys.argv) > 3 else "gpt"
world = int(os.environ["WORLD_SIZE"])
ref = parlab.run("single", model=model, steps=2)
results = {}
for name in names:
    options = {"tp": world} if name == "tp" else {}
    result = parlab.run(name, world_size=1 if name == "single" else world, model=model, steps=2,
                        **options)
    results[name] = {"losses": result.losses, "match": result.compare(ref).match,
                     "state": {k: v.tolist() for k, v in result.state.items()},
                     "bytes": result.bytes_per_rank()}
if os.environ["RANK"] == "0":
    with open(out_path, "w") as f:
        json.dump(results, f)
