"""The parlab.run contract: the registry, the reference, ddp-naive equal to it, and bad input."""

import json
import subprocess
import sys

import pytest

import parlab
from parlab.core.mesh import validate_degrees


@pytest.fixture(scope="module")
def references():
    cache = {}

    def get(model="gpt", optimizer="adamw", steps=3):
        key = (model, optimizer, steps)
        if key not in cache:
            cache[key] = parlab.run("single", model=model, steps=steps, optimizer=optimizer)
        return cache[key]
    return get


def test_registry_lists_single_and_ddp_naive():
    parlab.run("single", steps=1)  # importing every scheme module must not rebind parlab.schemes
    schemes = parlab.schemes()
    assert schemes["single"].exact and schemes["ddp-naive"].exact
    assert "algo" in schemes["ddp-naive"].options


def test_reference_learns():
    result = parlab.run("single", model="mlp", steps=60, lr=0.01)
    assert result.losses[-1] < 0.75 * result.losses[0]
    gpt = parlab.run("single", model="gpt", steps=30)
    assert gpt.losses[-1] < gpt.losses[0] - 0.5


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("model,optimizer", [("gpt", "adamw"), ("mlp", "sgd")])
def test_ddp_naive_matches_single(references, world_size, model, optimizer):
    ref = references(model, optimizer)
    result = parlab.run("ddp-naive", world_size=world_size, model=model, steps=3,
                        optimizer=optimizer)
    comparison = result.compare(ref)
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("algo", ["ring", "tree", "naive"])
def test_ddp_naive_with_handwritten_algorithms_matches(references, algo):
    result = parlab.run("ddp-naive", world_size=3, steps=3, algo=algo)
    assert result.compare(references()).match


def test_ddp_naive_ledger_bytes_are_ring_closed_form():
    from parlab.core import cost

    steps, n = 2, 4
    result = parlab.run("ddp-naive", world_size=n, steps=steps)
    params = {k: v.numel() for k, v in result.state.items()}
    for rank in range(n):
        expect = steps * sum(cost.ring_all_reduce(p, n, rank)[0] for p in params.values()) * 4
        assert result.bytes_per_rank(op="all_reduce")[rank] == expect
    psi = sum(params.values())
    per_step = result.bytes_per_rank()[0] / steps
    assert abs(per_step - 2 * (n - 1) / n * psi * 4) <= 2 * len(params) * 4  # remainders only


def test_memory_is_measured():
    result = parlab.run("ddp-naive", world_size=2, steps=1, optimizer="adamw")
    psi = sum(v.numel() for v in result.state.values())
    for mem in result.memory:
        assert mem["params"] == mem["grads"] == 4 * psi
        assert mem["optimizer"] == 8 * psi
        assert mem["activations"] > 0


