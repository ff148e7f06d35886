"""A user's real photo folders: every input path decodes an image the way its owner sees it (EXIF orientation,
16-bit and float images, palette, alpha, CMYK), keeps it at the size training needs, and labels it by its class
folder in timm's order."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import datasets
import numpy as np
import pytest
import timm
import torch
from PIL import Image, ImageOps
from transformers.image_utils import load_image

from structinit_hf.__main__ import main
from structinit_hf.train.data.dataloaders import TransformedImages
from structinit_hf.train.data.images import open_rgb, rgb_image
from structinit_hf.train.data.sources import known_label_names, load_raw_dataset
from structinit_hf.train.data.splits import load_image_classification
from structinit_hf.train.data.tensor_data import decode_split

ORIENTATION = 0x0112  # the EXIF tag
TINY = ["--model-kwargs", "depth=1", "img_size=16", "patch_size=4", "embed_dim=48"]


def _gradient(size: int = 12) -> np.ndarray:
    """An asymmetric picture: a rotation or a flip of it is another picture."""
    y, x = np.mgrid[0:size, 0:size]
    return np.stack([x * 20, y * 20, (x * y) % 256], axis=-1).astype(np.uint8)


def write_image_kinds(folder, size: int = 12) -> dict[str, str]:
    """One image of each kind a photo folder holds, all ``size`` px square, in two class folders; name -> path."""
    rgb = _gradient(size)
    gray16 = (np.arange(size * size).reshape(size, size) * 7 + 1000).astype(np.uint16)
    kinds = {
        "a/exif_rotated.jpg": (Image.fromarray(rgb), {"exif": _exif(6)}),
        "a/gray16.png": (Image.fromarray(gray16), {}),  # mode I;16
        "a/int32.tiff": (Image.fromarray(gray16.astype(np.int32) * 40_000), {}),  # mode I
        "a/float.tiff": (Image.fromarray(gray16.astype(np.float32) / 7.5 - 3.0), {}),  # mode F
        "b/palette.png": (Image.fromarray(rgb).convert("P"), {}),
        "b/alpha.png": (Image.fromarray(np.dstack([rgb, rgb[..., :1]]), "RGBA"), {}),
        "b/cmyk.jpg": (Image.fromarray(rgb).convert("CMYK"), {}),
        "b/gray_alpha.png": (Image.fromarray(np.dstack([rgb[..., 0], rgb[..., 1]]), "LA"), {}),
    }
    paths = {}
    for name, (image, options) in kinds.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        image.save(path, **options)
        paths[name] = str(path)
    return paths


def _exif(orientation: int) -> Image.Exif:
    exif = Image.Exif()
    exif[ORIENTATION] = orientation
    return exif


def _as_tensor(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)


def test_every_input_path_decodes_each_kind_of_image_the_same(tmp_path):
    """Catches the decode-once tensor path reading raw pixels (EXIF orientation ignored) while the PIL path,
    evaluate and transformers' pipeline turn the photo upright, and 16-bit / float images clipped to white."""
    paths = write_image_kinds(tmp_path / "photos")
    split = load_raw_dataset(str(tmp_path / "photos"))["train"]
    names = [row["path"] for row in split.cast_column("image", datasets.Image(decode=False))["image"]]
    assert {Image.open(path).mode for path in names} >= {"I;16", "I", "F", "P", "RGBA", "CMYK", "LA"}
    tensor_path = decode_split(split, "image", "train").pixels  # train's decode-once pipeline
    pil_path = TransformedImages(split, "image", "label", _as_tensor)  # train's PIL pipeline, evaluate, compare
    for row, path in enumerate(names):
        expected = _as_tensor(rgb_image(Image.open(path)))
        assert torch.equal(tensor_path[row], expected), path
        assert torch.equal(pil_path[row][0], expected), path
        assert torch.equal(_as_tensor(open_rgb({"path": path, "bytes": None})), expected), path
    upright = ImageOps.exif_transpose(Image.open(paths["a/exif_rotated.jpg"])).convert("RGB")
    raw = Image.open(paths["a/exif_rotated.jpg"]).convert("RGB")
    assert np.array_equal(np.array(rgb_image(Image.open(paths["a/exif_rotated.jpg"]))), np.array(upright))
    assert not np.array_equal(np.array(upright), np.array(raw))  # the tag matters: the test can tell
    assert np.array_equal(np.array(load_image(paths["a/exif_rotated.jpg"])), np.array(upright))  # pipeline's decode
    gray16 = np.asarray(Image.open(paths["a/gray16.png"]), dtype=np.float64)
    pixels = np.array(rgb_image(Image.open(paths["a/gray16.png"])))  # 16 bits: scaled over 0..65535, not clipped
    assert np.array_equal(pixels[..., 0], np.round(gray16 * 255 / 65535)) and pixels.max() < 255
    for name in ("a/int32.tiff", "a/float.tiff"):  # values beyond 16 bits / beyond 0..1: over the image's own range
        pixels = np.array(rgb_image(Image.open(paths[name])))
        assert pixels.min() == 0 and pixels.max() == 255 and len(np.unique(pixels)) > 100, name
        assert np.array_equal(pixels[..., 0], pixels[..., 2])  # gray: the same in every channel


