"""Configuration of StructInitViT: a timm ``VisionTransformer`` whose attention starts structured.

This module is also saved next to every checkpoint as remote code (``trust_remote_code=True``), so it
imports only ``transformers``: it must load where structinit-hf is not installed.
"""

from __future__ import annotations

import inspect
from typing import Any

from transformers import PretrainedConfig

from .variants import CIFAR10_MEAN, CIFAR10_STD, TIMM_VARIANTS, check_geometry, to_pair

__all__ = ["ATTENTION_INITS", "POOLINGS", "POSITION_EMBEDDINGS", "StructInitViTConfig"]

ATTENTION_INITS = ("impulse", "mimetic", "default")
POSITION_EMBEDDINGS = ("sincos", "learn", "none")
POOLINGS = ("avg", "token", "max", "avgmax")

# timm.create_model keyword -> config field, so a timm call and its config read the same
_TIMM_KWARGS = {
    "img_size": "image_size",
    "in_chans": "num_channels",
    "embed_dim": "hidden_size",
    "depth": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "global_pool": "pooling",
    "pos_embed": "position_embedding",
    "num_classes": "num_labels",
    "kernel_size": "impulse_kernel_size",
    "seed": "init_seed",
    "pseudo_input": "impulse_pseudo_input",
    "sharpness": "impulse_sharpness",
    "solver": "impulse_solver",
    "per_layer": "impulse_per_layer",
    "suppress_content": "impulse_suppress_content",
    "patch_embed_scale": "impulse_patch_embed_scale",
    "value_init": "impulse_value_init",
    "shift_order": "impulse_shift_order",
    "qk_frobenius": "impulse_qk_frobenius",
    "position_scale": "impulse_position_scale",
    "preset": "impulse_preset",
}
# impulse option (structinit_hf.ImpulseOptions field) -> config field
_IMPULSE_FIELDS = {
    option: name for option, name in _TIMM_KWARGS.items() if name.startswith("impulse_") or option == "seed"
}

# keys config.json carries for timm (``timm.create_model("local-dir:...")``) and for AutoImageProcessor, which
# reads a folder whose config.json has "pretrained_cfg" as a timm checkpoint unless this names the processor;
# all derived from the fields on save
_DERIVED_KEYS = (
    "architecture",
    "model_args",
    "num_classes",
    "num_features",
    "global_pool",
    "label_names",
    "pretrained_cfg",
    "structinit",
    "image_processor_type",
)

# a stock timm name per width, so stock timm (without structinit-hf) rebuilds the network from model_args
_STOCK_TIMM_NAMES = {
    192: "vit_tiny_patch16_224",
    384: "vit_small_patch16_224",
    768: "vit_base_patch16_224",
    1024: "vit_large_patch16_224",
}