def test_timeline_and_trace(tmp_path):
    from parlab.core.trace import to_chrome_trace

    result = parlab.run("ddp-naive", world_size=2, steps=2)
    kinds = {e["kind"] for e in result.timeline}
    assert {"compute", "comm", "wait"} <= kinds
    assert min(e["t0"] for e in result.timeline) == 0.0
    to_chrome_trace(result.timeline, str(tmp_path / "t.json"))
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    # r.save_trace: the same JSON, one complete event per span of the timeline, ranks as processes
    assert result.save_trace(tmp_path / "r.json") == tmp_path / "r.json"
    events = json.loads((tmp_path / "r.json").read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert len(spans) == len(result.timeline)
    assert sorted((e["pid"], e["name"], e["cat"]) for e in spans) == sorted(
        (e["rank"], e["name"], e["kind"]) for e in result.timeline)
    assert {e["args"]["name"] for e in events if e["name"] == "process_name"} == {"rank 0", "rank 1"}
    with pytest.raises(ValueError, match=r"path='.*' is a directory"):
        result.save_trace(tmp_path)


@pytest.mark.parametrize("kwargs,match", [
    (dict(scheme="nope"), "scheme='nope' is unknown"),
    (dict(scheme="ddp-naive", world_size=0), "world_size=0"),
    (dict(scheme="ddp-naive", world_size=5), "batch_size=12 is not divisible by world_size=5"),
    (dict(scheme="single", world_size=2), "world_size=2"),
    (dict(scheme="ddp-naive", bucket=3), r"options \['bucket'\] are unknown"),
    (dict(scheme="ddp-naive", algo="magic"), "algo='magic'"),
    (dict(scheme="ddp-naive", model="resnet"), "model='resnet'"),
    (dict(scheme="ddp-naive", link="5G"), "link='5G'"),
    (dict(scheme="ddp-naive", steps=0), "steps=0"),
    (dict(scheme="ddp-naive", optimizer="lamb"), "optimizer='lamb'"),
    (dict(scheme="ddp-naive", model_config={"n_head": 5}), "n_embd=32 is not divisible by n_head=5"),
    (dict(scheme="ddp-naive", model_config={"depth": 5}), r"keys \['depth'\] are unknown"),
])
def test_bad_input_is_a_value_error_naming_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        parlab.run(**kwargs)


def test_validate_degrees_names_every_factor():
    assert validate_degrees(8, dp=None, tp=2, pp=2) == {"dp": 2, "tp": 2, "pp": 2}
    with pytest.raises(ValueError, match=r"world_size=6 != dp=2 × tp=2 = 4"):
        validate_degrees(6, dp=2, tp=2)
    with pytest.raises(ValueError, match="tp=0"):
        validate_degrees(4, tp=0)


def test_mesh_groups_and_comms():
    from parlab.core.launch import launch
    from tests import workers

    results = launch(workers.mesh_check, 4)
    assert [r["coords"] for r in results] == [{"dp": 0, "tp": 0}, {"dp": 0, "tp": 1},
                                              {"dp": 1, "tp": 0}, {"dp": 1, "tp": 1}]
    assert [r["tp_sum"] for r in results] == [1, 1, 5, 5]  # ranks 0+1, 2+3
    assert [r["dp_sum"] for r in results] == [2, 4, 2, 4]  # ranks 0+2, 1+3


def test_cli_list_and_run(tmp_path, capsys):
    """`list` and a refused run in this process (nothing to start); one real run as a command."""
    from parlab.__main__ import main

    assert main(["list"]) in (0, None)
    out = capsys.readouterr().out
    assert "ddp-naive" in out and "single" in out
    assert main(["run", "ddp-naive", "-w", "5"]) == 2
    assert "world_size=5" in capsys.readouterr().err
    trace = tmp_path / "trace.json"
    done = subprocess.run([sys.executable, "-m", "parlab", "run", "ddp-naive", "-w", "2",
                           "--steps", "2", "--trace", str(trace), "--compare", "-o", "algo=ring"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "match: True" in done.stdout and "bytes sent" in done.stdout
    assert trace.exists()


# ----------------------------------------------------------------------------- issue 22, defect 9
# Validation gaps: each bad value is a ValueError naming it, raised before any process starts.
# (Block owned by the reliability work; append other tests above this block or below it.)
from parlab.engine.runner import make_config  # noqa: E402


@pytest.mark.parametrize("kwargs,message", [
    (dict(model_config={"vocab_size": 95}), "vocab_size=95 is below the 96 symbols"),
    (dict(model="mlp", model_config={"d_in": 3}), "d_in=3 must be 2"),
    (dict(model="mlp", model_config={"d_out": 2}), "d_out=2 must be >= 3"),
    (dict(seed=2**70), r"seed=1180591620717411303424 must be an int in \[0, 2\*\*63\)"),
    (dict(seed=-1), r"seed=-1 must be an int in \[0, 2\*\*63\)"),
    (dict(timeout=float("inf")), "timeout=inf must be a finite number of seconds >= 1"),
    (dict(timeout=1e-6), "timeout=1e-06 must be a finite number of seconds >= 1"),
    (dict(timeout=float("nan")), "timeout=nan"),
    (dict(lr=float("inf")), "lr=inf must be a finite number > 0"),
    (dict(lr=float("nan")), "lr=nan must be a finite number > 0"),
    (dict(model_config="x"), "model_config='x' must be a dict"),
    (dict(model_config=[("n_layer", 2)]), r"model_config=\[\('n_layer', 2\)\] must be a dict"),
    (dict(world_size=10000), "world_size=10000 is above 64"),
])
def test_bad_values_are_refused_naming_them(kwargs, message):
    kwargs = {"scheme": "ddp-naive", **kwargs}
    with pytest.raises(ValueError, match=message):
        make_config(**kwargs)


def test_the_bounds_themselves_are_accepted():
    make_config("ddp-naive", seed=2**63 - 1, timeout=1.0, world_size=4)
    make_config("single", model="mlp", model_config={"d_out": 5})
    make_config("single", model_config={"vocab_size": 128})


def _cli(monkeypatch, capsys, *argv):
    """`python -m parlab` in this process; parlab.run must not be reached."""
    from parlab import __main__ as cli

    def no_run(*args, **kwargs):
        raise AssertionError("the run started before the bad argument was refused")

    monkeypatch.setattr(parlab, "run", no_run)
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def test_cli_infinite_timeout_is_a_one_line_error(monkeypatch, capsys):
    from parlab import __main__ as cli

    code = cli.main(["run", "ddp-naive", "--timeout", "1e999"])  # refused by make_config
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == "error: timeout=inf must be a finite number of seconds >= 1"


@pytest.mark.parametrize("trace,message", [
    ("/nonexistent-dir/trace.json", "directory '/nonexistent-dir' does not exist"),
    (".", "is a directory"),
])
def test_cli_bad_trace_path_fails_before_the_run(monkeypatch, capsys, trace, message):
    code, err = _cli(monkeypatch, capsys, "run", "ddp-naive", "--trace", trace)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_model_that_refuses_checkpointing_says_so_before_any_process():
    with pytest.raises(ValueError, match="checkpoint=True is not supported by model='gpt-moe'"):
        parlab.run("single", model="gpt-moe", checkpoint=True)
