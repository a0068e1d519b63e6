"""parlab: every parallelism scheme of deep-learning training, from scratch, on torch.distributed.

    import parlab
    parlab.schemes()                                   # what can run
    r = parlab.run("ddp-naive", world_size=4, steps=5) # train on 4 gloo processes
    ref = parlab.run("single", steps=5)                # the single-process reference
    print(r.compare(ref))                              # match: True
"""

from parlab.core.launch import RankError, launch
from parlab.core.link import PRESETS as LINKS
from parlab.core.link import Link
from parlab.engine.runner import RunResult, register, run, schemes
from parlab.engine.verify import compare

__all__ = ["LINKS", "Link", "RankError", "RunResult", "compare", "launch", "register", "run",
           "schemes"]
