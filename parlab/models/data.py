"""The datasets in data/ and how every rank gets its slice of a step's global batch.

A step's global batch is a pure function of (dataset, seed, step, batch size): every scheme —
and the single-process reference — sees exactly the same examples at the same step. A data-
parallel rank takes rows [r·B/N, (r+1)·B/N) of it (`shard`), so the mean of the ranks' local
mean losses is the reference's global mean loss, and averaged gradients equal its gradients.
Seeds: any int in [0, 2**63) is a valid run seed. A step's generator seed is derived from it by
`step_seed` modulo 2**64 (what `torch.Generator.manual_seed` accepts), so no valid seed can
overflow it; for every seed below 2**43 the derived seed is the plain seed·1_000_003 + step of
before, bit for bit.

Which dataset a model draws from is its spec's (`parlab.models.spec.ModelSpec.global_batch`,
registered beside each model): `global_batch` and `max_seq_len` look the model's name up there.
"""

from __future__ import annotations

import functools
import pathlib

import torch

from parlab.models.spec import model_spec

DATA_DIR = pathlib.Path(__file__).resolve().parents[2] / "data"
VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))  # 96 characters


@functools.cache
def text_tokens() -> torch.Tensor:
    """data/tinytext.txt as a 1-D tensor of character ids (int64)."""
    # every rank of every launch reads it: a byte lookup table instead of a Python loop (0.1 s).
    # UTF-8 encodes any non-ASCII character as bytes >= 0x80, none of them in VOCAB, so dropping
    # unknown bytes drops exactly the characters outside VOCAB.
    raw = torch.frombuffer(bytearray((DATA_DIR / "tinytext.txt").read_bytes()), dtype=torch.uint8)
    lookup = torch.full((256,), -1, dtype=torch.long)
    lookup[torch.tensor([ord(c) for c in VOCAB])] = torch.arange(len(VOCAB))
    ids = lookup[raw.long()]
    return ids[ids >= 0]


@functools.cache
def spirals() -> tuple[torch.Tensor, torch.Tensor]:
    """data/spirals.csv as (points (P, 2) float32, labels (P,) int64)."""
    lines = (DATA_DIR / "spirals.csv").read_text().splitlines()[1:]
    rows = [line.split(",") for line in lines]
    points = torch.tensor([[float(x), float(y)] for x, y, _ in rows])
    labels = torch.tensor([int(label) for *_, label in rows])
    return points, labels


OP_GRAPH_D_IN, OP_GRAPH_D_OUT = 16, 8  # widths of the op graph's x and y (parlab.models.op_graph)
SEED_SPACE = 2**64  # torch.Generator.manual_seed takes [0, 2**64)
VOLUME_SEED_FOLD = 2**43  # volumes.py derives seed·1_000_003 + ...: below 2**64 for seeds < 2**43


def step_seed(seed: int, step: int) -> int:
    """The generator seed of `step`'s batch: seed·1_000_003 + step, modulo 2**64 (never overflows)."""
    return (seed * 1_000_003 + step) % SEED_SPACE


def max_seq_len(model: str) -> int | None:
    """The longest sequence a batch of `model` can draw from its dataset (None: no sequence)."""
    return model_spec(model).max_seq_len()


def text_max_seq_len() -> int:
    """The longest window of the text dataset: a start in [0, n − T − 1) and T + 1 tokens after it."""
    return text_tokens().numel() - 2


def check_seq_len(model: str, seq_len: int) -> None:
    """ValueError naming `block_size` when the dataset holds no window of `seq_len` + 1 tokens."""
    longest = max_seq_len(model)
    if longest is not None and seq_len > longest:
        raise ValueError(f"block_size={seq_len} is longer than the text dataset allows: "
                         f"data/tinytext.txt holds {longest + 2} characters, so block_size <= {longest}")


def decode(ids) -> str:
    return "".join(VOCAB[int(i)] for i in ids)


def global_batch(model: str, step: int, batch_size: int, seed: int, seq_len: int = 32):
    """The whole batch of `step`: GPT (B, T) inputs and next-character targets; MLP (B, 2), (B,);
    op-graph (B, T, D_IN), (B, T, D_OUT); U-Net (B, 1, S, S, S), (B, S, S, S) with S = seq_len."""
    return model_spec(model).global_batch(step, batch_size, seed, seq_len)


def text_batch(step: int, batch_size: int, seed: int, seq_len: int):
    """(x (B, T), y (B, T)): windows of the text dataset and their next characters."""
    g = torch.Generator().manual_seed(step_seed(seed, step))
    tokens = text_tokens()
    starts = torch.randint(0, tokens.numel() - seq_len - 1, (batch_size,), generator=g)
    offsets = torch.arange(seq_len)
    x = tokens[starts[:, None] + offsets]  # (B, T)
    y = tokens[starts[:, None] + offsets + 1]  # (B, T)
    return x, y


def spirals_batch(step: int, batch_size: int, seed: int, seq_len: int):
    """(points (B, 2), labels (B,)): rows of the spirals dataset (no sequence: seq_len unused)."""
    g = torch.Generator().manual_seed(step_seed(seed, step))
    points, labels = spirals()
    rows = torch.randint(0, labels.numel(), (batch_size,), generator=g)
    return points[rows], labels[rows]  # (B, 2), (B,)


def op_graph_batch(step: int, batch_size: int, seed: int, seq_len: int):
    """(x (B, T, D_IN), y (B, T, D_OUT)): chapter 13's operator graph's input and regression target."""
    g = torch.Generator().manual_seed(step_seed(seed, step))
    x = torch.randn(batch_size, seq_len, OP_GRAPH_D_IN, generator=g)  # (B, T, D_IN)
    y = torch.randn(batch_size, seq_len, OP_GRAPH_D_OUT, generator=g)  # (B, T, D_OUT)
    return x, y


def volume_crops_batch(step: int, batch_size: int, seed: int, seq_len: int):
    """(x (B, 1, S, S, S), y (B, S, S, S)): crops of the volumes; seq_len is the block side S
    (UNet3DConfig.block_size)."""
    from parlab.models.volumes import volume_batch
    return volume_batch(step, batch_size, seed % VOLUME_SEED_FOLD, seq_len)


def shard(batch, rank: int, parts: int):
    """Rows [rank·B/parts, (rank+1)·B/parts) of every tensor in `batch` (B divisible by parts)."""
    size = batch[0].size(0)
    if size % parts:
        raise ValueError(f"batch of {size} rows is not divisible into {parts} shards")
    rows = size // parts
    return tuple(t[rank * rows:(rank + 1) * rows] for t in batch)  # (B/parts, ...)