@pytest.mark.parametrize("mode", ["I;16", "F"])
def test_dark_and_bright_high_bit_depth_scans_stay_apart(mode):
    """A flat dark and a flat bright scan keep their brightness (a per-image stretch would make both black)."""
    dtype, dark, bright, top = (np.uint16, 4000, 60000, 65535) if mode == "I;16" else (np.float32, 0.2, 0.8, 1.0)
    levels = []
    for level in (dark, bright):
        image = Image.fromarray(np.full((4, 4), level, dtype=dtype))
        assert image.mode == mode
        levels.append(int(np.array(rgb_image(image)).max()))
    assert levels == [round(dark * 255 / top), round(bright * 255 / top)]


def _folder(root, files: dict[str, int]):
    """An image folder from ``{relative path: gray level}`` (tiny PNGs); a path ending in / is an empty folder."""
    for name, level in files.items():
        path = root / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((6, 6, 3), level, dtype=np.uint8)).save(path)
    return root


NAMES = ["10_cats", "2_dogs", "Zebra", "apple", "é t"]


def test_classes_are_numbered_in_timm_image_folder_order(tmp_path):
    """Catches classes numbered in datasets' order ('10_cats' before '2_dogs', 'Zebra' before 'apple'), which
    timm's ImageFolder and validate.py number otherwise."""
    from timm.data import ImageDataset

    root = _folder(
        tmp_path / "photos", {f"{name}/{i}.png": 10 * k + i for k, name in enumerate(NAMES) for i in range(3)}
    )
    data = load_image_classification(str(root), val_split=0.0, eval_split="train")
    timm_order = ImageDataset(str(root)).reader.class_to_idx
    assert data.label_names == list(timm_order) == ["2_dogs", "10_cats", "apple", "Zebra", "é t"]
    paths = data.train.cast_column("image", datasets.Image(decode=False))["image"]
    for cell, label in zip(paths, data.train["label"], strict=True):  # each image labelled by its own folder
        assert Path(cell["path"]).parent.name == data.label_names[label]
    assert known_label_names(
        SimpleNamespace(
            dataset=str(root), dataset_config=None, train_split="train", image_column=None, label_column=None
        )
    ) in (None, data.label_names)


@pytest.mark.parametrize(
    ("files", "named"),
    [
        ({"cat/indoor/1.png": 1, "cat/indoor/2.png": 2, "dog/outdoor/3.png": 3}, ["2 levels deep", "cat/indoor/1.png"]),
        ({"cat/1.png": 1, "dog/2.png": 2, "stray.png": 3}, ["the image stray.png", "is not in a class folder"]),
        ({"cat/1.png": 1, "cat/extra/2.png": 2, "dog/3.png": 3}, ["cat/extra/2.png", "2 levels deep"]),
        ({"cat/1.png": 1, "dog/2.png": 2, "eel/": 0}, ["class folder(s) eel hold no images"]),
        ({"train/cat/1.png": 1, "train/dog/2.png": 2, "test/cat/3.png": 3, "test/eel/4.png": 4}, ["'eel'", "'test'"]),
        ({"train/cat/1.png": 1, "train/dog/2.png": 2, "train/dog/x/3.png": 3}, ["train/dog/x/3.png", "2 levels"]),
        ({"train/cat/1.png": 1, "training/cat/2.png": 2}, ["train/ and training/", "both hold the train split"]),
        ({"train/cat/1.png": 1, "test/cat/2.png": 2, "dog/3.png": 3}, ["mixes split folders (test, train)", "(dog)"]),
        ({"train/cat/1.png": 1, "test/cat/2.png": 2, "loose.png": 3}, ["the image loose.png", "its split folders"]),
        ({"cat/1.png": 1, "dog/.only_hidden.png": 2}, ["class folder(s) dog hold no images"]),
        (
            {"airport/1.png": 1, "train_station/2.png": 2, "train_station/old/3.png": 3},
            ["2 levels deep", "train_station/old/3.png"],
        ),
    ],
    ids=[
        "nested",
        "stray-file",
        "lone-sub-folder",
        "empty-class",
        "test-only-class",
        "nested-under-split",
        "two-folders-one-split",
        "splits-beside-classes",
        "image-beside-splits",
        "only-hidden-images",
        "nested-in-a-class-named-like-a-split",
    ],
)
def test_a_folder_whose_labels_are_not_its_class_folders_is_refused_in_one_line(tmp_path, files, named, capsys):
    root = _folder(tmp_path / "photos", files)
    status = main(["train", *TINY, "--dataset", str(root), "--output-dir", str(tmp_path / "run")])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert status == 2 and len(errors) == 1, errors
    assert all(words in errors[0] for words in named), errors[0]
    assert not (tmp_path / "run").exists()  # refused before the run folder is made


