"""Chapter 03's exercises (`parlab.exercises`): five design problems at GPU scale (the trainer
replicas an RL weight sync needs with our even-split resharding; when TP's bytes outgrow
ZeRO-3's; whether GPT-3's first pipeline stage fits with sequence parallelism, by Korthikanti et
al.'s activation count; how wide a model must be for TP to pay past the NVLink domain; the MFU
that exposed TP communication costs) and one predict-then-run (the ledger's bytes); each check
says right or wrong, never the answer.
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


# balanced-reshard: an RL weight sync of Llama 3 70B's MLP matrices (80 layers × 3 of (8192,
# 28672), bf16) from m trainer replicas to 8 inference GPUs holding them column-split, NDR 50 GB/s
SYNC_SHAPE, SYNC_MATRICES, SYNC_DST, SYNC_BETA, SYNC_BUDGET_S = (8192, 28672), 240, 8, 50e9, 1.0


def _sync_seconds(m: int) -> float:
    """The busiest NIC direction's seconds: a source's even-split share or a destination's columns."""
    from parlab.tensor_parallel.reshard import source_elements

    sent = source_elements(SYNC_SHAPE, "replicated", m, "col", SYNC_DST, "even-split", 0)
    received = SYNC_SHAPE[0] * SYNC_SHAPE[1] // SYNC_DST
    return max(sent, received) * 2 * SYNC_MATRICES / SYNC_BETA


def _fewest_sync_replicas() -> int:
    return min(m for m in (1, 2, 4, 8) if _sync_seconds(m) < SYNC_BUDGET_S)


_GPT3 = {"s": 2048, "b": 1, "h": 12288, "a": 96, "tp": 8}


def _tp_equals_zero3_tokens(width: int = 12288, n: int = 8) -> float:
    """B·T at which tp = n's four ring all-reduces of B·T·C per block send what ZeRO-3's three ring
    collectives of the block's 12C² weights send (both in bf16)."""
    tp_per_token = 4 * 2 * (n - 1) / n * width * 2
    return 3 * (n - 1) / n * 12 * width**2 * 2 / tp_per_token


