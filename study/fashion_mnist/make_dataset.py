"""Fashion-MNIST as a ``datasets`` folder in the Hub's image-classification schema, from Debian's own package.

    python study/fashion_mnist/make_dataset.py            # writes data/fashion_mnist (data/ is git-ignored)
    python study/fashion_mnist/make_dataset.py --out /somewhere/fashion_mnist

Debian's ``dataset-fashion-mnist`` (MIT) holds the four original idx files of Xiao, Rasul and Vollgraf (2017):
60,000 training and 10,000 test images, 28 x 28 grayscale, ten balanced classes. The script installs the package when
its files are missing (``apt-get``, as root), then writes one parquet file per split with the columns ``img`` (an
Image: a lossless grayscale PNG) and ``label`` (a ClassLabel with the ten class names), as the Hub's
``zalando-datasets/fashion_mnist`` carries them but under CIFAR-10's column name, so the campaign's profiles read both
alike. The training rows are shuffled with a fixed seed (0), so the first N rows are a class-balanced sample
(``--max-train-samples N``); the test rows keep their published order. ``datasets.load_dataset(out)`` loads it.

The application turns a grayscale image into RGB by repeating its one channel (PIL's ``convert("RGB")``), so the
3-channel patch embedding sees the same value in each channel.
"""

from __future__ import annotations

import argparse
import gzip
import io
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from datasets import ClassLabel, Dataset, Features, Image

PACKAGE = "dataset-fashion-mnist"
SOURCE = Path("/usr/share/datasets/fashion-mnist")
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
CLASS_NAMES = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]  # fmt: skip  # the published label order, 0 to 9
CARD = """---
pretty_name: Fashion-MNIST (from Debian's dataset-fashion-mnist)
license: mit
task_categories: [image-classification]
size_categories: [10K<n<100K]
---
# fashion_mnist

Fashion-MNIST (Xiao, Rasul, Vollgraf, 2017, arXiv:1708.07747): 60,000 training and 10,000 test images of Zalando
articles, 28x28 grayscale, ten classes (6,000 / 1,000 per class), from the four idx files of Debian's package
`dataset-fashion-mnist` (MIT), stored losslessly as PNG. Columns `img` (Image) and `label` (ClassLabel:
{names}). Training rows shuffled with seed 0 (the first N rows are a class-balanced sample); test rows in their
published order. Written by `python study/fashion_mnist/make_dataset.py`.
"""


def read_idx(path: Path) -> np.ndarray:
    """An idx file (big-endian header: magic, then one uint32 size per dimension) as a uint8 array."""
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    if data[:2] != b"\0\0" or data[2] != 0x08:
        raise ValueError(f"{path}: not an idx file of unsigned bytes (magic {data[:4].hex()})")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def ensure_package() -> None:
    """Install Debian's package when its files are missing (needs root and Debian's package index)."""
    if all((SOURCE / name).is_file() for pair in FILES.values() for name in pair):
        return
    if shutil.which("apt-get") is None:
        sys.exit(f"error: {SOURCE} lacks the Fashion-MNIST files and there is no apt-get to install {PACKAGE}")
    print(f"installing {PACKAGE} (apt-get)", flush=True)
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", PACKAGE]):
        if subprocess.run(command).returncode != 0:
            sys.exit(f"error: `{' '.join(command)}` failed; install {PACKAGE} as root, then rerun")


def png(pixels: np.ndarray) -> dict[str, bytes | None]:
    from PIL import Image as PILImage

    buffer = io.BytesIO()
    PILImage.fromarray(pixels, "L").save(buffer, format="PNG")
    return {"bytes": buffer.getvalue(), "path": None}


def split_dataset(split: str, shuffle_seed: int | None) -> Dataset:
    images, labels = (read_idx(SOURCE / name) for name in FILES[split])
    if len(images) != len(labels) or images.shape[1:] != (28, 28):
        raise ValueError(f"{split}: {images.shape} images for {labels.shape} labels; expected N x 28 x 28 and N")
    order = np.arange(len(images))
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(len(images))
    features = Features({"img": Image(), "label": ClassLabel(names=CLASS_NAMES)})
    rows = {"img": [png(images[i]) for i in order], "label": [int(labels[i]) for i in order]}
    return Dataset.from_dict(rows, features=features)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, default=Path("data/fashion_mnist"), help="default: %(default)s")
    args = parser.parse_args()
    ensure_package()
    args.out.mkdir(parents=True, exist_ok=True)
    for split, seed in (("train", 0), ("test", None)):
        dataset = split_dataset(split, seed)
        dataset.to_parquet(str(args.out / f"{split}-00000-of-00001.parquet"))
        counts = np.bincount(dataset["label"], minlength=10)
        print(f"{split}: {len(dataset):,} images, {counts.min():,} to {counts.max():,} per class")
    (args.out / "README.md").write_text(CARD.format(names=", ".join(CLASS_NAMES)))
    print(f"wrote {args.out} (datasets.load_dataset({str(args.out)!r}))")


if __name__ == "__main__":
    main()
