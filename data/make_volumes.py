"""Make data/volumes.npz: synthetic 3-D segmentation volumes of balls and cubes (deterministic; no
network, no downloads). Run `python data/make_volumes.py`.

Each volume is a cube of side 32 (train) or 64 (test) holding a few solid balls (class 1) and
axis-aligned cubes (class 2) of random centre, size and brightness on a dark background (class 0).
Balls and cubes share one brightness range, so a voxel's class is a matter of *shape*, not of its
own intensity: a segmentation network must see the object's surroundings (its receptive field), as
3-D U-Net does (Çiçek et al., MICCAI 2016) and LAMP pipelines (Zhu et al., MICCAI 2020). Volumes
are stored as uint8 intensity and label; `parlab.models.volumes` adds the voxel noise from a seed
when it loads them.
"""

import pathlib

import numpy as np

HERE = pathlib.Path(__file__).parent
CLASSES = ("background", "ball", "cube")
TRAIN, TEST = (96, 32), (4, 64)  # (count, side)


def draw(count: int, side: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(intensity (count, side, side, side) uint8, labels (count, side, side, side) uint8)."""
    rng = np.random.default_rng(seed)
    z, y, x = np.mgrid[0:side, 0:side, 0:side] + 0.5  # voxel centres
    images = np.zeros((count, side, side, side), dtype=np.uint8)
    labels = np.zeros((count, side, side, side), dtype=np.uint8)
    objects = max(2, round(8 * (side / 32) ** 3))  # the same density at every side
    for i in range(count):
        for _ in range(objects):
            kind = int(rng.integers(1, 3))
            r = rng.uniform(3.0, 6.0)
            c = rng.uniform(r, side - r, size=3)
            if kind == 1:
                mask = (z - c[0]) ** 2 + (y - c[1]) ** 2 + (x - c[2]) ** 2 <= r * r
            else:
                half = r * 0.8  # a cube of the same volume scale as the ball
                mask = (np.abs(z - c[0]) <= half) & (np.abs(y - c[1]) <= half) & \
                    (np.abs(x - c[2]) <= half)
            images[i][mask] = np.uint8(round(255 * rng.uniform(0.5, 1.0)))
            labels[i][mask] = kind
    return images, labels


def main() -> None:
    train_x, train_y = draw(*TRAIN, seed=0)
    test_x, test_y = draw(*TEST, seed=1)
    np.savez_compressed(HERE / "volumes.npz", train_x=train_x, train_y=train_y, test_x=test_x,
                        test_y=test_y)
    print(f"wrote {HERE / 'volumes.npz'}: {len(train_x)} train of {TRAIN[1]}³, "
          f"{len(test_x)} test of {TEST[1]}³")


if __name__ == "__main__":
    main()
