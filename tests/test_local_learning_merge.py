"""Layer-wise partitioning and merging (`layerwise-merge`, Akintoye et al., FGCS 2023): synchronous,
so it equals `single` at world sizes 1, 2, 4 (and 3) at its own merge and at forced stage counts;
its bytes per step and phase are `cost.merge_bytes_per_rank` exactly; the merge is the exact
min-max cut and the smallest modelled step; no stage stashes a weight version; and in virtual
time the step-time model is within its stated tolerance."""

import itertools

import pytest

import parlab
from parlab.core import cost as core_cost
from parlab.engine.runner import make_config
from parlab.local_learning import cost, partition_merge
from tests.conftest import CACHE  # the session's one cache of runs

STEPS = 3
SCHEME = "layerwise-merge"


def run(world_size, model="gpt", **options):
    return CACHE(SCHEME, world_size=world_size, model=model, steps=STEPS, **options)


def reference(model):
    return CACHE("single", model=model, steps=STEPS)


# (world size, options): the merge's own choice at 1 and 4 (no link: the model merges every layer
# into data parallelism), and forced stage counts that keep pipelines: 4 stages, 2 stages × 2
# replicas, the MLP's 5 layers cut 3 + 2 at world size 2
EXACT = [(1, {}), (4, {}), (4, {"pp": 4}), (4, {"pp": 2}), (2, {"pp": 2, "model": "mlp"})]


def _run(world_size, options):
    return run(world_size, **options)


@pytest.mark.parametrize("world_size,options", EXACT)
def test_layerwise_merge_equals_single(world_size, options):
    result = _run(world_size, options)
    comparison = result.compare(reference(options.get("model", "gpt")))
    assert comparison.match, comparison.problems
    x = result.outputs[0].extras
    chosen = partition_merge.plan(result.config).layout  # every rank ran the parent's plan
    assert (x["pp"], x["dp"], tuple(x["counts"]), x["microbatches"]) == \
        (chosen.pp, chosen.dp, chosen.counts, chosen.microbatches)
    if "pp" in options:
        assert x["pp"] == options["pp"]


def test_uneven_merge_gives_the_ends_fewer_layers():
    """Three stages of four blocks: the first holds the embedding and the last the head and loss,
    so the min-max cut gives the middle stage two blocks; the MLP's five layers cut 3 + 2."""
    assert partition_merge.plan(make_config(SCHEME, world_size=3, pp=3)).layout.counts == (1, 2, 1)
    assert run(2, model="mlp", pp=2).outputs[0].extras["counts"] == [3, 2]


@pytest.mark.parametrize("world_size,options", EXACT[1:])
def test_bytes_per_step_and_phase_are_the_closed_form(world_size, options):
    result = _run(world_size, options)
    cfg = result.config
    layout = partition_merge.plan(cfg).layout
    mc, p = cfg.model_config, layout.pp
    act = cost.activation_bytes(mc, layout.rows)
    for rank in range(world_size):
        d, s = divmod(rank, p)
        for step in range(STEPS):
            sent = {}
            for r in result.ledger:
                if r["rank"] == rank and r["step"] == step:
                    sent[r["phase"]] = sent.get(r["phase"], 0) + r["bytes_sent"]
            assert sent.get("pp-fwd", 0) == (act if s < p - 1 else 0)
            assert sent.get("pp-bwd", 0) == (act if s > 0 else 0)
            numel = result.outputs[s].extras["stage_numel"]  # world rank s: replica 0's stage s
            ring = core_cost.ring_all_reduce(numel, layout.dp, d)[0] * 4 if layout.dp > 1 else 0
            assert sent.get("grad-sync", 0) == ring  # one flat bucket
            tie = cfg.model == "gpt" and p > 1 and s in (0, p - 1)
            assert sent.get("embed-tie", 0) == (core_cost.ring_all_reduce(
                mc.vocab_size * mc.n_embd, 2, 0 if s == 0 else 1)[0] * 4 if tie else 0)
    assert result.bytes_per_rank() == cost.merge_bytes_per_rank(cfg, layout)
    assert result.bytes_per_rank() == parlab.schemes()[SCHEME].cost(cfg).bytes_sent


def test_no_stage_stashes_a_weight_version():
    """Measured weights, gradients and optimizer state are the closed form's, and nothing else."""
    result = run(4, pp=4)
    for out, mem in zip(result.outputs, result.memory):
        x = out.extras
        form = cost.merge_stage_memory(x["stage_numel"], result.config.optimizer)
        assert (mem["params"], mem["grads"], mem["optimizer"]) == \
            (form["params"], form["grads"], form["optimizer"])
        assert x["peak_versions"] == form["stashed_weights"] == 0
        assert x["in_flight_peak"] == cost.merge_in_flight(4, x["microbatches"], x["stage"])


