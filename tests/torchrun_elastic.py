"""Run under torchrun --max-restarts 1 by tests/test_torchrun.py: a ZeRO-3 run that checkpoints
every step; on the first attempt rank 1 is killed (SIGKILL) as step 3 begins, the elastic agent
restarts every worker, and the second attempt resumes from the last committed checkpoint.

    torchrun --standalone --nproc_per_node 2 --max-restarts 1 tests/torchrun_elastic.py OUT SAVE
"""

import json
import os
import sys

import parlab

out_path, save_dir = sys.argv[1], sys.argv[2]
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
if attempt >= 2 and os.path.exists(out_path):
    # the resumed attempt finished and wrote its result, then a worker died at exit (the rare
    # teardown abort this test allows a second restart for): its checkpoint holds every step,
    # so there is nothing left to resume; the written result is what the test checks
    sys.exit(0)
crash = {"fail_at_step": 3, "fail_rank": 1} if attempt == 0 else {}
result = parlab.run("zero3", world_size=int(os.environ["WORLD_SIZE"]), model="mlp", steps=6,
                    save_dir=save_dir, save_every=1, resume=True, **crash)
if os.environ["RANK"] == "0":
    with open(out_path, "w") as f:
        json.dump({"attempt": attempt, "losses": result.losses,
                   "first_step": result.outputs[0].extras["first_step"],
                   "state": {k: v.tolist() for k, v in result.state.items()}}, f)
