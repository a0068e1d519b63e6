"""Chapter 08's error map and summary: C(g) is each scheme's own compressor (lossless at the
lossless settings, PowerSGD sends vectors whole), the whole-gradient error combines the
per-tensor ones exactly, the printed bytes are the ledger's per step, and the verdicts follow
the numbers they are computed from."""

import math
import types

import pytest
import torch

from parlab.compression.explore import error as ee


class FakeRun:
    """What `error_map` and `summary` read of a `RunResult`: ledger sums, losses, step times."""

    def __init__(self, sent: int, rounds: int, loss: float, ms: float, steps: int = 4, link=None,
                 **options):
        self.config = types.SimpleNamespace(steps=steps, world_size=2, link=link, options=options)
        self.sums = {"bytes_sent": sent, "rounds": rounds}
        self.losses, self.step_times = [loss], [ms / 1e3] * steps

    def bytes_per_rank(self, key: str = "bytes_sent", **match):
        return [self.sums[key]]


def fake_runs(naive_rounds: int, naive_ms: float, alpha: float = 0.03, beta: float = 1e7) -> dict:
    link = types.SimpleNamespace(latency_s=alpha, bandwidth_Bps=beta, name="a paced link")
    runs = {"single": FakeRun(0, 0, 4.0, 1.0),
            "ddp-naive": FakeRun(400_000, naive_rounds, 4.0, naive_ms, link=link)}
    for k, scheme in enumerate(ee.COMPRESSORS):
        runs[scheme] = FakeRun(4_000 * (k + 1), 4, 4.0 + 0.1 * k, 100.0)
    runs["local-sgd"] = FakeRun(100_000, 1, 4.1, 100.0, sync_every=4)
    runs["diloco"] = FakeRun(100_000, 1, 4.2, 100.0, sync_every=4)
    return runs


def test_compressed_is_each_schemes_compressor():
    g = torch.randn(8, 6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(ee.compressed("topk", g, ratio=1.0), g)
    assert torch.allclose(ee.compressed("powersgd", g, rank=6), g, atol=1e-5)  # full rank: exact
    v = torch.randn(5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(ee.compressed("powersgd", v, rank=4), v)  # a vector is sent whole
    scaled_sign = g.abs().mean() * torch.where(g >= 0, 1.0, -1.0)
    assert torch.allclose(ee.compressed("signsgd", g), scaled_sign)


def test_whole_gradient_error_combines_the_tensors():
    names, errors = ee.relative_errors()
    grads = ee.real_gradients()
    norm = math.sqrt(sum(g.norm().item() ** 2 for _, g in grads))
    assert list(errors) == ee.COMPRESSORS and names == [n for n, _ in grads]
    for e in errors.values():
        lost = [r * g.norm().item() for r, (_, g) in zip(e["per_tensor"], grads)]
        assert e["whole"] == pytest.approx(math.sqrt(sum(x * x for x in lost)) / norm, rel=1e-5)
    assert all(errors["powersgd"]["per_tensor"][i] == 0 for i, (_, g) in enumerate(grads) if g.ndim == 1)
    assert errors["topk"]["options"] == {"ratio": 0.01}  # the scheme's default, not §1's 10%


def test_error_map_prints_ledger_bytes_per_step_and_the_most_exact(capsys):
    import matplotlib

    matplotlib.use("Agg")
    runs = fake_runs(naive_rounds=144, naive_ms=2000.0)
    fig = ee.error_map(runs)
    out = capsys.readouterr().out
    _, errors = ee.relative_errors()
    for k, scheme in enumerate(ee.COMPRESSORS):
        line = next(x for x in out.splitlines() if x.startswith(scheme + " "))
        assert f"{4_000 * (k + 1) / 4:,.0f}" in line  # the ledger's bytes ÷ steps
    exact = min(errors, key=lambda s: errors[s]["whole"])
    assert f"most exact: {exact}" in out and exact in fig.axes[0].get_title()
    assert fig.axes[1].get_ylabel().startswith("relative error")  # the colorbar says its unit


@pytest.mark.parametrize("alpha, beta, cause", [(0.03, 1e7, "1080 ms of latency (36 rounds × α: one "
                                                 "all-reduce per tensor) and 10 ms of bytes (bytes/β) — its "
                                                 "rounds, not its bytes"),
                                                (1e-6, 1e6, "ms of bytes (bytes/β) — its bytes set it")])
def test_summary_names_what_sets_the_step(capsys, alpha, beta, cause):
    lines = ee.summary(fake_runs(144, naive_ms=2000.0, alpha=alpha, beta=beta))  # 36 rounds, 1e5 B a step
    out = capsys.readouterr().out
    assert out.startswith("When to use it (from this run):") and len(lines) == 4
    assert cause in lines[0]
    assert "randomk" not in lines[2] and "topk sent 100× fewer bytes" in lines[2]  # fewest bytes
    assert lines[3].startswith("Local SGD / DiLoCo when every message is too many: local-sgd")