# ----------------------------------------------------------------------------- the merge itself
def _slowest_pace(counts, unit_s, message_s) -> float:
    """The slowest stage's F + B + received messages per micro-batch of a cut."""
    k, start, worst = len(counts), 0, 0.0
    for s, c in enumerate(counts):
        worst = max(worst, sum(unit_s[start:start + c]) + message_s * cost.merge_messages_received(k, s))
        start += c
    return worst


def test_the_cut_is_the_exact_min_max_of_the_pace():
    cfg = make_config(SCHEME, world_size=4, steps=1, link="NVLink")
    for c in partition_merge.candidates(cfg):
        k, layers = c.layout.pp, sum(c.layout.counts)
        units = partition_merge.unit_work(cfg, c.layout.mb_rows, c.layout.microbatches)
        clock = partition_merge.pricing_clock(cfg)  # the wall clock's plan: priced on the A100
        m = c.layout.microbatches
        unit_s = [clock.price(u.forward) + clock.price(u.backward) / m for u in units]
        every = [cut for cut in itertools.product(range(1, layers + 1), repeat=k) if sum(cut) == layers]
        best = min(_slowest_pace(cut, unit_s, c.message_s) for cut in every)
        assert _slowest_pace(c.layout.counts, unit_s, c.message_s) == pytest.approx(best)
        assert max(c.pace_s) == pytest.approx(best)


def test_the_plan_is_the_smallest_modelled_step_and_pp_fixes_k():
    cfg = make_config(SCHEME, world_size=4, steps=1, link="100Gb-IB", clock="A100")
    cands = partition_merge.candidates(cfg)
    assert [c.layout.pp for c in cands] == [1, 2, 4]
    assert partition_merge.plan(cfg).step_s == min(c.step_s for c in cands)
    fixed = make_config(SCHEME, world_size=4, steps=1, link="100Gb-IB", clock="A100", pp=4)
    assert [c.layout.pp for c in partition_merge.candidates(fixed)] == [4]


def test_free_messages_cost_only_the_fill_and_equal_stages_give_the_1f1b_form():
    """No link: a boundary costs nothing but the fill, so the choice is compute's alone — all
    replicas (k = 1) repeat the whole optimizer step, stages split it (on the A100's roofline the
    tiny GPT's AdamW step, one launch-bound kernel per tensor and update, outweighs its forward and
    backward: the model picks 2 stages × 2 replicas). With equal stages and free messages the
    simulated pipeline is (m+k−1)·t."""
    cfg = make_config(SCHEME, world_size=4, steps=1)
    chosen, replicas = partition_merge.plan(cfg), partition_merge.evaluate(cfg, 1, 4, 1)
    assert chosen.step_s <= replicas.step_s and chosen.message_s == 0
    if chosen.layout.pp > 1:  # a pipeline won on the optimizer step it splits
        assert sum(replicas.optimizer_s) > max(chosen.optimizer_s)
    c = partition_merge.evaluate(cfg, 4, 1, 4)  # k = 4 stages of one block, m = 4
    per_mb = [f + b for f, b in zip(c.forward_s, c.backward_s)]
    assert c.layout.counts == (1, 1, 1, 1) and c.message_s == 0
    assert (4 + 4 - 1) * min(per_mb) <= c.pipeline_s <= (4 + 4 - 1) * max(per_mb)
    assert cost.merge_step_time(7.0, [1.0, 0.5], [0.25, 1.0]) == 8.5


# ----------------------------------------------------------------------------- the model, paced
MODEL_TOLERANCE = 0.02  # the step-time model against a run in virtual time (measured 1.1%)


def test_the_step_model_predicts_a_paced_run():
    """Two stages of the tiny GPT over NVLink in virtual time (A100): the measured step within ±2%
    of the model (measured: the model 1.1% above the run). Virtual time is bit-reproducible: the
    same run again gives the same step times."""
    common = dict(link="NVLink", clock="A100", pp=2)
    model = partition_merge.plan(make_config(SCHEME, world_size=2, steps=STEPS, **common))
    r = parlab.run(SCHEME, world_size=2, steps=STEPS, **common)
    assert r.outputs[0].extras["predicted_step_s"] == model.step_s
    assert model.step_s == pytest.approx(r.step_time(), rel=MODEL_TOLERANCE)
    assert parlab.run(SCHEME, world_size=2, steps=STEPS, **common).step_times == r.step_times


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("world_size,options,names", [
    (4, {"pp": 3}, "pp=3"),
    (8, {"pp": 8}, "pp=8"),
    (2, {"pp": 2, "microbatches": 5}, "microbatches=5"),
    (2, {"pp": 0}, "pp"),
])
def test_bad_input_fails_before_any_process(world_size, options, names):
    with pytest.raises(ValueError, match=names):
        make_config(SCHEME, world_size=world_size, **options)
