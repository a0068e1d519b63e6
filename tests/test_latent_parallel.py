"""Chapter 06, video: sequence-parallel serving equals the single process; latent parallelism is
approximate, exact once the halo covers the latent, better with a wider halo, and sends far fewer
bytes; its overlaps cropped or blended (position-aware weights, a partition of unity); every
ledger matches its closed form; bad configurations fail before launch."""

import pytest
import torch

from parlab.context_parallel.cost import lp_bytes, lp_compute_fraction, sp_bytes
from parlab.context_parallel.latent_parallel import blend_weights, region, relative_error, serve
from parlab.context_parallel.video_denoiser import VideoConfig, sample

CFG = VideoConfig(frames=4, height=8, width=8, denoise_steps=4)


@pytest.fixture(scope="module")
def reference():
    return sample(CFG)


@pytest.mark.parametrize("method,world_size", [("ring", 2), ("ulysses", 2), ("ring", 4),
                                               ("ulysses", 4)])
def test_sequence_parallel_serving_is_exact(reference, method, world_size):
    result = serve("sp", CFG, world_size, method=method)
    assert (result.output - reference).abs().max().item() < 1e-5
    expect = sp_bytes(CFG, world_size, method)
    assert result.bytes_per_step() == [expect] * world_size
    per_step = {}
    for r in result.ledger:
        per_step[(r["rank"], r["step"])] = per_step.get((r["rank"], r["step"]), 0) + r["bytes_sent"]
    assert set(per_step.values()) == {expect}  # every step of every rank


@pytest.mark.parametrize("reconstruction", ["crop", "blend"])
def test_latent_parallel_is_exact_when_the_halo_covers_the_latent(reference, reconstruction):
    result = serve("lp", CFG, 2, halo=8, reconstruction=reconstruction)
    assert (result.output - reference).abs().max().item() < 1e-5


@pytest.mark.parametrize("axis,cp,halo", [(0, 2, 1), (1, 2, 2), (1, 4, 2), (0, 4, 2), (2, 2, 0)])
def test_blend_weights_are_a_partition_of_unity_falling_toward_the_cut(axis, cp, halo):
    n = (CFG.frames, CFG.height, CFG.width)[axis]
    total = torch.zeros(n)
    for r in range(cp):
        lo, hi = region(CFG, axis, r, cp, halo)
        w = blend_weights(CFG, axis, r, cp, halo)
        assert w.shape == (hi - lo,) and (w > 0).all()
        total[lo:hi] += w
    assert torch.allclose(total, torch.ones(n))
    if (axis, cp, halo) == (1, 2, 2):  # H = 8: regions [0, 6) and [2, 8), raw 3 3 3 3 2 1
        assert torch.allclose(blend_weights(CFG, 1, 0, 2, 2),
                              torch.tensor([1, 1, 3 / 4, 3 / 5, 2 / 5, 1 / 4]))


def test_blend_at_halo_zero_is_crop():
    crop, blend = (serve("lp", CFG, 2, halo=0, reconstruction=r) for r in ("crop", "blend"))
    assert torch.equal(crop.output, blend.output)


def test_latent_parallel_compute_grows_with_the_halo():
    assert lp_compute_fraction(CFG, 2, 0) == 0.5
    assert lp_compute_fraction(CFG, 4, 8) == 1.0  # the halo covers every axis: all of it
    assert 0.5 < lp_compute_fraction(CFG, 2, 1) < lp_compute_fraction(CFG, 2, 2) < 1.0


@pytest.mark.parametrize("reconstruction", ["crop", "blend"])
def test_latent_parallel_error_falls_with_the_halo(reference, reconstruction):
    errors = [relative_error(serve("lp", CFG, 2, halo=h, reconstruction=reconstruction).output,
                             reference) for h in (0, 1, 2)]
    assert errors[0] > errors[1] > errors[2] > 0
    assert errors[0] > 1e-3  # approximate by design: attention sees only slab + halo


@pytest.mark.parametrize("reconstruction", ["crop", "blend"])
@pytest.mark.parametrize("world_size,halo", [(2, 1), (4, 0), (4, 2)])
def test_latent_parallel_ledger_is_the_closed_form(world_size, halo, reconstruction):
    result = serve("lp", CFG, world_size, halo=halo, reconstruction=reconstruction)
    for rank in range(world_size):
        for step in range(CFG.denoise_steps):
            sent = sum(r["bytes_sent"] for r in result.ledger
                       if r["rank"] == rank and r["step"] == step)
            assert sent == lp_bytes(CFG, world_size, halo, rank, step,
                                    reconstruction=reconstruction)
    if reconstruction == "blend" and halo:  # the overlaps travel both ways, and come home last
        assert lp_bytes(CFG, world_size, halo, 0, 0, reconstruction="blend") > lp_bytes(
            CFG, world_size, halo, 0, 0)
        assert lp_bytes(CFG, world_size, halo, 0, CFG.denoise_steps - 1,
                        reconstruction="blend") > 0


def test_latent_parallel_sends_a_few_percent_of_sequence_parallel():
    for world_size in (2, 4):
        lp = max(lp_bytes(CFG, world_size, 1, r, 0) for r in range(world_size))
        sp = min(sp_bytes(CFG, world_size, m) for m in ("ring", "ulysses"))
        assert lp < 0.05 * sp, (world_size, lp, sp)


@pytest.mark.parametrize("kwargs,match", [
    (dict(mode="tp"), "mode='tp'"),
    (dict(mode="lp", halo=-1), "halo=-1"),
    (dict(mode="lp", reconstruction="smooth"), "reconstruction='smooth'"),
    (dict(mode="lp", world_size=8), r"latent axes \{'T': 4\} are shorter than world_size=8"),
    (dict(mode="sp", world_size=3), "not divisible by 2·world_size=6"),
    (dict(mode="sp", world_size=8, method="ulysses"), "n_head=4 is not divisible by world_size=8"),
    (dict(mode="sp", method="magic"), "method='magic'"),
    (dict(mode="sp", cfg=VideoConfig(n_head=3)), "n_embd=32 is not divisible by n_head=3"),
])
def test_bad_input_is_a_value_error_before_launch(kwargs, match):
    kwargs = {"cfg": CFG, "world_size": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        serve(**kwargs)


def test_the_reconstruction_verdict_is_computed_from_the_rows(capsys):
    from parlab.context_parallel.explore.latent import bias_reach, explain_reconstruction

    assert bias_reach(VideoConfig(locality=1.0)) == 8.0 and bias_reach(VideoConfig(locality=4.0)) == 2.0

    def row(locality, halo, crop, blend, crop_bytes=100, blend_bytes=200):
        return {"locality": locality, "reach": 8.0 / locality, "halo": halo, "crop error": crop,
                "blend error": blend, "crop bytes/step": crop_bytes, "crop formula": crop_bytes,
                "blend bytes/step": blend_bytes, "blend formula": blend_bytes}

    explain_reconstruction([row(1.0, 0, 0.3, 0.3, 50, 50), row(1.0, 1, 0.2, 0.1),
                            row(4.0, 0, 0.2, 0.2, 50, 50), row(4.0, 1, 0.05, 0.08)])
    out = capsys.readouterr().out
    assert "every row: True" in out and "in 1 of 2 rows" in out and "2.00–2.00×" in out
    assert "crop better at locality 4.0, halo 1" in out and "blend = crop: True" in out
    assert "blending helped more where the bias reaches further (8 vs 2 patches)" in out
    assert "smaller error at every halo > 0, crop and blend: True" in out  # 0.05 < 0.2, 0.08 < 0.1
