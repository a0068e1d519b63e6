"""Chapter 10 (issue 52): the skip-connection ablation runs on the same GPT and task — the blocks
without their residual connections compute mlp(ln₂(attn(ln₁(x)))), and the ablation measures each
variant against its own DDP (k = N, where the emulation's ĝ is the full gradient)."""

import torch

from parlab.engine.loop import build_model
from parlab.engine.runner import make_config
from parlab.subnet.explore.skips import print_ablation, skip_ablation
from parlab.subnet.ownership import find_blocks
from parlab.subnet.skips import remove_skips


def test_a_block_without_skips_is_its_two_parts_in_sequence():
    model = build_model(make_config("single"))
    name, indices = find_blocks(model)
    block = dict(model.named_modules())[name][indices[0]]
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        with_skips = block(x)
        remove_skips(model)
        without = block(x)
        expected = block.mlp(block.ln_2(block.attn(block.ln_1(x))))
    assert torch.equal(without, expected) and not torch.allclose(with_skips, without)


def test_ablation_compares_each_model_with_its_own_ddp(capsys):
    found = skip_ablation(2, steps=3, last=2)
    assert set(found) == {True, False}
    # at k = N the emulation is DDP: the update is the full gradient, cos = 1 on every unit
    for r in found.values():
        assert all(abs(c - 1) < 1e-5 for step in r["ddp"].unit_cosines for c in step.values())
    assert found[True]["ddp"].full_losses != found[False]["ddp"].full_losses  # different models
    holds = print_ablation(found, 2)
    out = capsys.readouterr().out
    assert "verdict: removing the skips" in out and ("explanation holds" in out) == holds


def test_panel_offers_no_more_owners_than_ranks():
    from parlab.subnet.explore import panel_follow

    assert panel_follow({"world_size": 1, "owners": 4}) == {"owners": ([1], 1)}
    assert panel_follow({"world_size": 2, "owners": 4}) == {"owners": ([1, 2], 2)}
    assert panel_follow({"world_size": 4, "owners": 2}) == {"owners": ([1, 2, 4], 2)}
