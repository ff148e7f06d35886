"""timm's training and evaluation transforms, on uint8 image tensors instead of PIL images.

:func:`structinit_hf.train.data.dataloaders.build_transform` (timm's ``create_transform``) works on PIL images, so every
epoch decodes every image again.  The transforms here take a ``3 x H x W`` uint8 tensor decoded once and
draw their random parameters exactly as timm does (Python's ``random`` for the crop, RandAugment and
flip, torch's generator for colour jitter and random erasing), so each sample's augmentation follows
the same distribution as timm's PIL path: random-resized crop, horizontal flip, then RandAugment
(``rand-m9-mstd0.5``: 2 of timm's 15 ops, each applied with probability 0.5 at a magnitude drawn from
N(9, 0.5) on timm's 0..10 scale), or colour jitter without RandAugment, then normalisation and erasing.
Geometric ops follow PIL's affine convention (pixel centres at ``i + 0.5``, the fill colour where the
source falls outside the image).
"""

from __future__ import annotations

import functools
import math
import random
import re
from typing import Any

import torch
from timm.data.random_erasing import RandomErasing
from torch.nn import functional as nnf
from torchvision.transforms import ColorJitter, InterpolationMode
from torchvision.transforms.v2 import functional as F

__all__ = ["TensorEvalTransform", "TensorRandAugment", "TensorTrainTransform", "tensor_policy_supported"]

_LEVEL_DENOM = 10.0  # timm's magnitude scale: M9 is 0.9 of each op's range


_INTERPOLATIONS = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC}


def tensor_policy_supported(auto_augment: str | None) -> bool:
    """Whether the tensor path reproduces ``auto_augment``: none, or RandAugment with timm's default ops."""
    return auto_augment is None or re.fullmatch(r"rand(-(m|n|mstd|mmax|p|inc)[\d.]+)*", auto_augment) is not None


def _interpolation(name: str) -> InterpolationMode:
    """timm's ``interpolation`` ('random' picks bilinear or bicubic per call, as timm does)."""
    if name == "random":
        return random.choice(list(_INTERPOLATIONS.values()))
    return _INTERPOLATIONS.get(name, InterpolationMode.BILINEAR)


