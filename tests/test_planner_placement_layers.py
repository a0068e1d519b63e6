"""Chapter 13, She et al. (2025) on real layers: the operator graph of gpt2-xl layers against its
closed forms (Kaplan et al.'s FLOPs, Korthikanti et al.'s activations, ZeRO's 16 bytes per
parameter), and the MILP, DualPipe and 1F1B priced by one model, each within DualPipe's memory,
the MILP no worse than the 1F1B plan it can express, the verdict computed from the rows."""

import pytest

from parlab.core.clock import resolve
from parlab.models.presets import PRESETS
from parlab.planner.placement.layer_graph import KERNELS, dual_graph, layer_graph, op_costs
from parlab.planner.placement.op_costs import peak_memory
from parlab.planner.placement.real_layers import compare_layers, stages, verdict
from parlab.planner.placement.tasks import evaluate, tasks
from parlab.planner.profile import block_flops

XL = PRESETS["gpt2-xl"]
T, C, A = XL["block_size"], XL["n_embd"], XL["n_head"]


def test_the_layer_ops_match_the_closed_forms():
    c = op_costs("gpt2-xl", rows=2)
    t = 2 * T
    assert c["attn"]["F"] + c["mlp"]["F"] == block_flops(2, T, C)  # 24·t·C² + 4·t·T·C
    for kind in ("attn", "mlp"):  # the backward is twice the forward (Kaplan's 6·N·D), split
        assert c[kind]["B"] + c[kind]["W"] == 2 * c[kind]["F"]
        assert c[kind]["weights"] == 16 * c[kind]["params"]  # mixed-precision Adam
    assert c["mlp"]["W"] == c["mlp"]["F"] == 16 * t * C * C
    assert c["attn"]["params"] + c["mlp"]["params"] == 12 * C * C + 4 * C
    assert c["attn"]["acts"] + c["mlp"]["acts"] == 34 * t * C + 5 * A * T * t  # Korthikanti


def test_the_graph_is_priced_on_the_accelerator():
    g, memory = layer_graph("gpt2-xl", layers=2, microbatches=4, accelerator="H100")
    c, clock = op_costs("gpt2-xl"), resolve("H100")
    fwd, bwd = g.times()
    assert g.names == ("attn0", "mlp0", "attn1", "mlp1") and g.split_backward
    assert fwd["mlp1"] == pytest.approx(clock.seconds(KERNELS["mlp"][0], c["mlp"]["F"]))
    assert bwd["attn0"] == pytest.approx(clock.seconds(KERNELS["attn"][1], c["attn"]["B"]))
    assert g.wtimes()["attn1"] == pytest.approx(clock.seconds(KERNELS["attn"][2], c["attn"]["W"]))
    assert {b for _, _, b in g.edges()} == {2 * T * C}  # (1, T, C) bf16
    assert memory.a["attn0"] == c["attn"]["acts"] and memory.w["mlp0"] == c["mlp"]["weights"]
    assert len(tasks(g)) == 3 * 4 * 4  # F, B, W of every op and micro-batch
    dual, dual_memory = dual_graph(g, memory)
    assert len(tasks(dual)) == len(tasks(g))  # each micro-batch passes one copy of each op
    assert sum(dual_memory.w.values()) == 2 * sum(memory.w.values())  # DualPipe's 2× weights


@pytest.fixture(scope="module")
def rows():
    return compare_layers("gpt2-xl", layers=2, p=2, m=4, time_limit=5.0)


def test_every_plan_runs_the_same_work_within_dualpipes_memory(rows):
    by = {r["plan"]: r for r in rows}
    assert list(by) == ["1F1B", "DualPipe", "MILP", "MILP×2", "bi-level"]
    cap = by["DualPipe"]["peak"]
    for r in rows:
        assert r["cap"] == cap and r["fits"] and max(r["peaks"]) <= cap * (1 + 1e-9)
        assert r["busy"] == pytest.approx(by["1F1B"]["busy"], rel=1e-12)  # the same tasks
        assert r["bubble"] == pytest.approx(1 - r["busy"] / (2 * r["makespan"]))
        assert 0 <= r["bubble"] < 1
    plan = by["MILP"]["object"]
    g, memory = layer_graph("gpt2-xl", 2, 4)
    assert evaluate(g, plan).makespan == pytest.approx(by["MILP"]["makespan"])
    assert max(peak_memory(plan, memory)) <= cap * (1 + 1e-9)
    assert by["MILP"]["makespan"] <= by["1F1B"]["makespan"] * (1 + 1e-9)  # it can express 1F1B
    assert by["MILP×2"]["makespan"] <= by["DualPipe"]["makespan"] * (1 + 1e-9)  # and DualPipe
    dual = by["DualPipe"]["placement"]  # stage s of direction 1 on rank p−1−s
    assert dual["attn0"] == dual["attn1~"] == 0 and dual["attn1"] == dual["attn0~"] == 1


def test_the_verdict_is_computed_from_the_rows(rows):
    by = {r["plan"]: r for r in rows}
    text = "\n".join(verdict(rows))
    assert "about half of DualPipe's bubble" in text
    for name in ("MILP", "MILP×2"):
        ratio = by[name]["bubble"] / by["DualPipe"]["bubble"]
        line = next(x for x in verdict(rows) if x.startswith(f"this run, {name} ("))
        assert f"= {ratio:.2f}×" in line
        assert ("the claim holds here" in line) == (0.4 <= ratio <= 0.6)
        proven = by[name]["status"].startswith("optimal") or "optimal all the same" in by[name][
            "status"]
        assert ("does not hold" in line) == (ratio > 0.99 and proven)
        assert ("is not shown here" in line) == (ratio > 0.99 and not proven)
    assert "every plan within the cap" in text and "— no worse" in text
    two = by["MILP×2"]["placement"]
    whole = len({two[n] for n in two if n.endswith("~")}) == len({two[n] for n in two
                                                                   if not n.endswith("~")}) == 1
    assert ("data parallelism and no pipeline" in text) == (
        whole and two["attn0"] != two["attn0~"])
    for milp_bubble, words in ((0.05, "about half: the claim holds"), (0.1, "no reduction"),
                               (0.02, "less than half"), (0.2, "larger than DualPipe's")):
        fake = [{**r, "bubble": milp_bubble if r["plan"] == "MILP" else
                 0.1 if r["plan"] == "DualPipe" else r["bubble"]} for r in rows]
        assert words in "\n".join(verdict(fake))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="p=3"):
        stages(["a", "b", "c", "d"], 3)
    with pytest.raises(ValueError, match="rows=0"):
        op_costs("gpt2-xl", rows=0)
    with pytest.raises(ValueError, match="preset='llama3-8b'"):
        op_costs("llama3-8b")
    with pytest.raises(ValueError, match="accelerator='wall'"):
        layer_graph(accelerator="wall")
    g, memory = layer_graph(microbatches=3)
    with pytest.raises(ValueError, match="microbatches=3"):
        dual_graph(g, memory)
    with pytest.raises(ValueError, match="pp=3"):
        compare_layers(p=3, m=6)
