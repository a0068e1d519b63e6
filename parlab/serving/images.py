"""The image set chapter 12's grouped network learns: ten procedurally drawn shapes, 16×16
grayscale, 2000 training and 500 test images, in data/shapes.npz (drawn by data/make_images.py;
deterministic, nothing downloaded).

`load(split)` returns float tensors in [0, 1] with Gaussian pixel noise (σ = `noise`) drawn from a
fixed seed per split, so every process — and every rank — sees the very same pixels.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from parlab.models.data import DATA_DIR

CLASSES = ("disc", "ring", "square", "hollow square", "triangle", "plus", "cross",
           "horizontal bars", "vertical bars", "diagonal")
SPLITS = ("train", "test")


@functools.cache
def _arrays() -> dict:
    path = DATA_DIR / "shapes.npz"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python data/make_images.py`")
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def load(split: str = "train", noise: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """(images (M, 1, 16, 16) float32, labels (M,) int64) of `split` ("train" or "test")."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} must be one of {SPLITS}")
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise <= 1:
        raise ValueError(f"noise={noise!r} must be a number in [0, 1]")
    arrays = _arrays()
    pixels = torch.from_numpy(arrays[f"{split}_x"].astype(np.float32) / 255.0)  # (M, 16, 16)
    labels = torch.from_numpy(arrays[f"{split}_y"].astype(np.int64))  # (M,)
    g = torch.Generator().manual_seed(SPLITS.index(split) + 1)
    noisy = pixels + noise * torch.randn(pixels.shape, generator=g)  # (M, 16, 16)
    return noisy.clamp(0, 1).unsqueeze(1), labels  # (M, 1, 16, 16), (M,)