def _rows(root: Path) -> dict[str, list[tuple[str, str]]]:
    """``{split: [(file relative to root, its class name), ...]}`` as the loader reads the folder."""
    loaded = load_raw_dataset(str(root))
    rows = {}
    for split, table in loaded.items():
        names = table.features["label"].names
        files = [Path(cell["path"]) for cell in table.cast_column("image", datasets.Image(decode=False))["image"]]
        rows[split] = sorted(
            (str(path.relative_to(root)), names[label]) for path, label in zip(files, table["label"], strict=True)
        )
    return rows


def _linked(root: Path, links: dict[str, str]) -> Path:
    for link, target in links.items():
        (root / link).parent.mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(root.parent / target, target_is_directory=True)
    return root


@pytest.mark.parametrize(
    ("files", "links", "expected"),
    [
        ({"Train/cat/1.png": 1, "Train/dog/2.png": 2, "Test/cat/3.png": 3, "Test/dog/4.png": 4}, {},
         {"train": [("Train/cat/1.png", "cat"), ("Train/dog/2.png", "dog")],
          "test": [("Test/cat/3.png", "cat"), ("Test/dog/4.png", "dog")]}),
        ({"training_set/cat/1.png": 1, "training_set/dog/2.png": 2, "test_set/cat/3.png": 3}, {},
         {"train": [("training_set/cat/1.png", "cat"), ("training_set/dog/2.png", "dog")],
          "test": [("test_set/cat/3.png", "cat")]}),
        ({"train/cat/1.png": 1, "train/dog/2.png": 2, "Validation/cat/3.png": 3}, {},
         {"train": [("train/cat/1.png", "cat"), ("train/dog/2.png", "dog")],
          "validation": [("Validation/cat/3.png", "cat")]}),
        ({"train/bus/1.png": 1, "train/train/2.png": 2, "test/bus/3.png": 3, "test/train/4.png": 4}, {},
         {"train": [("train/bus/1.png", "bus"), ("train/train/2.png", "train")],
          "test": [("test/bus/3.png", "bus"), ("test/train/4.png", "train")]}),
        ({"airport/1.png": 1, "train_station/2.png": 2, "train-yard/3.png": 3}, {},
         {"train": [("airport/1.png", "airport"), ("train-yard/3.png", "train-yard"),
                    ("train_station/2.png", "train_station")]}),
        ({"cat/fox_train_1.png": 1, "cat/2.png": 2, "dog/test_3.png": 3}, {},
         {"train": [("cat/2.png", "cat"), ("cat/fox_train_1.png", "cat"), ("dog/test_3.png", "dog")]}),
        ({"cat/1.png": 1, "cat/.hidden.png": 2, "cat/.DS_Store/x.png": 2, "dog/2.png": 3}, {},
         {"train": [("cat/1.png", "cat"), ("dog/2.png", "dog")]}),
        ({"cat/1.png": 1}, {"dog": "elsewhere/dogs"},
         {"train": [("cat/1.png", "cat"), ("dog/2.png", "dog")]}),
        ({"train/cat/1.png": 1, "train/dog/2.png": 2}, {"test/cat": "elsewhere/cats", "test/dog": "elsewhere/dogs"},
         {"train": [("train/cat/1.png", "cat"), ("train/dog/2.png", "dog")],
          "test": [("test/cat/2.png", "cat"), ("test/dog/2.png", "dog")]}),
        ({"train/cat/1.png": 1, "train/dog/2.png": 2, "test/": 0, "logs/": 0, "__MACOSX/train/cat/._1.png": 3}, {},
         {"train": [("train/cat/1.png", "cat"), ("train/dog/2.png", "dog")]}),
    ],
    ids=["capitalised-splits", "kaggle-split-names", "capitalised-validation", "a-class-named-train",
         "classes-named-like-splits", "files-named-like-splits", "hidden-files", "linked-class", "linked-split",
         "folders-without-images-beside-splits"],
)  # fmt: skip
def test_an_image_folder_reads_every_image_into_its_own_split_and_class(tmp_path, files, links, expected):
    """Catches datasets' split guessing, which the loader used to trust: Train/ and Test/ read as one split (test
    images trained on), Validation/ dropped, the class train of test/ read as training images, a flat folder's
    classes named like splits or files named like splits reading as splits (classes dropped), and classes
    behind a symbolic link dropped."""
    _folder(tmp_path / "elsewhere", {"cats/2.png": 5, "dogs/2.png": 6})
    root = _linked(_folder(tmp_path / "photos", files), links)
    assert _rows(root) == expected


