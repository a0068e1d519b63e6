"""The synthetic volumes of data/volumes.npz (drawn by data/make_volumes.py): 3-D segmentation of
balls (class 1) and cubes (class 2) on background (class 0), for the 3-D U-Net (`unet3d`).

A step's batch is a pure function of (seed, step, batch size, block side), like every dataset of
`parlab.models.data`: `batch_size` crops of side `block` from training volumes chosen by a
generator seeded with (seed, step), plus Gaussian voxel noise from the same generator. The test
volumes (side 64) are for whole-volume vs sliding-window inference; their noise is fixed by `seed`.
"""

from __future__ import annotations

import functools
import pathlib

import numpy as np
import torch

DATA_DIR = pathlib.Path(__file__).resolve().parents[2] / "data"  # as parlab.models.data

NOISE = 0.15  # standard deviation of the voxel noise (intensities in [0, 1])


@functools.cache
def volumes() -> dict[str, torch.Tensor]:
    """{train_x, train_y, test_x, test_y}: intensities float32 in [0, 1], labels int64."""
    path = DATA_DIR / "volumes.npz"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python data/make_volumes.py`")
    with np.load(path) as d:
        return {k: (torch.from_numpy(d[k]).float() / 255 if k.endswith("x") else
                    torch.from_numpy(d[k]).long()) for k in d.files}


def volume_batch(step: int, batch_size: int, seed: int, block: int):
    """(x (B, 1, S, S, S) float32, y (B, S, S, S) int64): the step's crops of side S = block."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) % 2**64)
    data = volumes()
    side = data["train_x"].size(-1)
    if not 1 <= block <= side:
        raise ValueError(f"block={block} must be in [1, {side}] (the training volumes' side)")
    index = torch.randint(0, data["train_x"].size(0), (batch_size,), generator=g)
    corner = torch.randint(0, side - block + 1, (batch_size, 3), generator=g)
    xs, ys = [], []
    for i, (a, b, c) in zip(index.tolist(), corner.tolist()):
        xs.append(data["train_x"][i, a:a + block, b:b + block, c:c + block])  # (S, S, S)
        ys.append(data["train_y"][i, a:a + block, b:b + block, c:c + block])  # (S, S, S)
    x = torch.stack(xs)[:, None]  # (B, 1, S, S, S)
    x = x + NOISE * torch.randn(x.shape, generator=g)
    return x, torch.stack(ys)  # (B, 1, S, S, S), (B, S, S, S)


def test_volume(index: int = 0, seed: int = 0):
    """(x (1, 1, 64, 64, 64), y (1, 64, 64, 64)): held-out volume `index` with seeded noise."""
    data = volumes()
    g = torch.Generator().manual_seed((seed * 1_000_003 + 999_983 + index) % 2**64)
    x = data["test_x"][index][None, None]  # (1, 1, 64, 64, 64)
    return x + NOISE * torch.randn(x.shape, generator=g), data["test_y"][index][None]
