"""Chapter 03: tp, tp-sp (and dp × tp) equal the single process; ledger bytes and activation
memory equal their closed forms; the parallel layers reproduce the reference layer by layer."""

import pytest

import parlab
from parlab.core.launch import launch
from parlab.engine.runner import make_config
from parlab.tensor_parallel.cost import activation_bytes, closed_form_bytes
from tests import workers_tp

PHASES = ("tp-forward", "tp-backward", "sp-grad-sync")


@pytest.fixture(scope="module")
def reference():
    return parlab.run("single", steps=2)


@pytest.mark.parametrize("scheme,world_size,options", [
    ("tp", 1, {}), ("tp", 2, {}), ("tp", 4, {}),
    ("tp-sp", 2, {}), ("tp-sp", 4, {}), ("tp-sp", 4, {"regather": False}),
    ("tp", 4, {"tp": 2}),  # 2D: dp=2 × tp=2
    ("tp-sp", 4, {"tp": 2}),
    ("tp", 3, {}),  # 3 does not divide 4 heads: tp=1, dp=3
    ("tp", 2, {"vocab_parallel": True}), ("tp", 4, {"vocab_parallel": True}),
    ("tp", 4, {"tp": 2, "vocab_parallel": True}),
    ("tp", 2, {"checkpoint": True}), ("tp-sp", 4, {"checkpoint": True}),  # recompute redoes comm
    # async TP: the all-gathers and dx's reduce-scatter as overlapped ring steps, same bytes
    ("tp-sp", 2, {"async_tp": True}), ("tp-sp", 4, {"async_tp": True}),
    ("tp-sp", 4, {"tp": 2, "async_tp": True}),
])
def test_matches_single_and_ledger_is_closed_form(reference, scheme, world_size, options):
    result = parlab.run(scheme, world_size=world_size, steps=2, **options)
    comparison = result.compare(reference)
    assert comparison.match, comparison.problems
    sp = scheme == "tp-sp"
    for rank, out in enumerate(result.outputs):
        vocab = options.get("vocab_parallel", False)
        expect = closed_form_bytes(result.config.model_config, 12 // out.extras["dp"], out.extras["tp"],
                                   out.extras["tp_rank"], 2, sp, options.get("regather", True), vocab,
                                   options.get("checkpoint", False))
        got = {phase: result.bytes_per_rank(phase=phase)[rank] for phase in PHASES}
        assert got == expect, (rank, got, expect)
        if options.get("async_tp") and out.extras["tp"] > 1:  # ring steps, not collectives
            ops = {x["op"] for x in result.ledger if x["rank"] == rank and x["phase"] == "tp-forward"}
            assert ops == {"send", "recv", "reduce_scatter"}, ops
        assert vocab or options.get("checkpoint") or result.memory[rank]["activations"] == activation_bytes(
            result.config.model_config, 12 // out.extras["dp"], out.extras["tp"], sp,
            options.get("regather", True))


def test_ops_per_block_and_step():
    """tp: 2 all-reduces forward, 2 backward per block; tp-sp: the same tensors as AG + RS."""
    steps, layers = 2, 4
    tp = parlab.run("tp", world_size=2, steps=steps)
    ops = [(r["op"], r["phase"]) for r in tp.ledger if r["rank"] == 0 and r["phase"] != "dp-grad-sync"]
    assert ops.count(("all_reduce", "tp-forward")) == 2 * layers * steps
    assert ops.count(("all_reduce", "tp-backward")) == 2 * layers * steps
    assert {r["numel"] for r in tp.ledger if r["phase"] == "tp-forward"} == {12 * 32 * 32}
    sp = parlab.run("tp-sp", world_size=2, steps=steps, regather=False)
    sp_ops = [(r["op"], r["phase"]) for r in sp.ledger if r["rank"] == 0]
    for phase in ("tp-forward", "tp-backward"):
        assert sp_ops.count(("all_gather", phase)) == 2 * layers * steps
        assert sp_ops.count(("reduce_scatter", phase)) == 2 * layers * steps
    for phase in ("tp-forward", "tp-backward"):  # a ring all-reduce = reduce-scatter + all-gather
        assert tp.bytes_per_rank(phase=phase) == sp.bytes_per_rank(phase=phase)


