"""A user's real photo folders: every input path decodes an image the way its owner sees it (EXIF orientation,
16-bit and float images, palette, alpha, CMYK), keeps it at the size training needs, and labels it by its class
folder in timm's order."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
import torch
from PIL import Image, ImageOps
from transformers.image_utils import load_image

from structinit_hf.train.data import load_raw_dataset
from structinit_hf.train.dataloaders import TransformedImages
from structinit_hf.train.images import open_rgb, rgb_image
from structinit_hf.train.tensor_data import decode_split

ORIENTATION = 0x0112  # the EXIF tag


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
    for name in ("a/gray16.png", "a/int32.tiff", "a/float.tiff"):
        pixels = np.array(rgb_image(Image.open(paths[name])))
        assert pixels.min() == 0 and pixels.max() == 255 and len(np.unique(pixels)) > 100, name  # scaled, not clipped
        assert np.array_equal(pixels[..., 0], pixels[..., 2])  # gray: the same in every channel


@pytest.mark.parametrize("mode", ["I;16", "F"])
def test_a_flat_high_bit_depth_image_is_black_not_an_error(mode):
    image = Image.fromarray(np.full((4, 4), 300, dtype=np.uint16 if mode == "I;16" else np.float32))
    assert image.mode == mode and np.array(rgb_image(image)).max() == 0
