"""Chapter 09, sharded parameter servers (Li et al., OSDI 2014): exact where one server is, every
rank's bytes and every server's bytes per update equal the closed forms, bad `servers` rejected."""

import functools

import pytest

import parlab
from parlab.asynchrony import cost
from parlab.asynchrony.delays import VirtualClock
from parlab.asynchrony.versions import Book, simulate

STEPS = 3


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS, timeout=120)


@pytest.mark.parametrize("world_size,servers,model,optimizer", [(3, 2, "gpt", "adamw"),
                                                                (4, 2, "gpt", "adamw"),
                                                                (4, 3, "mlp", "sgd")])
def test_sharded_ps_sync_matches_single(runs, world_size, servers, model, optimizer):
    comparison = runs("ps-sync", world_size, model, optimizer, servers=servers).compare(
        runs("single", 1, model, optimizer))
    assert comparison.match, comparison.problems


def test_sharded_ps_ssp_with_staleness_zero_is_ps_sync(runs):
    ssp = runs("ps-ssp", 4, servers=2, staleness=0, delays="seeded", straggler=3.0, jitter=1.0)
    sync = runs("ps-sync", 4, servers=2)
    assert ssp.compare(sync).match
    assert ssp.bytes_per_rank() == sync.bytes_per_rank()
    for out in ssp.outputs[:2]:  # each server logs its own shard's versions: all fresh
        assert all(g["staleness"] == 0 for g in out.extras["log"])


def test_sharded_ps_async_with_one_worker_matches_single(runs):
    comparison = runs("ps-async", 3, servers=2).compare(runs("single"))
    assert comparison.match, comparison.problems


def test_sharded_async_servers_agree_on_the_seeded_schedule(runs):
    """Every server logs the same (worker, job, version, applied_at): the simulated book's."""
    result = runs("ps-async", 4, steps=8, servers=2, delays="seeded", straggler=3.0, jitter=0.5)
    book = simulate(Book(2, 8, "asp"), VirtualClock(cost.schedule_of(result.config)))
    expect = [(g.worker, g.job, g.version, g.applied_at) for g in book.log]
    for out in result.outputs[:2]:
        assert [(g["worker"], g["job"], g["version"], g["applied_at"]) for g in out.extras["log"]] == expect


@pytest.mark.parametrize("scheme,options", [("ps-async", {}),
                                            ("ps-ssp", {"staleness": 1, "jitter": 1.0})])
def test_paced_sharded_servers_take_pushes_in_one_virtual_order(runs, scheme, options):
    """Virtual time: each server takes pushes in virtual arrival order; a worker pushes to servers
    0..k−1 in turn over one link, so both servers see one order (ssp: their books agree on every
    version and staleness) and neither waits for ever on a worker that waits on the other."""
    r = runs(scheme, 5, servers=2, steps=6, straggler=3.0, clock="A100", link="NVLink", **options)
    leader, follower = (out.extras["log"] for out in r.outputs[:2])
    fields = ("worker", "job") if scheme == "ps-async" else ("worker", "job", "version", "applied_at")
    assert [tuple(g[f] for f in fields) for g in follower] == [tuple(g[f] for f in fields) for g in leader]
    assert sorted(g["job"] for g in leader) == (list(range(6)) if scheme == "ps-async"
                                               else sorted(c for c in range(6) for _ in range(3)))


@pytest.mark.parametrize("scheme,world_size,options", [
    ("ps-sync", 3, {"servers": 2}), ("ps-sync", 4, {"servers": 3}),
    ("ps-ssp", 4, {"servers": 2, "staleness": 1, "delays": "seeded", "straggler": 3.0}),
    ("ps-async", 4, {"servers": 2, "delays": "seeded", "straggler": 3.0}),
    ("ps-async", 3, {"servers": 2})])
