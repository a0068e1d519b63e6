"""Chapter 04, the pipelined 3-D U-Net (LAMP, Zhu et al., MICCAI 2020): the data is the script's,
every pipeline schedule trains exactly like the single process (pp 2, 3, 4 and dp2×pp2), the
skips travel straight from producer to consumer stage through Comm with exactly the closed form's
bytes, and bad input fails before any process starts."""

import importlib.util
import math

import numpy as np
import pytest

import parlab
from parlab.models import UNet3D, UNet3DConfig, volumes
from parlab.pipeline import unet_cost
from parlab.pipeline.unet_stages import skip_routes

BATCH = 8


@pytest.fixture(scope="module")
def reference():
    return parlab.run("single", model="unet3d", steps=3, batch_size=BATCH)


def test_volumes_file_is_what_the_script_draws():
    path = volumes.DATA_DIR / "make_volumes.py"
    spec = importlib.util.spec_from_file_location("make_volumes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x, y = module.draw(*module.TRAIN, seed=0)
    with np.load(volumes.DATA_DIR / "volumes.npz") as data:
        assert np.array_equal(data["train_x"], x) and np.array_equal(data["train_y"], y)
        assert set(np.unique(data["test_y"])) == {0, 1, 2}


def test_volume_batch_is_a_function_of_seed_and_step():
    a, b = volumes.volume_batch(3, 4, 0, 16), volumes.volume_batch(3, 4, 0, 16)
    c = volumes.volume_batch(4, 4, 0, 16)
    assert a[0].shape == (4, 1, 16, 16, 16) and a[1].shape == (4, 16, 16, 16)
    assert a[0].equal(b[0]) and a[1].equal(b[1]) and not a[0].equal(c[0])


def test_parameter_closed_form_is_the_model():
    for levels, base in ((2, 2), (3, 4), (4, 3)):
        cfg = UNet3DConfig(levels=levels, base=base, block_size=16)
        model = UNet3D(cfg)
        assert unet_cost.layer_params(cfg) == [sum(p.numel() for p in layer.parameters())
                                               for layer in model.layers]


def test_skip_routes_cross_stages():
    assert skip_routes(3, [2, 2, 1, 1]) == [(0, 0, 2), (1, 0, 1)]
    assert skip_routes(4, [2, 2, 2, 2]) == [(0, 0, 3), (1, 0, 2), (2, 1, 2)]
    assert skip_routes(3, [6]) == []


@pytest.mark.parametrize("scheme,world,options", [
    ("pp-gpipe", 2, {}),
    ("pp-1f1b", 4, {}),
    ("pp-gpipe", 3, {}),
    ("pp-1f1b", 4, {"pp": 2}),  # dp2 × pp2
    ("pp-eager-1f1b", 4, {}),
    ("pp", 2, {"schedule": "gpipe", "pp": 1}),  # dp2: no stage boundary at all
])
def test_unet_pipeline_equals_single_and_ledger_equals_closed_form(reference, scheme, world,
                                                                     options):
    r = parlab.run(scheme, world_size=world, model="unet3d", steps=3, batch_size=BATCH, **options)
    assert r.compare(reference).match
    cfg, out = r.config.model_config, r.outputs
    pp = options.get("pp", world)
    dp = world // pp
    counts = out[0].extras["layers_per_stage"]
    rows = BATCH // dp
    for rank in range(world):
        stage = rank % pp  # mesh (dp, pp): pp innermost
        main_f, main_b = unet_cost.main_bytes_per_step(cfg, counts, rows, stage)
        skip_f, skip_b = unet_cost.skip_bytes_per_step(cfg, counts, rows, stage)
        got = {ph: r.bytes_per_rank(phase=ph)[rank] for ph in
               ("pp-fwd", "pp-bwd", "pp-skip", "pp-skip-bwd")}
        assert got == {"pp-fwd": 3 * main_f, "pp-bwd": 3 * main_b, "pp-skip": 3 * skip_f,
                       "pp-skip-bwd": 3 * skip_b}, (rank, got)
    from parlab.pipeline import cost
    from parlab.pipeline.schemes import resolve
    name = options.get("schedule", scheme.removeprefix("pp-"))
    m = resolve(r.config, name).microbatches
    for rank in range(world):
        assert out[rank].extras["in_flight_peak"] == cost.in_flight_peak(name, pp, m, rank % pp)
    if pp > 1:
        skips = [e for e in r.timeline if e["kind"] == "comm"
                 and e["args"].get("phase", "").startswith("pp-skip")]
        assert skips, "skip messages are on the timeline"


def test_skip_sent_once_not_relayed():
    cfg = UNet3DConfig(levels=4, base=2, block_size=16)
    direct, relayed = unet_cost.relayed_skip_bytes(cfg, [2, 2, 2, 2], 4)
    one = [4 * 4 * cfg.channels(k) * (16 // 2 ** k) ** 3 for k in range(3)]
    assert direct == sum(one) and relayed == 3 * one[0] + 2 * one[1] + one[2]


def test_stage_activations_shrink_with_pp():
    """Each stage holds a part of the activations of the whole network (LAMP's point)."""
    single = parlab.run("single", model="unet3d", steps=1, batch_size=4)
    pipe = parlab.run("pp-gpipe", world_size=2, model="unet3d", steps=1, batch_size=4,
                      microbatches=1)
    whole = single.memory[0]["activations"]
    assert max(m["activations"] for m in pipe.memory) < whole
    assert math.isclose(sum(m["params"] for m in pipe.memory), single.memory[0]["params"])


@pytest.mark.parametrize("kwargs,word", [
    ({"scheme": "pp-zb"}, "unet3d"),
    ({"scheme": "pp-interleaved"}, "unet3d"),
    ({"scheme": "pp", "schedule": "zb"}, "zb"),
    ({"scheme": "pp-1f1b", "partition": "by-memory"}, "lamp"),
    ({"scheme": "pp-1f1b", "model_config": {"block_size": 10}}, "block_size=10"),
    ({"scheme": "pp-1f1b", "model_config": {"levels": 1}}, "levels=1"),
    ({"scheme": "pp-1f1b", "partition": [1, 1, 1, 2]}, "partition"),
])
def test_bad_input_is_named(kwargs, word):
    kwargs = dict(kwargs)
    scheme = kwargs.pop("scheme")
    with pytest.raises(ValueError, match=word):
        parlab.run(scheme, world_size=4, model="unet3d", steps=1, batch_size=BATCH, **kwargs)


def test_sliding_window_one_window_is_the_whole_volume_and_scores_count():
    import torch

    from parlab.pipeline.explore import unet as ex_unet

    model = UNet3D(UNet3DConfig(levels=2, base=2, block_size=8))
    x = torch.randn(1, 1, 16, 16, 16)
    with torch.no_grad():
        whole = model(x)
        assert torch.allclose(ex_unet.sliding_window(model, x, 16, 16), whole)
        tiled = ex_unet.sliding_window(model, x, 8, 8)  # 8 windows: borders differ
        assert tiled.shape == whole.shape and not torch.allclose(tiled, whole)
    y = whole.argmax(1)
    assert ex_unet._scores(whole, y) == {"accuracy": 1.0, "dice": 1.0}
    assert ex_unet._scores(whole, (y + 1) % 3)["accuracy"] == 0.0


# ------------------------------------------- eager 1F1B over meshes of different widths (AlpaComm)
WIDTHS = [([2, 1], "send-recv"), ([2, 1], "broadcast"), ([2, 1], "balanced"), ([1, 2], "balanced"),
          ([2, 1, 1], "broadcast")]


@pytest.fixture(scope="module")
def gpt_reference():
    return parlab.run("single", steps=2)


@pytest.mark.parametrize("widths,method", WIDTHS, ids=[f"{w}-{m}" for w, m in WIDTHS])
def test_reshard_between_meshes_of_different_widths(gpt_reference, widths, method):
    """tp=2 → tp=1 (and back): every replica computes what single computes; every rank sends the
    closed form's bytes (`reshard_boundary.source_bytes` with n needers, `forward_bytes`)."""
    from parlab.pipeline import cost
    from parlab.pipeline.reshard_boundary import forward_bytes, source_bytes, stage_ranks
    m = 4
    r = parlab.run("pp-reshard", world_size=sum(widths), steps=2, widths=widths, method=method,
                   microbatches=m, schedule="eager-1f1b")
    assert r.compare(gpt_reference).match
    mc = r.config.model_config
    numel = r.config.batch_size // m * mc.block_size * mc.n_embd
    ranks, pp = stage_ranks(widths), len(widths)
    for s, group in enumerate(ranks):
        for member, rank in enumerate(group):
            want = {"pp-fwd": 0, "pp-bwd": 0}
            if s < pp - 1:  # source forward, forwarder of the gradient coming back
                want["pp-fwd"] += source_bytes(numel, widths[s], method, member,
                                               needers=widths[s + 1])
                want["pp-bwd"] += forward_bytes(numel, widths[s], method, member)
            if s > 0:  # forwarder of the activation, source of the gradient
                want["pp-fwd"] += forward_bytes(numel, widths[s], method, member)
                want["pp-bwd"] += source_bytes(numel, widths[s], method, member,
                                               needers=widths[s - 1])
            for phase, per_message in want.items():
                assert r.bytes_per_rank(op="send", phase=phase)[rank] == 2 * m * per_message, \
                    (s, member, phase)
            assert r.outputs[rank].extras["in_flight_peak"] == cost.in_flight_peak(
                "eager-1f1b", pp, m, s)


@pytest.mark.parametrize("kwargs,word", [
    (dict(world_size=3, widths=[2, 2]), "sum to 4"),
    (dict(world_size=3, widths=[3]), "widths"),
    (dict(world_size=3, widths=[2, 0, 1]), "widths"),
    (dict(world_size=3, widths=[2, 1], pp=3), "pp=3"),
    (dict(world_size=3, widths=[2, 1], schedule="interleaved"), "interleaved"),
])
def test_widths_bad_input_is_named(kwargs, word):
    with pytest.raises(ValueError, match=word):
        parlab.run("pp-reshard", **kwargs)


def test_activation_checkpointing_recomputes_unet_layers_exactly(reference):
    """Every U-Net layer is a pure function (skips kept outside it), so checkpointing recomputes
    it in backward; the pipeline with checkpoint=True is still the single process."""
    r = parlab.run("pp-1f1b", world_size=2, model="unet3d", steps=3, batch_size=BATCH,
                   checkpoint=True)
    assert r.compare(reference).match
    assert max(m["activations"] for m in r.memory) < reference.memory[0]["activations"] / 2


def test_stage_ranks_keep_the_equal_width_layout():
    from parlab.pipeline.reshard_boundary import boundary_groups, stage_ranks
    assert stage_ranks([2, 2]) == [[0, 2], [1, 3]]  # d·pp + s, as Mesh([("dp", 2), ("pp", 2)])
    assert stage_ranks([2, 1]) == [[0, 2], [1]]
    assert stage_ranks([1, 2, 1]) == [[0], [1, 3], [2]]
    assert boundary_groups(2, 2) == boundary_groups(2, [2, 2]) == ([[0, 1, 2, 3]], [[0], [1], [2], [3]])
    assert boundary_groups(3, [1, 2, 1]) == ([[0, 1, 3], [2]], [[1, 2, 3], [0]])


# ------------------------------------------- LAMP's automated partition (balance by size / time)
def test_lamp_layer_sizes_add_up_to_the_single_process_activations():
    """The per-layer profile counts what the run's memory ledger counts: over one forward (with
    the loss) the layers' bytes sum to the single process's measured activation peak."""
    from parlab.pipeline import lamp
    cfg = UNet3DConfig()
    sizes = lamp.layer_sizes(UNet3D(cfg), cfg, BATCH)
    single = parlab.run("single", model="unet3d", steps=1, batch_size=BATCH)
    assert sum(sizes["activations"]) == single.memory[0]["activations"]
    assert sum(sizes["params"]) == single.memory[0]["params"]


def test_min_max_split_is_exhaustive_search():
    import itertools

    from parlab.pipeline import lamp
    costs = [5.0, 1.0, 7.0, 2.0, 2.0, 9.0, 1.0]
    for p in range(1, 5):
        best = min(max(sum(costs[i:j]) for i, j in zip((0,) + cut, cut + (len(costs),)))
                   for cut in itertools.combinations(range(1, len(costs)), p - 1))
        counts = lamp.time_partition(costs, p)
        bounds = list(itertools.accumulate([0] + counts))
        got = max(sum(costs[i:j]) for i, j in zip(bounds, bounds[1:]))
        assert len(counts) == p and sum(counts) == len(costs) and got == best
    with pytest.raises(ValueError, match="stages"):
        lamp.time_partition(costs, 8)


@pytest.mark.parametrize("scheme,world,partition,options", [
    ("pp-gpipe", 2, "lamp", {}),
    ("pp-1f1b", 4, "lamp", {}),
    ("pp-gpipe", 4, "lamp", {}),
    ("pp-gpipe", 2, "lamp", {"checkpoint": True}),  # as LAMP's code runs GPipe
    ("pp-1f1b", 2, "balanced", {}),
    ("pp-gpipe", 4, "balanced", {}),
])
def test_lamp_partition_equals_single(reference, scheme, world, partition, options):
    """A profiled split (by memory: LAMP's balance_by_size; by time: balance_by_time) still trains
    exactly like the single process; by memory, the split is the profile's min-max one, its
    largest estimated stage is no larger than the even split's, and under GPipe (LAMP's schedule)
    the estimate is each rank's measured memory, byte for byte."""
    from parlab.pipeline import cost, lamp
    from parlab.pipeline.explore import lamp as ex_lamp
    from parlab.pipeline.schemes import resolve
    from parlab.pipeline.stages import even_partition
    r = parlab.run(scheme, world_size=world, model="unet3d", steps=3, batch_size=BATCH,
                   partition=partition, **options)
    assert r.compare(reference).match
    counts = r.outputs[0].extras["layers_per_stage"]
    assert len(counts) == world and sum(counts) == 6 and min(counts) >= 1
    if partition == "lamp":
        plan = resolve(r.config, scheme.removeprefix("pp-"))
        cfg = r.config.model_config
        from parlab.engine.loop import build_model
        sizes = lamp.layer_sizes(build_model(r.config), cfg, BATCH // plan.microbatches)
        flight = [cost.in_flight_peak(plan.schedule, world, plan.microbatches, s)
                  for s in range(world)]
        assert counts == lamp.memory_partition(sizes, world, flight, 4)  # AdamW: 4 copies

        def largest(c):
            return max(m["total"] for m in lamp.stage_memory(c, sizes, flight, 4))
        assert largest(counts) <= largest(even_partition(6, world))
        if options.get("checkpoint"):
            assert largest(counts) < largest(even_partition(6, world))
        if plan.schedule == "gpipe":
            assert ex_lamp.estimate(r) == ex_lamp.measured(r)


def test_lamp_partition_refused_for_gpt():
    with pytest.raises(ValueError, match="lamp"):
        parlab.run("pp-1f1b", world_size=2, steps=1, partition="lamp")


def test_patch_curriculum_carries_parameters_across_sides():
    """The curriculum's phases train one model: a phase at a larger side moves on from the
    parameters the smaller one left, and the whole curriculum is a function of its phases and
    seed (same losses, same parameters when repeated)."""
    import torch

    from parlab.pipeline.explore import lamp as ex_lamp
    both, losses = ex_lamp.train_patches([(8, 2), (16, 1)], batch_size=2)
    first, _ = ex_lamp.train_patches([(8, 2)], batch_size=2)
    assert len(losses) == 3
    assert any(not torch.equal(a, b) for a, b in zip(both.parameters(), first.parameters()))
    again, losses_again = ex_lamp.train_patches([(8, 2), (16, 1)], batch_size=2)
    assert losses_again == losses
    assert all(torch.equal(a, b) for a, b in zip(both.parameters(), again.parameters()))