def test_a_symbolic_link_back_up_the_folder_ends_the_walk(tmp_path, capsys):
    """Catches the walk that follows links going round a loop (two links back to the root: exponential)."""
    root = _folder(tmp_path / "photos", {"cat/1.png": 1, "dog/2.png": 2})
    for name in ("cat", "dog"):
        (root / name / "up").symlink_to(root, target_is_directory=True)
    status = main(["train", *TINY, "--dataset", str(root), "--output-dir", str(tmp_path / "run")])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert status == 2 and len(errors) == 1 and "levels deep" in errors[0], errors


def test_max_eval_samples_scores_every_class_of_a_folder_sorted_by_class(tmp_path):
    """Catches --max-eval-samples keeping the first rows: an image folder's rows are sorted by class, so 60 of 4 x 50
    test images scored two classes of four."""
    names = ("cat", "dog", "fox", "owl")
    root = _folder(tmp_path / "photos", {f"{split}/{name}/{i}.png": i for split in ("train", "test")
                                         for name in names for i in range(50)})  # fmt: skip
    data = load_image_classification(str(root), max_eval_samples=60, seed=0)
    scored = data.evaluation["label"]
    assert len(scored) == 60 and set(scored) == {0, 1, 2, 3}
    assert load_image_classification(str(root), max_eval_samples=60, seed=5).evaluation["label"] == scored


def test_evaluate_on_a_flat_folder_names_the_split_that_fits(tmp_path, capsys):
    root = _folder(tmp_path / "photos", {"cat/1.png": 1, "dog/2.png": 2})
    status = main(["evaluate", "--model", "vit_tiny_impulse3", "--allow-untrained", *TINY, "--dataset", str(root),
                   "--output", str(tmp_path / "e.json")])  # fmt: skip
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert status == 2 and len(errors) == 1 and "--eval-split train" in errors[0], errors


