"""Chapter 10, Subnetwork Data Parallelism: owners=N is the single process; otherwise memory per rank
equals the formula, bytes per rank equal the closed form, the distributed run equals its one-process
emulation (masked sum ÷ owner count), and the full model's loss stays within a stated margin of DDP's."""

import functools
import statistics

import pytest

import parlab
from parlab.engine.loop import build_model
from parlab.engine.runner import make_config
from parlab.engine.verify import compare
from parlab.subnet import cost as subnet_cost
from parlab.subnet.emulate import emulate
from parlab.subnet.ownership import assign, find_blocks, find_ffns, owners_of

STEPS = 2


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("mask", ["forward", "backward"])
def test_owners_n_equals_single(runs, world_size, mask):
    result = runs("sdp", world_size, owners=world_size, mask=mask)
    comparison = result.compare(runs("single"))
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("mask", ["forward", "backward"])
def test_owners_n_equals_single_neuron_level(runs, mask):
    result = runs("sdp", 2, owners=2, mask=mask, granularity="neuron")
    assert result.compare(runs("single")).match
    assert result.bytes_per_rank() == runs("ddp-naive", 2).bytes_per_rank()  # one flat buffer


CASES = [(2, 1, "forward", "block"), (2, 1, "backward", "block"), (2, 1, "forward", "neuron"),
         (2, 1, "backward", "neuron"), (4, 2, "forward", "block"), (4, 3, "backward", "neuron")]


@pytest.mark.parametrize("world_size,owners,mask,granularity", CASES)
def test_memory_per_rank_is_the_formula(runs, world_size, owners, mask, granularity):
    options = dict(owners=owners, mask=mask, granularity=granularity)
    result = runs("sdp", world_size, **options)
    ownership = subnet_cost.ownership_of(make_config("sdp", world_size=world_size, **options))
    for rank, measured in enumerate(result.memory):
        formula = subnet_cost.memory_formula(ownership, mask, rank)
        assert {k: measured[k] for k in formula} == formula, rank


@pytest.mark.parametrize("world_size,owners,mask,granularity", CASES)
def test_bytes_per_rank_are_the_closed_form(runs, world_size, owners, mask, granularity):
    steps, options = 2, dict(owners=owners, mask=mask, granularity=granularity)
    result = runs("sdp", world_size, steps=steps, **options)
    ownership = subnet_cost.ownership_of(make_config("sdp", world_size=world_size, **options))
    for phase in ("grad-sync", "param-refresh"):
        expect = [steps * subnet_cost.step_bytes(ownership, mask, r)[phase]
                  for r in range(world_size)]
        assert result.bytes_per_rank(phase=phase) == expect, phase
    # only owners move a unit's gradient: every grad-sync record is inside an owner set
    sets = set(ownership.owner_sets())
    assert all(r["group_ranks"] in sets for r in result.ledger if r["phase"] == "grad-sync")


def test_one_owner_moves_only_the_shared_parameters(runs):
    result = runs("sdp", 2, steps=1, owners=1, mask="forward", granularity="block")
    ownership = subnet_cost.ownership_of(make_config("sdp", world_size=2, owners=1))
    shared = ownership.units[-1].numel
    assert result.bytes_per_rank() == [2 * (2 - 1) // 2 * shared * 4] * 2  # ring: 2(N-1)/N·s
    assert sum(result.bytes_per_rank()) < sum(runs("ddp-naive", 2, steps=1).bytes_per_rank()) / 10


@pytest.mark.parametrize("world_size,owners,mask,granularity",
                         [(2, 1, "forward", "block"), (4, 2, "backward", "neuron")])
def test_distributed_equals_the_masked_sum_emulation(runs, world_size, owners, mask, granularity):
    options = dict(owners=owners, mask=mask, granularity=granularity)
    cfg = make_config("sdp", world_size=world_size, steps=2, **options)
    emulation = emulate(cfg, subnet_cost.ownership_of(cfg), mask)
    comparison = compare(runs("sdp", world_size, steps=2, **options), emulation)
    assert comparison.match, comparison.problems


LOSS_MARGIN = 0.02  # the full model's mean loss over the last 5 of 20 steps, relative to DDP's


@pytest.mark.parametrize("mask,granularity", [("forward", "block"), ("backward", "neuron")])
def test_full_model_loss_stays_within_the_margin_of_ddp(runs, mask, granularity):
    steps = 20
    cfg = make_config("sdp", world_size=2, steps=steps, owners=1, mask=mask,
                      granularity=granularity)
    emulation = emulate(cfg, subnet_cost.ownership_of(cfg), mask)
    ddp = statistics.mean(runs("single", 1, steps=steps).losses[-5:])
    sdp = statistics.mean(emulation.full_losses[-5:])
    assert abs(sdp - ddp) <= LOSS_MARGIN * ddp, (sdp, ddp)


@pytest.mark.parametrize("options,named", [
    (dict(world_size=2, owners=3), "owners=3"),
    (dict(world_size=2, owners=0), "owners=0"),
    (dict(world_size=2, model="mlp", granularity="neuron"), "granularity='neuron'"),
    (dict(world_size=4, owners=1, model="mlp", model_config={"n_layer": 2}), "granularity='block'"),
    (dict(world_size=2, mask="both"), "mask='both'"),
    (dict(world_size=4, batch_size=6), "batch_size=6"),
])
def test_bad_input_is_refused_before_any_process(options, named, monkeypatch):
    import parlab.engine.runner as runner

    monkeypatch.setattr(runner, "launch", lambda *a, **k: pytest.fail("a process started"))
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace("[", r"\[")):
        parlab.run("sdp", steps=1, **options)


