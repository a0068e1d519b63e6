"""Make data/shapes.npz: 16×16 grayscale images of ten procedurally drawn shapes (deterministic; no
network, no downloads). Run `python data/make_images.py`.

Classes: 0 disc, 1 ring, 2 square, 3 hollow square, 4 triangle, 5 plus, 6 cross (×), 7 two
horizontal bars, 8 two vertical bars, 9 diagonal stroke. Each image draws one shape with a random
centre (±2.5 pixels), size, stroke width and brightness, rendered at 4× resolution and averaged
down (anti-aliased), stored as uint8. Chapter 12's grouped network learns them
(`parlab.serving.images`, which adds the pixel noise from a seed when it loads them).
"""

import pathlib

import numpy as np

HERE = pathlib.Path(__file__).parent
SIZE, SUPER = 16, 4
CLASSES = ("disc", "ring", "square", "hollow square", "triangle", "plus", "cross", "horizontal bars",
           "vertical bars", "diagonal")


def shape_mask(label: int, cx: float, cy: float, r: float, w: float, flip: bool) -> np.ndarray:
    """Boolean (64, 64) mask of shape `label` centred at (cx, cy), radius r, stroke w (pixels)."""
    n = SIZE * SUPER
    y, x = (np.mgrid[0:n, 0:n] + 0.5) / SUPER  # pixel coordinates of each sub-sample
    dx, dy = x - cx, y - cy
    dist = np.hypot(dx, dy)
    box = np.maximum(np.abs(dx), np.abs(dy))
    if label == 0:
        return dist <= r
    if label == 1:
        return np.abs(dist - r) <= w / 2
    if label == 2:
        return box <= r * 0.85
    if label == 3:
        return np.abs(box - r * 0.85) <= w / 2
    if label == 4:
        return (dy <= r * 0.8) & (dy >= -r) & (np.abs(dx) <= (dy + r) * 0.6)
    if label == 5:
        return ((np.abs(dx) <= w / 2) | (np.abs(dy) <= w / 2)) & (box <= r)
    if label == 6:
        return ((np.abs(dx - dy) <= w * 0.7) | (np.abs(dx + dy) <= w * 0.7)) & (box <= r * 0.85)
    if label == 7:
        return (np.abs(np.abs(dy) - r * 0.5) <= w / 2) & (np.abs(dx) <= r)
    if label == 8:
        return (np.abs(np.abs(dx) - r * 0.5) <= w / 2) & (np.abs(dy) <= r)
    sign = -1.0 if flip else 1.0
    return (np.abs(dx - sign * dy) <= w * 0.7) & (box <= r)


def draw(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(images (count, 16, 16) uint8, labels (count,) uint8), classes balanced and shuffled."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(count) % len(CLASSES)).astype(np.uint8)
    images = np.zeros((count, SIZE, SIZE), dtype=np.uint8)
    for i, label in enumerate(labels):
        cx, cy = SIZE / 2 + rng.uniform(-2.5, 2.5, size=2)
        r, w = rng.uniform(3.5, 5.5), rng.uniform(1.2, 2.2)
        mask = shape_mask(int(label), cx, cy, r, w, bool(rng.integers(2)))
        fine = mask.reshape(SIZE, SUPER, SIZE, SUPER).mean(axis=(1, 3))  # (16, 16) coverage
        images[i] = np.round(255 * rng.uniform(0.6, 1.0) * fine)
    return images, labels


def main() -> None:
    train_x, train_y = draw(2000, seed=0)
    test_x, test_y = draw(500, seed=1)
    np.savez_compressed(HERE / "shapes.npz", train_x=train_x, train_y=train_y, test_x=test_x,
                        test_y=test_y)
    print(f"wrote {HERE / 'shapes.npz'}: {len(train_y)} train, {len(test_y)} test, {SIZE}×{SIZE}")


if __name__ == "__main__":
    main()
