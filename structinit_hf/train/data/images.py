"""The one decode of every input path: an image file as the RGB picture its owner sees.

Training (tensor and PIL pipelines), ``evaluate``, ``compare`` and the benchmarks all read images through
:func:`rgb_image`, so a model is scored on the pixels it was trained on, and on the pixels transformers'
``pipeline`` gives it (its ``load_image`` also applies the EXIF orientation).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image, ImageOps
from timm.data.transforms import str_to_pil_interp

__all__ = ["HIGH_BIT_DEPTH_MODES", "open_rgb", "rgb_image", "shrink_to"]

# PIL modes with more than 8 bits a channel: convert("RGB") clips them to 255, so they are scaled instead
HIGH_BIT_DEPTH_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")


def _value_range(image: Image.Image, values: np.ndarray) -> tuple[float, float]:
    """The range a high-bit-depth image's values are drawn from: its type's (16 bits; a 32-bit integer image holding
    16-bit values, as PIL opens some 16-bit PNGs; a float image in [0, 1]), else the image's own."""
    low, high = float(values.min()), float(values.max())
    if image.mode.startswith("I;16") or (image.mode == "I" and low >= 0 and high <= 65535):
        return 0.0, 65535.0
    if image.mode == "F" and low >= 0 and high <= 1:
        return 0.0, 1.0
    return low, high


def rgb_image(image: Image.Image) -> Image.Image:
    """``image`` upright (its EXIF orientation applied, as ``ImageOps.exif_transpose`` does) and in RGB.

    16-bit, 32-bit integer and float images are scaled to 8 bits over their range rather than clipped: a 16-bit
    image over 0..65535, a float image over 0..1, and one whose values fall outside those ranges over its own
    (darkest pixel 0, brightest 255), so a dark scan stays darker than a bright one. Palette, alpha, CMYK and
    grayscale images convert as PIL converts them."""
    ImageOps.exif_transpose(image, in_place=True)
    if image.mode in HIGH_BIT_DEPTH_MODES:
        values = np.nan_to_num(np.asarray(image, dtype=np.float64))
        low, high = _value_range(image, values)
        scaled = (values - low) * (255.0 / (high - low)) if high > low else np.zeros_like(values)
        image = Image.fromarray(np.round(scaled).astype(np.uint8), "L")
    return image if image.mode == "RGB" else image.convert("RGB")


def open_rgb(encoded: dict[str, Any]) -> Image.Image:
    """The RGB picture of a ``datasets`` image cell stored undecoded (``{'bytes': ..., 'path': ...}``)."""
    source = io.BytesIO(encoded["bytes"]) if encoded.get("bytes") else encoded["path"]
    with Image.open(source) as image:
        image.load()
        return rgb_image(image)


def shrink_to(image: Image.Image, shorter_side: int, interpolation: str = "bicubic") -> Image.Image:
    """``image`` with its shorter side brought down to ``shorter_side`` (aspect kept), as timm's evaluation resize
    does it; an image already that small is returned as it is (never enlarged)."""
    width, height = image.size
    if min(width, height) <= shorter_side:
        return image
    if width < height:
        size = (shorter_side, int(shorter_side * height / width))
    else:
        size = (int(shorter_side * width / height), shorter_side)
    return image.resize(size, str_to_pil_interp(interpolation))