def test_sharded_ledger_bytes_equal_closed_form(runs, scheme, world_size, options):
    steps = 4
    result = runs(scheme, world_size, steps=steps, **options)
    numel = sum(v.numel() for v in result.state.values())
    assert result.bytes_per_rank() == parlab.schemes()[scheme].cost(result.config).bytes_sent
    k = options["servers"]
    workers = world_size - k
    mode = "asp" if scheme == "ps-async" else "ssp"
    per_update = cost.server_bytes_per_update(numel, workers, mode, k)
    into = result.bytes_per_rank("bytes_recv", phase="push")
    out = result.bytes_per_rank(phase="pull")
    for i, (m_in, m_out) in enumerate(per_update):
        if mode == "ssp":  # every update: W shard gradients in, W shards out (last clock: none out)
            assert into[i] == steps * m_in
            assert out[i] == steps * m_out
        else:  # one gradient shard per update; STOP headers beside
            stops = 16 * workers if i > 0 else 0
            assert into[i] == steps * m_in + stops
            assert out[i] == steps * m_out + (16 * workers if i == 0 else workers * m_out)
    assert sum(m for m, _ in per_update) == (cost.message_bytes(numel) + 16 * (k - 1)) * (
        workers if mode == "ssp" else 1)


def test_sharding_cuts_the_busiest_server_link():
    numel, workers = 10_000, 6
    one = cost.server_bytes_per_update(numel, workers, "ssp")
    four = cost.server_bytes_per_update(numel, workers, "ssp", servers=4)
    assert max(i for i, _ in four) * 4 == pytest.approx(one[0], rel=0.01)


@pytest.mark.parametrize("scheme,kwargs,message", [
    ("ps-sync", dict(world_size=3, servers=3), "servers=3"),
    ("ps-async", dict(world_size=2, servers=2), "servers=2"),
    ("ps-sync", dict(world_size=3, servers=0), "servers=0"),
    ("ps-sync", dict(world_size=4, servers=2, batch_size=9), "batch_size=9"),
    ("ps-ssp", dict(world_size=8, servers=5, model="mlp"), None)])
def test_bad_servers_names_the_value(scheme, kwargs, message):
    if message is None:  # a valid configuration passes the checks (no processes started)
        from parlab.engine.runner import make_config
        make_config(scheme, steps=1, **kwargs)
        return
    with pytest.raises(ValueError, match=message):
        parlab.run(scheme, steps=1, **kwargs)


def test_more_servers_than_parameter_elements_is_rejected(monkeypatch):
    from parlab.asynchrony import schemes
    from parlab.engine.runner import make_config

    monkeypatch.setattr(schemes, "param_numels", lambda cfg: [2, 1])  # a model of Ψ = 3 elements
    with pytest.raises(ValueError, match="servers=4 is more than the Ψ=3"):
        make_config("ps-sync", world_size=8, steps=1, servers=4)


def test_sharded_async_arrival_order(runs):
    """Arrival order on the paced clock (virtual time: the same on a busy machine): server 0
    schedules, the follower applies what arrives; both apply every job once, and the bytes are the
    closed form of who did what (the jobs each worker did, read from the leader's log)."""
    steps = 8
    result = runs("ps-async", 4, steps=steps, servers=2, straggler=2.0, clock="A100",
                  link="NVLink")
    leader, follower = (out.extras["log"] for out in result.outputs[:2])
    assert sorted(g["job"] for g in leader) == list(range(steps))
    pairs = [sorted((g["worker"], g["job"]) for g in log) for log in (leader, follower)]
    assert pairs[0] == pairs[1]
    numel = sum(v.numel() for v in result.state.values())
    jobs = {w: sum(1 for g in leader if g["worker"] == w) for w in (1, 2)}
    assert jobs[1] > jobs[2]  # the straggler does fewer
    predicted = cost.async_bytes(numel, jobs, steps, servers=2)
    assert result.bytes_per_rank()[:2] == predicted[:2]
    assert sum(result.bytes_per_rank()[2:]) == sum(predicted[2:])


def test_the_sharded_drop_splits_into_role_change_and_sharding(runs):
    """4 ranks, 1 → 2 servers: the busiest server's bytes in drop 3×, 1.5× because a worker became a
    server (measured: one server with W = 2, on 3 ranks) and 2× from sharding at equal W."""
    def busiest_in(result):
        servers = result.config.options.get("servers", 1)
        return max(result.bytes_per_rank("bytes_recv", phase="push")[:servers]) // STEPS

    sharded = runs("ps-sync", 4, servers=2)
    measured = busiest_in(runs("ps-sync", 4)), busiest_in(runs("ps-sync", 3)), busiest_in(sharded)
    effects = cost.sharding_effects(sum(v.numel() for v in sharded.state.values()), 4, 2)
    assert measured == (effects["one server"], effects["one server, same W"], effects["sharded"])
    assert effects["role factor"] == 3 / 2 and abs(effects["shard factor"] - 2) < 1e-3