class StructInitViTConfig(PretrainedConfig):
    r"""Configuration of [`StructInitViTModel`] and [`StructInitViTForImageClassification`].

    The network is timm's ``VisionTransformer``; only how its attention starts differs.  The defaults
    reproduce timm's ``vit_tiny_impulse3`` (the paper's CIFAR ViT-Tiny with 3x3 impulse init); use
    [`~StructInitViTConfig.from_timm_name`] for any other registered timm name.

    Args:
        image_size (`int` or `tuple[int, int]`, *optional*, defaults to 32):
            Input resolution (height, width).
        patch_size (`int` or `tuple[int, int]`, *optional*, defaults to 2):
            Patch size; must divide `image_size`.
        num_channels (`int`, *optional*, defaults to 3):
            Number of input channels.
        hidden_size (`int`, *optional*, defaults to 192):
            Token width (timm's `embed_dim`).
        num_hidden_layers (`int`, *optional*, defaults to 12):
            Number of transformer blocks (timm's `depth`).
        num_attention_heads (`int`, *optional*, defaults to 3):
            Heads per attention layer; must divide `hidden_size`.
        mlp_ratio (`float`, *optional*, defaults to 4.0):
            MLP hidden width as a multiple of `hidden_size`.
        qkv_bias (`bool`, *optional*, defaults to `True`):
            Whether the query/key/value projection has a bias.
        class_token (`bool`, *optional*, defaults to `False`):
            Whether to prepend a class token (the paper's CIFAR models have none).
        pooling (`str`, *optional*, defaults to `"avg"`):
            How tokens become one feature vector: one of `"avg"`, `"token"` (needs `class_token`), `"max"`, `"avgmax"`.
        position_embedding (`str`, *optional*, defaults to `"sincos"`):
            `"sincos"`: the fixed 2-D sin-cos embedding of the paper (stored as a frozen parameter);
            `"learn"`: a learned embedding; `"none"`: no position embedding.
        drop_rate (`float`, *optional*, defaults to 0.0):
            Dropout before the classifier.
        pos_drop_rate (`float`, *optional*, defaults to 0.0):
            Dropout after adding the position embedding.
        proj_drop_rate (`float`, *optional*, defaults to 0.0):
            Dropout after the attention and MLP projections.
        attn_drop_rate (`float`, *optional*, defaults to 0.0):
            Dropout on the attention maps.
        drop_path_rate (`float`, *optional*, defaults to 0.0):
            Stochastic depth rate (linearly increasing over the blocks).
        image_mean (`tuple[float, ...]`, *optional*, defaults to the CIFAR-10 mean):
            Per-channel mean the images are normalized with (used by the image processor and timm).
        image_std (`tuple[float, ...]`, *optional*, defaults to the CIFAR-10 std):
            Per-channel standard deviation the images are normalized with.
        attention_init (`str`, *optional*, defaults to `"impulse"`):
            How attention is initialized when a new model is built: `"impulse"` (structured init, arXiv
            2404.01139), `"mimetic"` (Trockman & Kolter 2023) or `"default"` (timm's init).  Loading a
            checkpoint never re-initializes anything.
        impulse_kernel_size (`int`, *optional*, defaults to 3):
            Odd window size `k` the impulse shifts are drawn from; at most the patch grid's side.
        init_seed (`int`, *optional*, defaults to 0):
            Seed of the impulse shifts (and noisy pseudo inputs) or of the mimetic draws.
        impulse_preset (`str`, *optional*, defaults to `"structinit"`):
            `"structinit"` (this project's construction), `"v1"` (the paper's first version, arXiv 2404.01139)
            or `"v2"` (NeurIPS 2025, arXiv 2505.19985). A preset fixes the options below; give them only with
            the preset's value (or leave them `None`).
        impulse_pseudo_input, impulse_sharpness, impulse_solver, impulse_per_layer, impulse_suppress_content,
        impulse_patch_embed_scale, impulse_value_init, impulse_shift_order, impulse_qk_frobenius,
        impulse_position_scale (*optional*, default `None`):
            The impulse options of `structinit_hf.ImpulseOptions` (its docstring says what each does); `None`
            takes the preset's value, else the package default.
        kwargs:
            [`PretrainedConfig`] arguments: `num_labels` (defaults to 10), `id2label`, `label2id`, ...

    Example:

    ```python
    >>> import structinit_hf
    >>> from transformers import AutoModelForImageClassification
    >>> config = structinit_hf.StructInitViTConfig(attention_init="impulse", impulse_kernel_size=5, num_labels=10)
    >>> model = AutoModelForImageClassification.from_config(config)  # solves the attention init
    ```
    """

    model_type = "structinit_vit"

    def __init__(
        self,
        image_size: int | tuple[int, int] = 32,
        patch_size: int | tuple[int, int] = 2,
        num_channels: int = 3,
        hidden_size: int = 192,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 3,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        class_token: bool = False,
        pooling: str = "avg",
        position_embedding: str = "sincos",
        drop_rate: float = 0.0,
        pos_drop_rate: float = 0.0,
        proj_drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        image_mean: tuple[float, ...] = CIFAR10_MEAN,
        image_std: tuple[float, ...] = CIFAR10_STD,
        attention_init: str = "impulse",
        impulse_kernel_size: int = 3,
        init_seed: int = 0,
        impulse_pseudo_input: Any = None,
        impulse_sharpness: Any = None,
        impulse_solver: Any = None,
        impulse_per_layer: Any = None,
        impulse_suppress_content: Any = None,
        impulse_patch_embed_scale: Any = None,
        impulse_value_init: Any = None,
        impulse_shift_order: str | None = None,
        impulse_qk_frobenius: float | None = None,
        impulse_position_scale: float | None = None,
        impulse_preset: str = "structinit",
        **kwargs: Any,
    ) -> None:
        for key in _DERIVED_KEYS:  # derived from the fields below on every save
            kwargs.pop(key, None)
        id2label, num_labels = kwargs.get("id2label"), kwargs.get("num_labels")
        if id2label is not None and num_labels is not None and len(id2label) != num_labels:
            raise ValueError(
                f"num_labels={num_labels} does not match id2label with {len(id2label)} labels; pass one of them "
                "(or both consistent), e.g. id2label=dict(enumerate(names))"
            )
        if id2label is None and num_labels is None:
            kwargs["num_labels"] = 10
        self.image_size = image_size if isinstance(image_size, int) else list(image_size)
        self.patch_size = patch_size if isinstance(patch_size, int) else list(patch_size)
        self.num_channels = num_channels
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.mlp_ratio = float(mlp_ratio)
        self.qkv_bias = qkv_bias
        self.class_token = class_token
        self.pooling = pooling
        self.position_embedding = position_embedding
        self.drop_rate = drop_rate
        self.pos_drop_rate = pos_drop_rate
        self.proj_drop_rate = proj_drop_rate
        self.attn_drop_rate = attn_drop_rate
        self.drop_path_rate = drop_path_rate
        self.image_mean = list(image_mean)
        self.image_std = list(image_std)
        self.attention_init = attention_init
        self.impulse_kernel_size = impulse_kernel_size
        self.init_seed = init_seed
        self.impulse_pseudo_input = impulse_pseudo_input
        self.impulse_sharpness = impulse_sharpness
        self.impulse_solver = impulse_solver
        self.impulse_per_layer = impulse_per_layer
        self.impulse_suppress_content = impulse_suppress_content
        self.impulse_patch_embed_scale = impulse_patch_embed_scale
        self.impulse_value_init = impulse_value_init
        self.impulse_shift_order = impulse_shift_order
        self.impulse_qk_frobenius = impulse_qk_frobenius
        self.impulse_position_scale = impulse_position_scale
        self.impulse_preset = impulse_preset
        super().__init__(**kwargs)
        self._check()

    def _check(self) -> None:
        """Reject configs that cannot build a network, before any model is constructed."""
        if self.attention_init not in ATTENTION_INITS:
            raise ValueError(
                f"unknown attention_init {self.attention_init!r}; expected one of {', '.join(ATTENTION_INITS)}"
            )
        if self.position_embedding not in POSITION_EMBEDDINGS:
            allowed = ", ".join(POSITION_EMBEDDINGS)
            raise ValueError(f"unknown position_embedding {self.position_embedding!r}; expected one of {allowed}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {self.pooling!r}; expected one of {', '.join(POOLINGS)}")
        if self.pooling == "token" and not self.class_token:
            raise ValueError("pooling='token' needs class_token=True")
        for name in ("num_channels", "hidden_size", "num_hidden_layers", "num_attention_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        sincos = self.position_embedding == "sincos"
        check_geometry(self.image_size, self.patch_size, self.hidden_size, self.num_attention_heads, sincos)
        if len(self.image_mean) != self.num_channels or len(self.image_std) != self.num_channels:
            raise ValueError(
                f"image_mean {self.image_mean} and image_std {self.image_std} need one value per channel "
                f"({self.num_channels})"
            )
        if self.attention_init == "impulse":
            if self.impulse_sharpness is not None and not 0.0 < self.impulse_sharpness < 1.0:
                raise ValueError(f"impulse_sharpness must be in (0, 1), got {self.impulse_sharpness}")
        try:  # the option values and the kernel's fit are checked by the package when it is installed
            from structinit_hf.impulse import validate_kernel_size
            from structinit_hf.init import ImpulseOptions
        except ImportError:
            return
        if self.attention_init == "impulse":
            validate_kernel_size(self.impulse_kernel_size, self.grid_size)
            ImpulseOptions(**self.init_options())

    @property
    def grid_size(self) -> tuple[int, int]:
        """The patch grid (rows, columns)."""
        return check_geometry(self.image_size, self.patch_size, self.hidden_size, self.num_attention_heads)

    @property
    def trains_position_code(self) -> bool:
        """Whether the position embedding trains: a learned one does, and so does the learned-style code the
        default impulse construction (and v2) write into a "sincos" slot; a fixed sin-cos code is frozen.
        Known once the init has run (it records its options), or when ``impulse_pseudo_input`` is given."""
        return self.position_embedding == "learn" or (
            self.attention_init == "impulse" and self.impulse_pseudo_input == "learned"
        )

    def record_impulse_options(self, options: Any) -> None:
        """Write the resolved impulse options (a ``structinit_hf.ImpulseOptions``) into the ``impulse_*`` fields."""
        for option, name in _IMPULSE_FIELDS.items():
            setattr(self, name, getattr(options, option))

    def init_options(self) -> dict[str, Any]:
        """Keyword options of ``structinit_hf.apply_structured_init`` for ``attention_init``."""
        if self.attention_init == "impulse":
            given = {option: getattr(self, field) for option, field in _IMPULSE_FIELDS.items()}
            return {option: value for option, value in given.items() if value is not None}
        if self.attention_init == "mimetic":
            return dict(seed=self.init_seed)
        return {}

    def timm_kwargs(self) -> dict[str, Any]:
        """``VisionTransformer`` keyword arguments of this architecture (without position embedding and classes)."""
        return dict(
            img_size=self.image_size if isinstance(self.image_size, int) else tuple(self.image_size),
            patch_size=self.patch_size if isinstance(self.patch_size, int) else tuple(self.patch_size),
            in_chans=self.num_channels,
            embed_dim=self.hidden_size,
            depth=self.num_hidden_layers,
            num_heads=self.num_attention_heads,
            mlp_ratio=self.mlp_ratio,
            qkv_bias=self.qkv_bias,
            class_token=self.class_token,
            global_pool=self.pooling,
            drop_rate=self.drop_rate,
            pos_drop_rate=self.pos_drop_rate,
            proj_drop_rate=self.proj_drop_rate,
            attn_drop_rate=self.attn_drop_rate,
            drop_path_rate=self.drop_path_rate,
        )

    def timm_config(self) -> dict[str, Any]:
        """The keys timm reads from ``config.json`` (``timm.create_model("local-dir:<folder>")``).

        ``architecture`` is a stock timm name and ``model_args`` the full architecture, so stock timm
        without structinit-hf rebuilds the network; ``structinit`` records how attention was initialized.
        """
        model_args = {k: v for k, v in self.timm_kwargs().items() if "drop" not in k}  # drop rates: runtime settings
        model_args["pos_embed"] = "none" if self.position_embedding == "none" else "learn"
        channels, (height, width) = self.num_channels, to_pair(self.image_size, "image_size")
        labels = [self.id2label[i] for i in range(self.num_labels)]
        return {
            "architecture": _STOCK_TIMM_NAMES.get(self.hidden_size, "vit_base_patch16_224"),
            "model_args": {k: list(v) if isinstance(v, tuple) else v for k, v in model_args.items()},
            "num_classes": self.num_labels,
            "num_features": self.hidden_size,
            "global_pool": self.pooling,
            "label_names": labels,
            "pretrained_cfg": {
                "input_size": [channels, height, width],
                "fixed_input_size": True,
                "interpolation": "bicubic",
                "crop_pct": 1.0,
                "crop_mode": "center",
                "mean": list(self.image_mean),
                "std": list(self.image_std),
                "num_classes": self.num_labels,
                "first_conv": "patch_embed.proj",
                "classifier": "head",
                "license": "apache-2.0",
                "paper_ids": "arXiv:2404.01139",
            },
            "structinit": dict(attention_init=self.attention_init, **self.init_options()),
        }

    def to_dict(self) -> dict[str, Any]:
        output = super().to_dict()
        output.update(self.timm_config(), image_processor_type="ViTImageProcessor")
        return output

    @classmethod
    def from_timm_name(cls, name: str, **overrides: Any) -> StructInitViTConfig:
        """The config of a registered timm name, e.g. ``from_timm_name("vit_tiny_impulse5", num_labels=100)``.

        ``overrides`` are config fields or the keywords ``timm.create_model(name, ...)`` takes
        (``img_size``, ``depth``, ``embed_dim``, ``num_heads``, ``num_classes``, ``kernel_size``, ``seed`` ...).
        """
        if name not in TIMM_VARIANTS:
            raise ValueError(f"unknown timm name {name!r}; expected one of {', '.join(TIMM_VARIANTS)}")
        parameters = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}
        unknown = sorted(set(overrides) - parameters - set(_TIMM_KWARGS) - {"num_labels", "id2label", "label2id"})
        if unknown:
            raise ValueError(
                f"unknown overrides {unknown} for {name}; expected config fields or timm.create_model keywords"
            )
        variant = TIMM_VARIANTS[name]
        data = dict(
            num_labels=variant.data["num_classes"], image_mean=variant.data["mean"], image_std=variant.data["std"]
        )
        fields = dict(data, **{_TIMM_KWARGS.get(key, key): value for key, value in variant.model_args.items()})
        if "id2label" in overrides:  # the labels given decide how many there are
            fields.pop("num_labels", None)
        for key, value in overrides.items():
            fields[_TIMM_KWARGS.get(key, key)] = tuple(value) if isinstance(value, list) else value
        return cls(**fields)