def test_sequence_parallel_saves_activation_memory():
    tp = parlab.run("tp", world_size=4, steps=1)
    sp = parlab.run("tp-sp", world_size=4, steps=1)
    keep = parlab.run("tp-sp", world_size=4, steps=1, regather=False)
    a_tp, a_sp, a_keep = (r.memory[0]["activations"] for r in (tp, sp, keep))
    assert a_sp < a_keep < a_tp
    assert a_tp < parlab.run("single", steps=1).memory[0]["activations"]


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("sequence_parallel,regather", [(False, True), (True, True), (True, False)])
def test_parallel_layers_give_reference_outputs_and_gradients(world_size, sequence_parallel,
                                                              regather):
    for errors in launch(workers_tp.parallel_layers_match, world_size, sequence_parallel, regather):
        assert max(errors.values()) < 1e-4, errors


def test_default_tp_uses_every_rank_when_heads_divide():
    assert parlab.run("tp", world_size=2, steps=1).outputs[0].extras["tp"] == 2
    assert parlab.run("tp", world_size=4, steps=1).outputs[0].extras["tp"] == 4


@pytest.mark.parametrize("kwargs,match", [
    (dict(scheme="tp", world_size=3, tp=3),
     r"n_head=4 is not divisible by tp=3; n_embd=32 is not divisible by tp=3; "
     r"MLP width 4·n_embd=128 is not divisible by tp=3"),
    (dict(scheme="tp-sp", world_size=2, tp=2, model_config={"block_size": 33}),
     r"sequence length block_size=33 is not divisible by tp=2"),
    (dict(scheme="tp", world_size=4, tp=3), r"world_size=4 is not divisible by tp=3"),
    (dict(scheme="tp", world_size=4, tp=2, batch_size=9), r"batch_size=9 is not divisible by dp"),
    (dict(scheme="tp", world_size=2, tp=0), r"tp=0 must be an int"),
    (dict(scheme="tp-sp", world_size=2, regather="yes"), r"regather='yes'"),
    (dict(scheme="tp", world_size=2, model="mlp"), r"model='mlp'"),
    (dict(scheme="tp-sp", world_size=2, async_tp=True, regather=False),
     r"async_tp=True .* needs regather=True, got regather=False"),
    (dict(scheme="tp", world_size=2, tp=2, vocab_parallel=True, model_config={"vocab_size": 97}),
     r"vocab_size=97 is not divisible by tp=2"),
    (dict(scheme="tp-sp", world_size=2, vocab_parallel=True), r"\['vocab_parallel'\] are unknown"),
    (dict(scheme="tp", world_size=5), r"no tp degree fits world_size=5 — tp=5: n_head=4 is not "
     r"divisible by tp=5, .*; tp=1: batch_size=12 is not divisible by dp=world_size/tp=5"),
])
def test_bad_input_is_a_value_error_before_launch(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_config(**kwargs)


@pytest.mark.parametrize("world_size,options", [(2, {}), (4, {"sp": True}), (4, {"tp": 2})])
def test_torch_tp_matches_single_with_the_same_bytes(reference, world_size, options):
    """PyTorch's parallelize_module trains the same model; its DTensor collectives (nominal ring
    bytes, recorded by a dispatch mode) are the closed form of our tp-sp without re-gather."""
    from parlab.core import cost

    result = parlab.run("torch-tp", world_size=world_size, steps=2, **options)
    comparison = result.compare(reference)
    assert comparison.match, comparison.problems
    sp, m = options.get("sp", False), result.config.model_config
    for rank, out in enumerate(result.outputs):
        tp_rank = rank % out.extras["tp"]
        expect = closed_form_bytes(m, 12 // out.extras["dp"], out.extras["tp"], tp_rank, 2, sp,
                                   regather=False)
        for phase in ("tp-forward", "tp-backward"):
            assert result.bytes_per_rank(phase=phase)[rank] == expect[phase]
        embeddings = [m.vocab_size * m.n_embd, m.block_size * m.n_embd]  # summed over tp with SP
        sync = 2 * 4 * sum(cost.ring_all_reduce(n, out.extras["tp"], tp_rank)[0] for n in embeddings)
        assert result.bytes_per_rank(phase="sp-grad-sync")[rank] == (sync if sp else 0)


def test_torch_tp_bad_input():
    with pytest.raises(ValueError, match=r"n_head=4 is not divisible by tp=3"):
        make_config("torch-tp", world_size=3, tp=3)
    with pytest.raises(ValueError, match=r"sp='on'"):
        make_config("torch-tp", world_size=2, sp="on")


@pytest.mark.parametrize("world_size", [2, 4])
def test_vocab_parallel_embedding_and_cross_entropy(world_size):
    for errors in launch(workers_tp.vocab_parallel_loss_matches, world_size):
        assert max(errors.values()) < 1e-5, errors


def test_when_to_use_follows_the_numbers_it_is_given():
    """Chapter 03's verdict (explore.summary): each direction flips when its inputs flip."""
    from parlab.tensor_parallel.explore.summary import when_to_use_lines

    def domain(past_ms):
        rows = [{"tp": 1, "measured_ms": 40.0, "estimate_ms": 40.0},
                {"tp": 8, "measured_ms": 8.0, "estimate_ms": 7.0},
                {"tp": 16, "measured_ms": past_ms, "estimate_ms": past_ms}]
        for row in rows:
            row["speedup"] = 40.0 / row["measured_ms"]
        return rows

    memory = [{"tp": 2, "measured_bytes": 100, "sequence_parallel": False, "regather": True},
              {"tp": 2, "measured_bytes": 80, "sequence_parallel": True, "regather": True}]
    timing = [{"tp": 1, "link": "NVLink", "clock": "A100", "measured_ms": 10.0, "predicted_ms": 10.0,
               "of_which_comm_ms": 0.0},
              {"tp": 2, "link": "NVLink", "clock": "A100", "measured_ms": 30.0, "predicted_ms": 25.0,
               "of_which_comm_ms": 20.0}]
    rows = [{"scheme": "tp-sp:algo=ring", "step_ms": 12.0}, {"scheme": "tp-sp:async_tp", "step_ms": 10.0}]
    lines = when_to_use_lines(domain(16.0), timing, memory, 1.3, rows)
    assert lines[0] == "When to use it (from this run):" and len(lines) == 5
    assert "tp=8 ran 5.00× tp=1's speed" in lines[1] and "tp=16 across nodes took 2.00×" in lines[1]
    assert "keep tp ≤ the GPUs of one node" in lines[1]
    assert "3.00× tp=1's step — slower" in lines[2] and "80% of the predicted step" in lines[2]
    assert "0.80× tp's activations (20% less" in lines[3] and "1.30× tp's bytes" in lines[3]
    assert "1.20× its throughput — faster" in lines[4]

    timing[1]["measured_ms"] = 5.0
    memory[1]["measured_bytes"] = 120
    rows[1]["step_ms"] = 15.0
    flipped = when_to_use_lines(domain(5.0), timing, memory, 1.3, rows)
    assert "tp=16 across nodes took 0.62×" in flipped[1] and "still paid past the node" in flipped[1]
    assert "0.50× tp=1's step — faster" in flipped[2]
    assert "did not pay here: tp-sp held 1.20× tp's activations" in flipped[3]
    assert "0.80× its throughput — not faster" in flipped[4]
    # slower with little communication: the operators every rank runs whole, not the link
    timing[1].update(measured_ms=12.0, of_which_comm_ms=0.5)
    launch_bound = when_to_use_lines(domain(16.0), timing, memory, 1.3, rows)
    assert "1.20× tp=1's step — slower, though the all-reduces are only 2%" in launch_bound[2]
    assert "not the link" in launch_bound[2]
    # a run at one degree measures no tp step and no sequence-parallel saving: those lines drop
    one = when_to_use_lines(domain(16.0)[:1], timing[:1], memory[:1], float("nan"), [])
    assert len(one) == 1
