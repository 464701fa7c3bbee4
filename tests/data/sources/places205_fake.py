"""A small fake of Places205 as distributed, written by tests: image files
under ``images256/<letter>/<scene>/`` and the official list files."""

import os

import numpy as np

from tests.data.helpers import encode, random_image

#: A small fake of Places205: scene folder -> its real label.
SCENES = {"a/abbey": 0, "a/apartment_building/outdoor": 8, "b/bar": 17, "h/hotel/outdoor": 109}
DEEP = os.path.join("data", "vision", "torralba", "deeplearning")


def write_images(root, images, seed=0):
    """Writes JPEG (or, for .png names, PNG) files; returns relative path -> bytes."""
    rng = np.random.default_rng(seed)
    written = {}
    for i, image in enumerate(images):
        content = encode(random_image(rng, 8 + i % 3, 10), "png" if image.endswith(".png")
                         else "jpeg")
        os.makedirs(os.path.dirname(os.path.join(root, image)), exist_ok=True)
        with open(os.path.join(root, image), "wb") as f:
            f.write(content)
        written[image] = content
    return written


def write_places(root, images_at=("images256",), lists_at=(), seed=0):
    """A fake of Places205 as distributed: 3 train and 1 validation image per
    scene of SCENES, train lines in a scrambled order. Returns {split:
    [(relative path, label, bytes)] in line order}."""
    images = os.path.join(root, *images_at)
    truth = {}
    for split, count in (("train", 3), ("val", 1)):
        rows = [(f"{scene}/{split}{i:08d}.jpg", label) for scene, label in SCENES.items()
                for i in range(count)]
        rows = [rows[i] for i in np.random.default_rng(seed).permutation(len(rows))]
        written = write_images(images, [path for path, _ in rows], seed=len(split))
        truth[split] = [(path, label, written[path]) for path, label in rows]
        folder = os.path.join(root, *lists_at, "trainvalsplit_places205")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{split}_places205.csv"), "w") as f:
            f.writelines(f"/{path} {label}\n" if i % 2 else f"{path} {label}\n"
                         for i, (path, label, _) in enumerate(truth[split]))
    return truth