def test_ownership_is_balanced_and_found_on_any_module():
    for n in (2, 3, 4):
        for k in range(1, n + 1):
            counts = [0] * n
            for u in range(n):
                for r in owners_of(u, k, n):
                    counts[r] += 1
            assert counts == [k] * n  # every rank owns k of every N consecutive units
    gpt = build_model(make_config("single"))
    assert find_blocks(gpt) == ("blocks", [0, 1, 2, 3])
    assert [f[0] for f in find_ffns(gpt)] == [f"blocks.{i}.mlp" for i in range(4)]
    mlp = build_model(make_config("single", model="mlp"))
    assert find_blocks(mlp) == ("layers", [1, 2, 3]) and find_ffns(mlp) == []
    ownership = assign(gpt, 4, 2, "neuron")
    assert ownership.numel == sum(p.numel() for p in gpt.parameters())
    assert [ownership.owned_numel(r) for r in range(4)] == [ownership.owned_numel(0)] * 4


def test_exercises_accept_the_closed_forms_answers_and_reject_others(runs, capsys):
    """The GPU-scale answers come from the closed forms; the same closed forms, on the same kind
    of block-level ownership, equal a real run's measured memory and ledger here (N = 4)."""
    from parlab.subnet.exercises import answers, block_ownership, exercise

    kinds = ("params", "grads", "optimizer")
    gpt = build_model(make_config("single"))
    blocks = [sum(p.numel() for n, p in gpt.named_parameters() if n.startswith(f"blocks.{i}."))
              for i in range(4)]
    shared = sum(p.numel() for p in gpt.parameters()) - sum(blocks)
    for owners, mask in ((1, "forward"), (1, "backward"), (2, "forward")):
        run = runs("sdp", 4, steps=1, owners=owners, mask=mask, granularity="block")
        own = block_ownership(4, owners, blocks=4, block=blocks[0], shared=shared)
        assert sum(run.memory[0][k] for k in kinds) == sum(
            subnet_cost.memory_formula(own, mask, 0).values())
        assert run.bytes_per_rank()[0] == sum(subnet_cost.step_bytes(own, mask, 0).values())
    for name, answer in answers().items():
        assert exercise(name).check(answer), name
        assert not exercise(name).check(answer * 2) and not exercise(name).check(None), name
        exercise(name).hint()
    out = capsys.readouterr().out
    # a one-digit answer (a number of owners) is in every sentence; the telling ones are not
    assert not any(f"{a:,.0f}" in out or f"{a:g}" in out for a in answers().values() if a >= 100)


def test_when_to_use_follows_this_runs_numbers(capsys):
    import pandas as pd

    from parlab.subnet.explore import summary

    table = pd.DataFrame([{"k": 1, "mask": "forward", "granularity": g, "saved": s, "bytes_vs_ddp": b}
                          for g, s, b in (("block", 0.5, 0.08), ("neuron", 0.3, 0.4))])

    def gaps(forward, backward):
        return pd.DataFrame([{"mask": "forward", "loss_gap": forward},
                             {"mask": "backward", "loss_gap": backward}])

    def time(scheme, mask, granularity, ms, sent):
        return {"scheme": scheme, "mask": mask, "granularity": granularity, "clock": "A100",
                "step_ms": ms, "bytes_per_step": sent}

    ddp = [time("ddp-naive", "—", "—", 2000.0, 1000), time("ddp-bucketed", "—", "—", 400.0, 1000)]
    summary.when_to_use(table, gaps(0.001, 0.0), gaps(0.3, 0.02), ddp + [time("sdp", "forward", "block",
                                                                             100.0, 80)])
    out = capsys.readouterr().out
    assert out.startswith("When to use it (from this run):")
    assert "(block level) left the largest rank 50% of DDP's states, so, at the same owned fraction, a " \
           "model up to 2.00×" in out
    assert "GPT (skip connections) +0.10% — within; the spirals MLP (none) +30.0% — NOT within, " \
           "where backward masking's unbiased gradient gave +2.0% — within" in out
    assert "against ddp-bucketed" in out and "forward/block 0.25× its step for 0.08× its bytes" in out
    assert "every SDP row was faster" in out
    # the numbers flip, the verdicts flip
    summary.when_to_use(table, gaps(0.05, 0.0), gaps(0.01, 0.0), ddp + [time("sdp", "forward", "block",
                                                                            500.0, 80)])
    out = capsys.readouterr().out
    assert "GPT (skip connections) +5.00% — NOT within; the spirals MLP (none) +1.0% — within\n" in out
    assert "only 0 of 1 SDP rows were faster" in out
