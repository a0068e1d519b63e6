"""parlab.serving.inference: closed forms on a hand-computed tiny model, the roofline verdicts of
gpt2-xl on an A100 from its ridge point, the closed form's FLOPs against the shapes-only GPT's,
static vs continuous batching, TP's all-reduce price, bad input."""

import pytest
import torch

from parlab.core.link import ACCELERATORS, REAL
from parlab.serving import inference as inf

# 2 layers, d 8, 2 heads of 4, 1 k/v head (kv width 4), GELU MLP of 32, vocab 10
TINY = inf.Shape("tiny", n_layer=2, d=8, n_head=2, n_kv_head=1, d_ff=32, vocab=10, gated=False)


def test_kv_cache_and_weights_by_hand():
    assert inf.kv_bytes_per_token(TINY) == 2 * 2 * 1 * 4 * 2 == 32
    assert inf.kv_bytes(TINY, batch=3, context=5) == 32 * 15
    assert inf.layer_params(TINY) == {"qkv": 8 * 16, "out": 64, "mlp": 2 * 8 * 32, "head": 80}
    assert inf.weight_bytes(TINY) == (2 * (128 + 64 + 512) + 80) * 2 == 2976
    assert inf.max_tokens(TINY, memory_bytes=2976 + 32 * 7 + 31) == 7


def test_decode_step_flops_and_bytes_by_hand():
    rows = inf.decode(TINY, context=5, batch=1)
    assert rows["qkv"]["flops"] == 2 * 2 * 128
    assert rows["attention"]["flops"] == 2 * 4 * 1 * 5 * 8  # 4·L·d per token per layer
    assert rows["attention"]["bytes"] == 2 * (2 * 5 * 4 + 2 * 8) * 2  # KV read + q, y
    assert rows["head"]["flops"] == 2 * 80
    assert rows["total"]["flops"] == 2 * (256 + 128 + 1024 + 160) + 160
    assert inf.prefill(TINY, prompt=3, batch=2)["mlp"]["flops"] == 2 * 2 * 6 * 512


def test_gpt2_xl_prefill_compute_bound_decode_memory_bound_on_a100():
    s, ridge = inf.shape("gpt2-xl"), ACCELERATORS["A100"].flops / ACCELERATORS["A100"].hbm_Bps
    assert inf.ridge("A100") == ridge
    pre, dec = inf.prefill(s, 1024, 1)["total"], inf.decode(s, 1024, 1)["total"]
    assert pre["intensity"] > ridge and pre["bound"] == "compute"
    assert dec["intensity"] < ridge and dec["bound"] == "memory"
    # decode at B=1: each weight (2 B) does one multiply-add (2 FLOPs): intensity ≈ 1
    assert dec["intensity"] == pytest.approx(1.0, rel=0.01)
    # a memory-bound step costs its bytes / HBM plus the launches, family by family
    a = ACCELERATORS["A100"]
    launches = a.launch_s * (4 * s.n_layer + 1)
    assert dec["seconds"] == pytest.approx(launches + dec["bytes"] / a.hbm_Bps, rel=1e-12)


@pytest.mark.parametrize("model", ["gpt2-xl", "llama3-8b"])
def test_closed_form_flops_equal_the_shapes_only_gpt(model):
    from parlab.core.roofline import compare
    from parlab.models.gpt import GPT, GPTConfig
    from parlab.models.presets import PRESETS

    prompt, batch = 8, 2
    run = compare(lambda m: m(torch.zeros(batch, prompt, dtype=torch.long)), "A100",
                  setup=lambda: GPT(GPTConfig(**PRESETS[model])))
    closed = inf.prefill(inf.shape(model), prompt, batch)["total"]
    assert run["total"]["flops"] == closed["flops"]
    # the run adds norms, softmax, residuals and fp32 bytes: it can only cost more
    assert run["total"]["roofline_s"] >= closed["seconds"]


def test_continuous_batching_beats_static_and_ties_on_equal_lengths():
    s = inf.shape("gpt2-xl")
    lengths = inf.requests(32, seed=0)
    assert lengths == inf.requests(32, seed=0) and len(set(lengths)) > 1
    st = inf.static_batching(s, lengths, 8, 1024)
    co = inf.continuous_batching(s, lengths, 8, 1024)
    assert st["tokens"] == co["tokens"] == sum(lengths)
    assert co["tokens_per_s"] > st["tokens_per_s"] and co["iterations"] < st["iterations"]
    equal = [40] * 20  # 20 = 2 full batches of 8 and one of 4
    st, co = (f(s, equal, 8, 1024) for f in (inf.static_batching, inf.continuous_batching))
    assert st["iterations"] == co["iterations"] == 3 * 40
    assert co["seconds"] == pytest.approx(st["seconds"], rel=1e-12)


def test_tp_allreduce_alpha_beta_by_hand():
    alpha, beta = REAL["NVLink3"]
    one = 2 * 1 * alpha + 2 * 1 / 2 * 3 * 8 * 2 / beta
    assert inf.tp_allreduce_s(TINY, tokens=3, tp=2) == pytest.approx(2 * 2 * one, rel=1e-12)
    assert inf.tp_allreduce_s(TINY, tokens=3, tp=1) == 0.0
    s = inf.shape("gpt2-xl")  # at B=1 the launches and α stop tp=8 from paying
    assert inf.decode(s, 1024, 1, tp=8)["total"]["seconds"] > inf.decode(s, 1024, 1, tp=4)["total"]["seconds"]


@pytest.mark.parametrize("call, name", [
    (lambda: inf.shape("gpt-9"), "preset='gpt-9'"),
    (lambda: inf.decode(TINY, 5, batch=0), "batch=0"),
    (lambda: inf.prefill(TINY, 4, tp=0), "tp=0"),
    (lambda: inf.kv_bytes(TINY, 1, context=-1), "context=-1"),
    (lambda: inf.ridge("TPU"), "accelerator='TPU'"),
    (lambda: inf.requests(4, low=10, high=5), "high=5"),
    (lambda: inf.static_batching(TINY, [3, 0], 2, 5), "lengths=[3, 0]"),
    (lambda: inf.continuous_batching(TINY, [3], 0, 5), "slots=0"),
    (lambda: inf.max_tokens(inf.shape("llama3-8b"), memory_bytes=1e9), "memory_bytes=1000000000.0"),
])
def test_bad_input_names_the_value(call, name):
    with pytest.raises(ValueError, match=name.replace("[", r"\[").replace("]", r"\]")):
        call()
