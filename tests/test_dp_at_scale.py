"""Chapter 01's gpt2-xl section (parlab.data_parallel.explore.at_scale) and its predict-then-run
(explore.predict): WFBP beats the after-backward schemes on 8 A100s; DeAR beats WFBP only where the
link's work outlasts backward (8 H100s, one per node, over NDR InfiniBand); the ledger's message
count equals the bucket packing."""

import math

from parlab.data_parallel.bucket_packing import plan_buckets
from parlab.data_parallel.explore import at_scale, predict
from parlab.data_parallel.explore.measure import param_numels


def test_gpt2_xl_shapes():
    numels = at_scale.numels("gpt2-xl")
    assert len(numels) == 388 and abs(sum(numels) / 1.5575e9 - 1) < 0.01


def test_compute_times_are_kaplans_flops():
    t = at_scale.compute_times("gpt2-xl", rows=1, accelerator="A100")
    psi = sum(at_scale.numels("gpt2-xl"))
    assert math.isclose(t["t_backward"], 2 * t["t_forward"])
    assert math.isclose(t["t_forward"], 2 * psi * 1024 / 150e12)


def test_wfbp_and_dear_verdicts(capsys):
    a100 = at_scale.show()
    assert all(a100["verdicts"]) and a100["measured"] is None
    p = a100["priced"]
    assert p["ddp-overlap"]["step_s"] < p["ddp-bucketed"]["step_s"] < p["ddp-naive"]["step_s"]
    h100 = at_scale.priced(accelerator="H100", link="NDR-IB")
    assert h100["dear"]["step_s"] < h100["ddp-overlap"]["step_s"]
    out = at_scale.show(accelerator="H100", link="NDR-IB")
    assert all(out["verdicts"]) and "DeAR faster: holds" in capsys.readouterr().out


def test_predict_counts_the_ledgers_messages(capsys):
    measured = predict.count_messages(None, world_size=2, bucket_mb=0.02, steps=1)
    assert measured == len(plan_buckets(param_numels(), 0.02))
    assert "agree" in capsys.readouterr().out
