"""Chapter 03's exercises (`parlab.exercises`): GPU-scale worked problems (Megatron-LM's
f and g, Korthikanti et al.'s activation count, our even-split resharding) and runs on this
machine; each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.exercises import Exercise, find, numeric

WIDER = {"n_embd": 40}  # the exercise's GPT: not the chapter's, so no cell prints its answer


def _forward_bytes(tp: int) -> int:
    """tp-forward bytes rank 0 sends per step for the GPT of width 40 and the default batch."""
    from parlab.engine.runner import make_config
    from parlab.tensor_parallel.cost import closed_form_bytes

    cfg = make_config("tp", world_size=tp, model_config=WIDER)
    return closed_form_bytes(cfg.model_config, cfg.batch_size, tp, 0, 1, False)["tp-forward"]


_GPT3 = {"s": 2048, "b": 1, "h": 12288, "a": 96, "tp": 8}

EXERCISES = [
    Exercise("gpt3-tp-bytes",
             "GPT-3 175B (C = 12,288, T = 2,048), micro-batch of 1 sequence, bf16 activations, "
             "tp = 8 with ring all-reduces. How many MB (10^6 B) does one GPU send per transformer "
             "block per training step (forward and backward)?",
             numeric(4 * 2 * 7 / 8 * 2048 * 12288 * 2 / 1e6, rtol=0.01),
             "Per block: 2 all-reduces forward (g) and 2 backward (f), each of B·T·C elements; a "
             "ring all-reduce sends 2(N−1)/N of the buffer.",
             "4 · 2 · 7/8 · (2,048 · 12,288 · 2 B) = 4 · 1.75 · 50.3 MB = 352 MB per block and step."),
    Exercise("gpt3-sp-activations",
             "Korthikanti et al.'s count of activation memory per layer with TP + SP is "
             "sbh/t · (34 + 5as/h) bytes (fp16, with dropout). For GPT-3 (s = 2,048, b = 1, "
             "h = 12,288, a = 96) at t = 8, how many MB per layer?",
             numeric(_GPT3["s"] * _GPT3["b"] * _GPT3["h"] / _GPT3["tp"]
                     * (34 + 5 * _GPT3["a"] * _GPT3["s"] / _GPT3["h"]) / 1e6, rtol=0.01),
             "5as/h = 5 · 96 · 2,048 / 12,288 = 80.",
             "sbh = 25.2 M; (34 + 80) / 8 = 14.25; 25.2 M · 14.25 = 358.6 MB (without SP: "
             "sbh(10 + 24/8 + 80/8) = 578.8 MB)."),
    Exercise("sp-bytes-ratio",
             "With the re-gathering backward (regather=True) and leaving out the small all-reduce "
             "of replicated gradients, what is tp-sp's bytes per step divided by tp's, at any tp?",
             numeric(1.25, rtol=0.005),
             "Forward: the same bytes. Backward: the same plus 2 all-gathers per block; an "
             "all-gather sends half of what an all-reduce sends.",
             "tp: 4 all-reduces = 8 halves per block. tp-sp: 8 halves + 2 all-gathers = 10 halves: "
             "10/8 = 1.25 (the ledger's 1.27 adds the gradient all-reduce)."),
    Exercise("tp-forward-bytes",
             "Predict, then measure: how many bytes does rank 0 send in `tp-forward` per step at "
             "tp = 2 for the GPT of width C = 40 (model_config={'n_embd': 40}; 4 blocks, T = 32) "
             "and the default batch of 12 rows? Measure it afterwards with parlab.run('tp', "
             "world_size=2, steps=1, model_config={'n_embd': 40}).bytes_per_rank(phase='tp-forward')[0].",
             numeric(_forward_bytes(2), rtol=0, atol=0.5),
             "2 all-reduces per block of S = B·T·C floats, 2(N−1)/N·S each, 4 bytes per float.",
             "blocks · 2 · 2(N−1)/N · B·T·C · 4 B."),
    Exercise("balanced-reshard",
             "A (4096, 4096) fp32 tensor replicated on 4 source ranks is needed replicated on 4 "
             "destination ranks. With our even split (method='even-split': each replicated cell cut "
             "evenly over its holders, not AlpaComm's whole tiles), how many bytes does the "
             "busiest source send? (Check at small scale with reshard.plan and reshard.traffic.)",
             numeric(4096 * 4096 * 4 / 4, rtol=0, atol=0.5),
             "Each cell leaves the sources once and travels down the chain of destinations; the "
             "replicas split the cells between them.",
             "The 64 MiB tensor leaves the sources once, split over 4 replicas: 16 MiB each "
             "(send-recv: one source sends it to all 4 destinations, 256 MiB)."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
