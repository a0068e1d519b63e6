"""PP × DP: each rank all-reduces only its own stage's gradients over its dp group, exactly the
ring's 2(dp−1)/dp × its stage's fp32 gradients per step (ledger bytes: no clock is read)."""

from parlab.pipeline.explore import ppdp


def test_pp_dp_sync_bytes_are_the_ring_over_the_stage(capsys):
    out = ppdp.pp_dp_sync(world_size=4, pp=2, microbatches=2, steps=1)
    assert out["holds"]
    for row in out["rows"]:
        assert row["measured"] == row["closed"]
    assert max(row["measured"] for row in out["rows"]) < out["dp_only"]
    assert "holds" in capsys.readouterr().out
