"""A task whose label needs features from two devices: four sensors, one per group, for chapter 12's
transfer search (ours, built for it; Lin & Wang, "Communication-Efficient Separable Neural Network
for Distributed Inference on Edge Devices", 2021, classify CIFAR images that every device reads).

    sensor 0   the shape at door A        (one of the ten shapes)
    sensor 1   the shape at door B
    sensor 2   which door is open:  horizontal bars → A,  vertical bars → B
    sensor 3   a distractor shape          (irrelevant)
    label      the shape at the open door

Split over 2 or 4 devices, the doors and the selector sit apart and the head can only add partial
logits, so without a transfer a device guesses the door (about half right); one bit is enough.
Why one camera read by all would not do: docs/serving.md, `parlab.serving.sensors`.
"""

from __future__ import annotations

import functools

import torch

from parlab.serving import images

HORIZONTAL, VERTICAL = images.CLASSES.index("horizontal bars"), images.CLASSES.index("vertical bars")
SCENES = {"train": 4000, "test": 1000}
SENSORS = ("door A", "door B", "selector", "distractor")


@functools.cache
def load(split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
    """(scenes (M, 4, 16, 16) float32, labels (M,) int64) of `split` ("train" or "test")."""
    if split not in SCENES:
        raise ValueError(f"split={split!r} must be one of {tuple(SCENES)}")
    x, y = images.load(split)  # (n, 1, 16, 16), (n,)
    g = torch.Generator().manual_seed(11 + images.SPLITS.index(split))
    m, n = SCENES[split], len(y)
    door_a, door_b, distractor = (torch.randint(0, n, (m,), generator=g) for _ in range(3))
    horizontal, vertical = (torch.nonzero(y == c).flatten() for c in (HORIZONTAL, VERTICAL))
    open_b = torch.randint(0, 2, (m,), generator=g).bool()  # (M,) True: door B is open
    pick_h = horizontal[torch.randint(0, len(horizontal), (m,), generator=g)]
    pick_v = vertical[torch.randint(0, len(vertical), (m,), generator=g)]
    selector = torch.where(open_b, pick_v, pick_h)  # (M,) an image of the open door's bars
    scenes = torch.cat([x[door_a], x[door_b], x[selector], x[distractor]], dim=1)  # (M, 4, 16, 16)
    labels = torch.where(open_b, y[door_b], y[door_a])  # (M,)
    return scenes, labels