@functools.lru_cache(maxsize=8)
def _pixel_centres(height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.meshgrid(torch.arange(height) + 0.5, torch.arange(width) + 0.5, indexing="ij")


def _pil_affine(image: torch.Tensor, matrix: tuple[float, ...], mode: InterpolationMode, fill: torch.Tensor):
    """PIL's ``Image.transform(size, AFFINE, matrix)``: output pixel (x, y) samples the input at
    ``(a x + b y + c, d x + e y + f)``, pixel centres at ``i + 0.5``; outside the image, ``fill``."""
    _, height, width = image.shape
    a, b, c, d, e, f = matrix
    ys, xs = _pixel_centres(height, width)
    x_in, y_in = a * xs + b * ys + c, d * xs + e * ys + f
    grid = torch.stack((2 * x_in / width - 1, 2 * y_in / height - 1), dim=-1)[None]
    sampled = nnf.grid_sample(image[None].float(), grid, mode=mode.value, padding_mode="border", align_corners=False)[0]
    inside = (x_in >= 0) & (x_in < width) & (y_in >= 0) & (y_in < height)
    out = torch.where(inside, sampled, fill[:, None, None])
    return out.round_().clamp_(0, 255).to(torch.uint8)


def _rotation_matrix(degrees: float, width: int, height: int) -> tuple[float, ...]:
    """The inverse affine matrix PIL's ``Image.rotate`` uses (about the centre, counter-clockwise)."""
    angle = -math.radians(degrees % 360)
    a, b = round(math.cos(angle), 15), round(math.sin(angle), 15)
    d, e = -b, a
    cx, cy = width / 2.0, height / 2.0
    return a, b, a * -cx + b * -cy + cx, d, e, d * -cx + e * -cy + cy


def _negate_half(value: float) -> float:
    return -value if random.random() > 0.5 else value


def _solarize_add(image: torch.Tensor, add: int, threshold: int = 128) -> torch.Tensor:
    return torch.where(image < threshold, (image.int() + add).clamp_(max=255).to(torch.uint8), image)


def _posterize(image: torch.Tensor, bits: int) -> torch.Tensor:
    return image if bits >= 8 else F.posterize(image, max(bits, 0))


def _solarize(image: torch.Tensor, threshold: int) -> torch.Tensor:
    return image if threshold >= 256 else F.solarize(image, threshold)


class TensorRandAugment:
    """timm's ``rand_augment_transform`` (default op set) on a uint8 tensor; ``policy`` like ``rand-m9-mstd0.5``."""

    OPS = (
        "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color",
        "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel",
    )  # fmt: skip

    def __init__(self, policy: str, mean: tuple[float, ...], interpolation: str) -> None:
        if policy is None or not tensor_policy_supported(policy):
            raise ValueError(f"auto-augment policy {policy!r} has no tensor version; expected rand-m<M>[-mstd<S>]...")
        self.magnitude, self.num_layers, self.prob, self.magnitude_std, self.magnitude_max = 10.0, 2, 0.5, 0.0, None
        for key, value in re.findall(r"-(mstd|mmax|m|n|p|inc)([\d.]+)", policy):
            if key == "inc" and int(value):
                raise ValueError(f"auto-augment policy {policy!r}: the 'increasing' op set has no tensor version")
            if key == "m":
                self.magnitude = int(value)
            elif key == "n":
                self.num_layers = int(value)
            elif key == "p":
                self.prob = float(value)
            elif key == "mstd":
                self.magnitude_std = float("inf") if float(value) > 100 else float(value)
            elif key == "mmax":
                self.magnitude_max = int(value)
        self.fill = torch.tensor([min(255, round(255 * x)) for x in mean], dtype=torch.float32)
        self.interpolation = interpolation

    def _magnitude(self) -> float:
        magnitude = self.magnitude
        if self.magnitude_std == float("inf"):
            magnitude = random.uniform(0, magnitude)
        elif self.magnitude_std > 0:
            magnitude = random.gauss(magnitude, self.magnitude_std)
        return max(0.0, min(magnitude, self.magnitude_max or _LEVEL_DENOM)) / _LEVEL_DENOM

    def _apply(self, name: str, image: torch.Tensor, level: float) -> torch.Tensor:  # noqa: PLR0911
        """One op at ``level`` (the magnitude as a fraction of its range), mapped to arguments as timm maps it."""
        if name == "AutoContrast":
            return F.autocontrast(image)
        if name == "Equalize":
            return F.equalize(image)
        if name == "Invert":
            return F.invert(image)
        if name == "Posterize":
            return _posterize(image, int(level * 4))
        if name == "Solarize":
            return _solarize(image, min(256, int(level * 256)))
        if name == "SolarizeAdd":
            return _solarize_add(image, min(128, int(level * 110)))
        if name in ("Color", "Contrast", "Brightness", "Sharpness"):
            adjust = {
                "Color": F.adjust_saturation,
                "Contrast": F.adjust_contrast,
                "Brightness": F.adjust_brightness,
                "Sharpness": F.adjust_sharpness,
            }[name]
            return adjust(image, level * 1.8 + 0.1)
        _, height, width = image.shape
        if name == "Rotate":
            matrix = _rotation_matrix(_negate_half(level * 30.0), width, height)
        elif name == "ShearX":
            matrix = (1, _negate_half(level * 0.3), 0, 0, 1, 0)
        elif name == "ShearY":
            matrix = (1, 0, 0, _negate_half(level * 0.3), 1, 0)
        elif name == "TranslateXRel":
            matrix = (1, 0, _negate_half(level * 0.45) * width, 0, 1, 0)
        else:  # TranslateYRel
            matrix = (1, 0, 0, 0, 1, _negate_half(level * 0.45) * height)
        return _pil_affine(image, matrix, _interpolation(self.interpolation), self.fill)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        for name in random.choices(self.OPS, k=self.num_layers):
            if self.prob < 1.0 and random.random() > self.prob:
                continue
            image = self._apply(name, image, self._magnitude())
        return image


def _normalize(image: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    return (image.float().div_(255) - mean[:, None, None]) / std[:, None, None]


def _crop_params(height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float]):
    """timm's ``RandomResizedCropAndInterpolation.get_params``: ten tries, then the central crop; never a crop of no
    pixels (torchvision's ``RandomResizedCrop`` rule), which an image of a pixel or two would otherwise draw."""
    area = height * width
    for _ in range(10):
        target_area = random.uniform(*scale) * area
        aspect = math.exp(random.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = round(math.sqrt(target_area * aspect)), round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return random.randint(0, height - h), random.randint(0, width - w), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, max(1, round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, max(1, round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class TensorTrainTransform:
    """timm's training transform for a data config (the arguments of
    :func:`~structinit_hf.train.data.dataloaders.build_transform`)."""

    def __init__(
        self,
        data_config: dict[str, Any],
        *,
        auto_augment: str | None = None,
        hflip: float = 0.5,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        re_prob: float = 0.0,
        color_jitter: float = 0.4,
    ) -> None:
        self.size = tuple(data_config["input_size"][-2:])
        self.interpolation = data_config.get("interpolation", "bilinear")
        self.mean, self.std = torch.tensor(data_config["mean"]), torch.tensor(data_config["std"])
        self.scale, self.ratio, self.hflip = tuple(scale), tuple(ratio), hflip
        self.rand_augment = (
            TensorRandAugment(auto_augment, data_config["mean"], self.interpolation) if auto_augment else None
        )
        self.color_jitter = ColorJitter(*(color_jitter,) * 3) if not auto_augment and color_jitter else None
        self.erasing = RandomErasing(re_prob, mode="const", device="cpu") if re_prob > 0 else None

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        top, left, height, width = _crop_params(*image.shape[-2:], self.scale, self.ratio)
        image = F.resized_crop(image, top, left, height, width, list(self.size), _interpolation(self.interpolation))
        if self.hflip > 0 and random.random() < self.hflip:
            image = F.horizontal_flip(image)
        if self.rand_augment is not None:
            image = self.rand_augment(image)
        if self.color_jitter is not None:
            image = self.color_jitter(image)
        image = _normalize(image, self.mean, self.std)
        return self.erasing(image) if self.erasing is not None else image


class TensorEvalTransform:
    """timm's evaluation transform (``crop_mode='center'``): resize to ``size / crop_pct``, centre crop, normalise."""

    def __init__(self, data_config: dict[str, Any]) -> None:
        if data_config.get("crop_mode", "center") != "center":
            raise ValueError(f"crop_mode {data_config['crop_mode']!r} has no tensor version; expected 'center'")
        self.size = tuple(data_config["input_size"][-2:])
        crop_pct = data_config.get("crop_pct") or 0.875
        scaled = [math.floor(side / crop_pct) for side in self.size]
        self.resize = scaled[:1] if scaled[0] == scaled[1] else scaled  # one side: the shorter edge, as timm
        self.interpolation = _INTERPOLATIONS.get(
            data_config.get("interpolation", "bilinear"), InterpolationMode.BILINEAR
        )
        self.mean, self.std = torch.tensor(data_config["mean"]), torch.tensor(data_config["std"])

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        if list(image.shape[-2:]) != list(self.size) or self.resize != [self.size[0]]:
            image = F.center_crop(F.resize(image, self.resize, self.interpolation, antialias=True), list(self.size))
        return _normalize(image, self.mean, self.std)