def _sp_fit_gb(params: float = 175e9, layers: int = 96, pp: int = 8) -> float:
    """GB on a GPU of the first 1F1B stage: model states (16 B per parameter over tp·pp) and p
    micro-batches of its layers' TP + SP activations (Korthikanti et al.'s count)."""
    g = _GPT3
    per_layer = g["s"] * g["b"] * g["h"] / g["tp"] * (34 + 5 * g["a"] * g["s"] / g["h"])
    return (params * 16 / (g["tp"] * pp) + pp * (layers // pp) * per_layer) / 1e9

EXERCISES = [
    Exercise("tp-or-zero3-bytes",
             "Design: GPT-3 175B's blocks (C = 12,288; 12C² weights each) on the 8 GPUs of one "
             "node, bf16 activations, weights and gradients, ring collectives. Per block and "
             "training step, tensor parallelism (tp = 8) moves activations, ZeRO-3 (N = 8, "
             "chapter 02) moves weights and gradients. Above how many tokens per micro-batch "
             "(B·T) does TP send more bytes per GPU than ZeRO-3? (A number of tokens.)",
             numeric(_tp_equals_zero3_tokens(), rtol=0.002),
             "TP: 4 all-reduces of B·T·C elements per block; ZeRO-3: two all-gathers of the "
             "block's weights and one reduce-scatter of its gradients. Which grows with tokens?",
             "TP 4 · 2 · 7/8 · B·T·C · 2 B = 14·B·T·C; ZeRO-3 3 · 7/8 · 12C² · 2 B = 63·C²; equal "
             "at B·T = 4.5·C = 55,296 tokens: TP's bytes grow with the tokens, ZeRO-3's with the "
             "weights.",
             kind="design"),
    Exercise("gpt3-sp-fit",
             "Design: GPT-3 175B (96 layers, s = 2,048, h = 12,288, a = 96 heads) on 64 A100s of "
             "80 GB: tp = 8 with sequence parallelism inside each node, pp = 8 stages of 12 layers "
             "in 1F1B (chapter 04), micro-batches of b = 1 sequence, mixed precision with Adam "
             "(16 B per parameter, split over tp·pp). Count activations as Korthikanti et al. do "
             "(fp16, with dropout; section 6). How many GB (10^9 B) does a GPU of the first stage "
             "hold at its peak, model states and activations together — does it fit?",
             numeric(_sp_fit_gb(), rtol=0.01),
             "The first stage of 1F1B keeps p micro-batches in flight; each holds every one of the "
             "stage's layers' activations.",
             "states 175e9 · 16 / 64 = 43.75 GB; per layer sbh/t · (34 + 5as/h) = 25.2 M · 114 / 8 "
             "= 358.6 MB; × 12 layers × 8 micro-batches = 34.4 GB; 78.2 GB: it fits, barely "
             "(without SP the activations are sbh(10 + 24/t + 5as/(ht)) per layer: 55.6 GB, "
             "99.3 GB in all)",
             kind="design"),
    Exercise("tp-forward-bytes",
             "Predict, then run the next cell, which measures it: how many bytes does rank 0 send "
             "in `tp-forward` per step at tp = 2 for the GPT of width C = 40 "
             "(model_config={'n_embd': 40}; 4 blocks, T = 32) and the default batch of 12 rows, "
             "fp32? (The cell runs parlab.run('tp', world_size=2, steps=1, "
             "model_config={'n_embd': 40}) and reads its ledger.)",
             numeric(_forward_bytes(2), rtol=0, atol=0.5),
             "2 all-reduces per block of S = B·T·C floats, 2(N−1)/N·S each, 4 bytes per float.",
             "blocks · 2 · 2(N−1)/N · B·T·C · 4 B.", kind="predict"),
    Exercise("balanced-reshard",
             "Design: an RL weight sync. After each step, Llama 3 70B's MLP matrices (80 layers × "
             "3, each (8,192, 28,672), bf16), replicated on m trainer GPUs of one node, must reach "
             "8 inference GPUs of another node that hold each one column-split 8 ways. Every GPU "
             "has its own NDR InfiniBand NIC (50 GB/s per direction; ignore α); the matrices go one "
             "after another with our even split (method='even-split'), and the sync takes the "
             "busiest NIC direction's time. What is the fewest trainer replicas m (1, 2, 4 or 8) "
             "that keeps the sync under 1 s?",
             numeric(_fewest_sync_replicas(), rtol=0, atol=0.5),
             "Which NIC carries the most: a source's share of each matrix, or a destination's "
             "columns? Only one of them shrinks with m.",
             "Per matrix 8,192·28,672·2 B = 470 MB, 240 of them: 112.7 GB. A source sends "
             "112.7 GB/m (even split over its m replicas), a destination receives 112.7 GB/8 = "
             "14.1 GB (0.28 s, whatever m). 112.7 GB/(m·50 GB/s) < 1 s ⇔ m > 2.25: m = 4 "
             "(0.56 s; m = 2 takes 1.13 s). With send-recv one trainer GPU would send all of it, "
             "2.25 s, whatever m.",
             kind="design"),
    Exercise("tp-past-node-width",
             "Design: DGX H100 nodes of 8 (NVLink 4: 450 GB/s per direction inside a node, NDR "
             "InfiniBand: 50 GB/s per GPU between nodes), 400 TFLOP/s sustained per GPU, bf16 "
             "activations (2 B). A GPT block costs 6·B·T·12C² FLOPs per step, split tp ways, and "
             "4 ring all-reduces of B·T·C elements, each paced by the slowest link its ring "
             "crosses (ignore α). tp = 8 stays in one node; tp = 16 spans two. From what hidden "
             "width C on does tp = 16 give the shorter block time? (a number of channels)",
             numeric(16 * 4 * 2 * (2 * 15 / 16 / 50e9 - 2 * 7 / 8 / 450e9) * 400e12 / 72,
                     rtol=0.03),
             "Per token, compute is 72C²/(tp·F) and communication 4 · 2(N−1)/N · C · 2 B / β. "
             "Set tp = 16's total equal to tp = 8's and solve for C: the C² terms differ by "
             "72C²/F · (1/8 − 1/16).",
             "72C²/F · (1/8 − 1/16) = 8C · (1.875/β_IB − 1.75/β_NV)  ⇒  "
             "C = 16 · 8 · (1.875/50e9 − 1.75/450e9) · 400e12 / 72 ≈ 23,900 channels: wider than "
             "any model trained so far (Llama 3 405B: 16,384), which is why TP stays inside the "
             "NVLink domain (Narayanan et al., SC 2021, §3).", kind="design"),
    Exercise("tp-exposed-mfu",
             "Design: a GPT block of width C = 8,192 at tp = 8 on one DGX H100 node (NVLink 4: "
             "450 GB/s per direction, 400 TFLOP/s sustained per GPU, bf16 activations of 2 B). "
             "Compute is 6·B·T·12C²/tp FLOPs per block and step, and the 4 ring all-reduces of "
             "B·T·C elements are not overlapped with it (ignore α). What fraction of the block's "
             "time is exposed communication — the share of MFU it loses? (a fraction, 0 to 1)",
             numeric((4 * 2 * 7 / 8 * 8192 * 2 / 450e9)
                     / (72 * 8192 ** 2 / 8 / 400e12 + 4 * 2 * 7 / 8 * 8192 * 2 / 450e9),
                     rtol=0.02),
             "Work per token: compute 72C²/(tp·F) seconds, communication 4 · 2(N−1)/N · C · 2 B / β; "
             "the fraction is comm ÷ (compute + comm).",
             "compute 72 · 8,192² / 8 / 400e12 = 1.51 µs per token; communication 4 · 1.75 · "
             "16,384 B / 450e9 = 0.255 µs; 0.255 / 1.765 ≈ 0.144: about a seventh of the MFU, "
             "which overlapping (async TP, section 7) or sequence parallelism's smaller per-op "
             "messages try to win back.", kind="design"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
