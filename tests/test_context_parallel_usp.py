"""USP, Ulysses × ring (`cp-usp`, Fang & Zhao 2024, arXiv 2405.07719): equal to the single
process at world sizes 1, 2 and 4 (u × r = 2 × 2, 1 × 4, 4 × 1); its ledger is
`cost.usp_step_bytes` exactly, the all-to-alls inside the Ulysses group and the sends round the
ring; Ulysses' head limit refused up front naming every factor; and `cp-allgather` and `cp-usp`
run shapes-only, the real paced run without its numbers."""

import functools

import pytest

import parlab
from parlab.context_parallel import cost
from parlab.context_parallel.schemes import degrees
from parlab.context_parallel.usp import usp_positions, usp_problem
from parlab.engine.run_config import make_config

STEPS = 2
SPLITS = [(1, 1), (2, 2), (4, 2), (4, 1), (4, 4)]  # (world_size, ulysses u); ring r = world / u


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS, timeout=120)


@pytest.mark.parametrize("world_size, u", SPLITS)
def test_usp_equals_single(runs, world_size, u):
    result = runs("cp-usp", world_size, ulysses=u)
    assert result.outputs[0].extras["degrees"] == {"dp": 1, "cp": world_size, "ulysses": u,
                                                   "ring": world_size // u}
    comparison = result.compare(runs("single"))
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("world_size, u", SPLITS[1:])
def test_usp_ledger_is_the_closed_form(runs, world_size, u):
    result = runs("cp-usp", world_size, ulysses=u)
    g, r = result.config.model_config, world_size // u
    form = cost.usp_step_bytes(result.config.batch_size, g.n_head, g.block_size, g.head_dim, u, r,
                               g.n_layer)
    for phase in ("cp-forward", "cp-backward"):
        assert result.bytes_per_rank(phase=phase) == [form[phase] * STEPS] * world_size
    ops = {x["op"] for x in result.ledger if str(x["phase"]).startswith("cp-")}
    assert ops == ({"all_to_all"} if u > 1 else set()) | ({"send", "recv"} if r > 1 else set())
    a2a = sum(x["bytes_sent"] for x in result.ledger if x["rank"] == 0
              and x["op"] == "all_to_all" and x["phase"] == "cp-forward")
    assert a2a == form["ulysses"] * STEPS
    priced = cost.usp_bytes(result.config.batch_size, g.n_head, g.block_size, g.head_dim, u, r,
                            g.n_layer, itemsize=4)  # the chapter's forward price, in fp32
    assert (priced["ulysses"], priced["ring"]) == (form["ulysses"], form["ring"])


def test_usp_positions_put_the_zigzag_ring_back_after_the_all_to_all():
    u, r, T = 2, 2, 16
    pos = usp_positions(u, r, T)  # 4 ranks: ring 0 holds chunks 0, 3; ring 1 chunks 1, 2 (of 4)
    assert [p.tolist() for p in pos] == [[0, 1, 2, 3], [12, 13, 14, 15],
                                         [4, 5, 6, 7], [8, 9, 10, 11]]


@pytest.mark.parametrize("options, why", [
    ({"ulysses": 4, "model_config": {"n_head": 2}},
     r"ulysses=4 must divide n_head=2 and n_kv_head=2 .*u ≤ n_kv_head=2.*cp=4 = ulysses 4 × "
     r"ring 1.*fit: \[1, 2\]"),
    ({"ulysses": 3}, r"cp=4 is not divisible by ulysses=3"),
    ({"ulysses": 1, "model_config": {"block_size": 36}},
     r"block_size=36 .* divisible by 2·ring=8 .*ulysses=1; cp=4 = ulysses 1 × ring 4"),
])
def test_usp_refuses_what_cannot_split_naming_every_factor(options, why):
    with pytest.raises(ValueError, match=why):
        make_config("cp-usp", world_size=4, cp=4, **options)


def test_usp_default_takes_ulysses_as_far_as_the_heads_allow():
    cfg = make_config("cp-usp", world_size=4, model_config={"n_head": 2})
    assert degrees(cfg, "usp") == {"dp": 1, "cp": 4, "ulysses": 2, "ring": 2}


def test_ulysses_limit_is_the_key_value_heads():
    """Llama 3 70B's heads (64 query, 8 key/value) on cp = 16: u = 16 is refused, naming both."""
    why = usp_problem(16, 16, 64, 8, 131072)
    assert why.startswith("ulysses=16 must divide n_head=64 and n_kv_head=8 (Ulysses splits")
    assert "cp=16 = ulysses 16 × ring 1" in why and "fit: [1, 2, 4, 8]" in why
    assert usp_problem(16, 8, 64, 8, 131072) is None


@pytest.mark.slow
@pytest.mark.parametrize("scheme, options", [("cp-allgather", {"cp": 2}),
                                             ("cp-usp", {"cp": 4, "ulysses": 2})])
def test_shapes_only_is_the_real_paced_run_without_its_numbers(scheme, options):
    world_size = options["cp"]
    kw = dict(steps=1, seed=3, clock="A100", link="NVLink", **options)
    real = parlab.run(scheme, world_size=world_size, **kw)
    shapes = parlab.run(scheme, world_size=world_size, shapes_only=True, **kw)
    assert shapes.step_times == real.step_times and shapes.timeline == real.timeline
    assert shapes.ledger == real.ledger and shapes.memory == real.memory
    assert shapes.losses is None


@pytest.mark.parametrize("scheme, options", [("cp-allgather", {}), ("cp-usp", {"ulysses": 1})])
def test_in_bf16_matches_single_and_sends_two_bytes_a_value(runs, scheme, options):
    result = runs(scheme, 2, precision="bf16-mixed", **options)
    comparison = result.compare(runs("single", precision="bf16-mixed"))
    assert comparison.match, comparison.problems
    g = result.config.model_config
    form = cost.allgather_bytes(result.config.batch_size, g.n_head, g.block_size, g.head_dim, 2,
                                g.n_layer, itemsize=2)  # the ring's bytes: USP at u = 1 too
    assert result.bytes_per_rank(phase="cp-forward") == [form["cp-forward"] * STEPS] * 2