def _with_bad_images(root, count: int):
    for index in range(count):
        (root / ("cat", "dog")[index % 2] / f"broken_{index}.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    return root


@pytest.mark.slow
def test_skip_bad_images_on_train_compare_and_evaluate(tmp_path, capsys):
    """Catches the batch fitted before unreadable rows are dropped, a flag a command does not take suggested in its
    error, and evaluate failing mid-run without naming the file."""
    root = _with_bad_images(
        _folder(tmp_path / "photos", {f"{c}/{i}.png": i for c in ("cat", "dog") for i in range(8)}), 3
    )
    train = ["train", *TINY, "--dataset", str(root), "--epochs", "1", "--val-split", "0.25"]
    assert main([*train, "--output-dir", str(tmp_path / "A")]) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")][0]
    assert "broken_" in error and "(and 1 more)" in error and "--skip-bad-images" in error  # the third is held out
    assert main([*train, "--output-dir", str(tmp_path / "B"), "--skip-bad-images"]) == 0
    record = json.loads((tmp_path / "B" / "results.json").read_text())
    assert record["global_batch"] == record["train_images"] == 13  # 15 after the hold-out, 2 unreadable dropped
    evaluate = ["evaluate", "--model", str(tmp_path / "B" / "final"), "--dataset", str(root), "--split", "train"]
    assert main([*evaluate, "--output", str(tmp_path / "e.json")]) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")][0]
    assert "broken_" in error and "--skip-bad-images" in error
    assert main([*evaluate, "--output", str(tmp_path / "e.json"), "--skip-bad-images"]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["num_samples"] == 16
    compare = ["compare", "--dataset", str(root), "--arms", "default", "--epochs", "1", "--model-kwargs", "depth=1"]
    assert main([*compare, "--output-dir", str(tmp_path / "C")]) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")][0]
    assert "broken_" in error and "--skip-bad-images" in error
    assert main([*compare, "--output-dir", str(tmp_path / "D"), "--skip-bad-images"]) == 0


def _tagged_folder(root, per_class: int = 12):
    """Two classes told apart by which half is bright, as the photos are seen; every other photo is stored upside
    down with an EXIF tag that turns it upright (orientation 3), so only an upright decode sees the classes."""
    for label, name in enumerate(("bright_top", "bright_bottom")):
        (root / name).mkdir(parents=True)
        for index in range(per_class):
            pixels = np.full((16, 16, 3), 30 + index, dtype=np.uint8)
            (pixels[:8] if label == 0 else pixels[8:])[...] = 220
            stored = Image.fromarray(pixels)
            if index % 2:
                stored.rotate(180).save(root / name / f"{index}.jpg", exif=_exif(3), quality=95)
            else:
                stored.save(root / name / f"{index}.jpg", quality=95)
    return root


def _top1(predicted: list[int], labels: list[int]) -> float:
    return 100.0 * sum(p == t for p, t in zip(predicted, labels, strict=True)) / len(labels)


@pytest.mark.slow
def test_a_run_on_tagged_photos_scores_the_same_in_training_evaluate_and_a_transformers_pipeline(tmp_path, capsys):
    """Catches the decode-once path training on raw (upside-down) pixels that evaluate and pipeline turn upright."""
    from transformers import pipeline

    root = _tagged_folder(tmp_path / "photos")
    run_dir = tmp_path / "run"
    argv = ["train", *TINY, "--dataset", str(root), "--epochs", "6", "--warmup-epochs", "1", "--aa", "none"]
    assert main([*argv, "--val-split", "0.25", "--output-dir", str(run_dir)]) == 0
    trained = json.loads((run_dir / "results.json").read_text())
    out = tmp_path / "e.json"
    assert main(["evaluate", "--model", str(run_dir / "final"), "--dataset", str(root), "--output", str(out)]) == 0
    evaluated = json.loads(out.read_text())
    assert evaluated["top1"] == trained["top1"] and evaluated["num_samples"] == trained["num_samples"] == 6
    held_out = load_image_classification(str(root), val_split=0.25, seed=0).evaluation
    files = [cell["path"] for cell in held_out.cast_column("image", datasets.Image(decode=False))["image"]]
    classify = pipeline("image-classification", model=str(run_dir / "final"), device="cpu")
    names = trained["label_names"]
    predicted = [names.index(classify(path, top_k=1)[0]["label"]) for path in files]
    assert _top1(predicted, held_out["label"]) == trained["top1"]


@pytest.mark.slow
def test_a_run_scores_the_same_through_timm_image_folder_as_through_evaluate(tmp_path):
    """Catches classes numbered otherwise than timm's ImageFolder (validate.py) numbers the same folder."""
    from timm.data import ImageDataset, create_transform, resolve_data_config

    root = _folder(tmp_path / "photos", {f"{n}/{i}.png": 40 * k + 3 * i for k, n in enumerate(NAMES) for i in range(6)})
    run_dir = tmp_path / "run"
    argv = [
        "train",
        *TINY,
        "--dataset",
        str(root),
        "--epochs",
        "8",
        "--warmup-epochs",
        "1",
        "--aa",
        "none",
        "--lr",
        "3e-3",
    ]
    argv += ["--batch-size", "5", "--hflip", "0", "--scale", "1", "1"]
    assert main([*argv, "--output-dir", str(run_dir)]) == 0
    out = tmp_path / "e.json"
    assert main(["evaluate", "--model", str(run_dir / "final"), "--dataset", str(root), "--split", "train",
                 "--output", str(out)]) == 0  # fmt: skip
    evaluated = json.loads(out.read_text())
    model = timm.create_model(f"local-dir:{run_dir / 'final'}", pretrained=True).eval()
    transform = create_transform(**resolve_data_config(model=model))
    timm_folder = ImageDataset(str(root), transform=transform)  # what validate.py --data-dir reads
    with torch.no_grad():
        predicted = [int(model(image[None]).argmax()) for image, _ in timm_folder]
    assert _top1(predicted, [label for _, label in timm_folder]) == evaluated["top1"]
    assert evaluated["top1"] > 100 / len(NAMES)  # the run learnt something, so a renumbering would show
