"""Write the embedded CIFAR-10 sample (structinit_hf/samples/cifar10) from a full copy in the Hub's schema.

    python scripts/make_sample.py --source ../shared/data/cifar10

The sample keeps, in the source's (shuffled) row order, the first 256 training and 100 test images of each of the ten
classes: 2,560 training rows (2,500 to train on after ``train.py``'s 2% validation hold-out) and 1,000 test rows, with
their stored JPEG bytes as they are.
"""

import argparse
from pathlib import Path

import datasets

OUT = Path(__file__).resolve().parents[1] / "structinit_hf" / "samples" / "cifar10"
PER_CLASS = {"train": 256, "test": 100}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="a full CIFAR-10 folder (img/label parquet)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the two parquet files go (default: the package's)")
    args = parser.parse_args()
    for split, per_class in PER_CLASS.items():
        # decode=False keeps each image's stored bytes: no re-encoding
        data = datasets.load_dataset(str(args.source), split=split).cast_column("img", datasets.Image(decode=False))
        seen = [0] * data.features["label"].num_classes
        rows = []
        for row, label in enumerate(data["label"]):
            if seen[label] < per_class:
                seen[label] += 1
                rows.append(row)
        part = data.select(rows).cast_column("img", datasets.Image())
        part.to_parquet(args.out / f"{split}-00000-of-00001.parquet")
        print(f"{split}: {len(rows)} rows, {per_class} per class")
