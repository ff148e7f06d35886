"""What the registry's model files share: the CIFAR-10 data cfg, the geometry check, and the build steps every
registered name takes (its data cfg following ``img_size``, the early failure of ``pretrained=True`` without weights,
weights loaded whole or refused, the keywords kept out of an export's ``model_args``)."""

from __future__ import annotations

from numbers import Integral
from typing import Any

from huggingface_hub import is_offline_mode, try_to_load_from_cache
from huggingface_hub.errors import LocalEntryNotFoundError
from safetensors import safe_open
from timm.models import get_pretrained_cfg
from torch import nn

from ..init.common import to_pair

__all__ = [
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "NOT_NETWORK_ARGS",
    "StructuredInitMixin",
    "check_geometry",
    "cifar_cfg",
    "input_cfg",
    "pretrained_args",
    "require_hub_weights",
    "without_network_args",
]

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)


CIFAR10_STD = (0.2470, 0.2435, 0.2616)


# builder and runtime keywords that do not shape a network (kept out of an export's model_args)
NOT_NETWORK_ARGS = ("num_classes", "device", "dtype", "cache_dir", "pretrained_cfg", "features_only", "out_indices")


def cifar_cfg(url: str = "", **kwargs: Any) -> dict[str, Any]:
    """A registered name's pretrained cfg: the paper's CIFAR-10 setting unless ``kwargs`` say otherwise."""
    return {
        "url": url,
        "num_classes": 10,
        "input_size": (3, 32, 32),
        "pool_size": None,
        "crop_pct": 1.0,
        "interpolation": "bicubic",
        "fixed_input_size": True,
        "mean": CIFAR10_MEAN,
        "std": CIFAR10_STD,
        "first_conv": "patch_embed.proj",
        "classifier": "head",
        "license": "apache-2.0",
        "paper_ids": "arXiv:2404.01139",
        **kwargs,
    }


def input_cfg(model_args: dict[str, Any]) -> dict[str, Any]:
    """The data cfg's ``input_size``, following the network's ``img_size`` and ``in_chans``.

    ``num_classes`` stays the weights' own, as in timm's cfgs: timm's ``load_pretrained`` compares it with the
    requested ``num_classes`` to drop the checkpoint's head and keep the new one.
    """
    size = to_pair(model_args.get("img_size", 224), "img_size")
    return {"input_size": (model_args.get("in_chans", 3), *size)}


def pretrained_args(
    variant: str, pretrained: bool, model_args: dict[str, Any], filter_fn: Any = None
) -> dict[str, Any]:
    """``build_model_with_cfg``'s loading keywords for a registered name; pops ``pretrained_cfg_overlay``.

    The data cfg follows ``img_size``. A local file (``pretrained_cfg_overlay=dict(file=...)``) states its own class
    count, as a Hub cfg does, so timm keeps the file's head when ``num_classes`` asks for as many. Weights load whole
    or not at all: timm loads non-strictly once it drops a head, which would leave every tensor the file lacks (the
    blocks of a shallower run) at its random init without a word.
    """
    overlay = {**input_cfg(model_args), **(model_args.pop("pretrained_cfg_overlay", None) or {})}
    if not pretrained:
        return dict(pretrained_cfg_overlay=overlay)
    classifier = get_pretrained_cfg(variant).classifier
    if str(overlay.get("file", "")).endswith(".safetensors") and "num_classes" not in overlay:
        with safe_open(overlay["file"], "pt") as weights:
            if f"{classifier}.weight" in weights.keys():
                overlay["num_classes"] = weights.get_slice(f"{classifier}.weight").get_shape()[0]
    if not model_args.get("pretrained_strict", True):  # the caller asked for a partial load
        return dict(pretrained_cfg_overlay=overlay, pretrained_filter_fn=filter_fn)

    def load_whole(state_dict: dict[str, Any], model: nn.Module) -> dict[str, Any]:
        state_dict = filter_fn(state_dict, model) if filter_fn is not None else state_dict
        own = {k: v for k, v in model.state_dict().items() if not k.startswith(f"{classifier}.")}
        given = {k: v for k, v in state_dict.items() if not k.startswith(f"{classifier}.")}
        misfits = [
            (what, sorted(keys))
            for what, keys in (
                ("missing from the weights", own.keys() - given.keys()),
                ("not in the model", given.keys() - own.keys()),
                ("of another shape", {k for k in own.keys() & given.keys() if own[k].shape != given[k].shape}),
            )
            if keys
        ]
        if misfits:
            found = "; ".join(f"{len(keys)} tensors {what} ({keys[0]} ...)" for what, keys in misfits)
            raise ValueError(
                f"the weights are not the network {variant} builds with these keywords: {found}. Pass the keywords "
                "they were trained with (a run's final/config.json model_args), or load a run's folder whole with "
                "timm.create_model('local-dir:<folder>', pretrained=True)"
            )
        return state_dict

    return dict(pretrained_cfg_overlay=overlay, pretrained_filter_fn=load_whole)


def require_hub_weights(variant: str, pretrained: bool, kwargs: dict[str, Any]) -> None:
    """Fail early, naming what to pass, when ``pretrained=True`` has no weights to load.

    timm passes the tag of ``vit_tiny_impulse3.cifar10`` as ``pretrained_cfg="cifar10"``; that cfg's ``hf_hub_id``
    is downloaded online and read from the local cache offline (``HF_HUB_OFFLINE=1``).
    """
    if not pretrained or (kwargs.get("pretrained_cfg_overlay") or {}).get("file"):
        return
    tag = kwargs.get("pretrained_cfg")
    cfg = get_pretrained_cfg(f"{variant}.{tag}" if isinstance(tag, str) else variant)
    repo_id = getattr(cfg, "hf_hub_id", None)
    if not (repo_id or getattr(cfg, "url", None) or getattr(cfg, "file", None) or isinstance(tag, dict)):
        raise ValueError(
            f"{variant} has no published weights yet; pass pretrained=False, or a local file with "
            "pretrained_cfg_overlay=dict(file='model.safetensors')"
        )
    if repo_id and is_offline_mode() and not isinstance(try_to_load_from_cache(repo_id, "model.safetensors"), str):
        raise LocalEntryNotFoundError(
            f"{variant}.{tag} loads its weights from the Hub repo {repo_id}, but HF_HUB_OFFLINE is set and they are "
            "not in the local cache. Run once online to cache them, or pass a local copy with "
            "pretrained_cfg_overlay=dict(file='model.safetensors')."
        )


def check_geometry(
    image_size: int | tuple[int, int],
    patch_size: int | tuple[int, int],
    width: int,
    num_heads: int,
    sincos: bool = False,
) -> tuple[int, int]:
    """Check that the image splits into whole patches and the width into whole heads; return the patch grid.

    ``sincos``: the 2-D sin-cos position code also needs the width divisible by 4.  timm calls these
    ``img_size``, ``embed_dim``, ``num_heads``; the transformers config ``image_size``, ``hidden_size``,
    ``num_attention_heads``.
    """
    image, patch = to_pair(image_size, "img_size / image_size"), to_pair(patch_size, "patch_size")
    for name, value in (("embed_dim / hidden_size", width), ("num_heads / num_attention_heads", num_heads)):
        if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if any(i % p for i, p in zip(image, patch, strict=True)):
        raise ValueError(f"img_size / image_size {image} is not divisible by patch_size {patch}")
    if width % num_heads:
        raise ValueError(
            f"embed_dim / hidden_size {width} is not divisible by num_heads / num_attention_heads {num_heads}"
        )
    if sincos and width % 4:
        raise ValueError(f"a 2-D sin-cos position embedding needs embed_dim / hidden_size divisible by 4, got {width}")
    return image[0] // patch[0], image[1] // patch[1]


class InitAgainAfterTransformersRedraws:
    """The hook through which transformers' ``from_config`` ends with this package's init, not with transformers' own.

    timm calls ``init_non_persistent_buffers`` to rebuild what a checkpoint does not hold (its
    ``reinit_non_persistent_buffers``, after a load or a move); this package's models hold no such buffer of their own
    (timm's submodules rebuild theirs). transformers calls it too, by this name, from ``_init_weights``, right after
    re-drawing every ``nn.Linear`` of the model from N(0, initializer_range), which overwrites the attention init: then,
    and only then, the model's :meth:`init_weights` (timm's, then the named one) runs again, so ``from_config`` gives
    what ``timm.create_model`` gives. transformers' marks tell the two apart: it flags each layer it re-drew
    ``_is_hf_initialized``, and each tensor it loaded; timm flags nothing. A re-draw is answered once, so a later call
    (timm's, after training or a load) leaves the weights as they are. The init runs again rather than its first
    tensors being written back: timm's init re-draws the patch embedding from the global generator, and the ViT's
    content-suppressing solve (``suppress_content=True``) reads it."""

    def init_non_persistent_buffers(self) -> None:
        layers = [module for module in self.modules() if isinstance(module, nn.Linear)]
        redrawn = bool(layers) and all(getattr(module, "_is_hf_initialized", False) for module in layers)
        loaded = any(getattr(t, "_is_hf_initialized", False) for t in (*self.parameters(), *self.buffers()))
        if redrawn and not loaded and not getattr(self, "_answered_redraw", False):
            self.init_weights()
        self._answered_redraw = redrawn


class StructuredInitMixin(InitAgainAfterTransformersRedraws):
    """What this package's Swin and Mixer classes add to timm's: a named init run after timm's own, skipped on the
    meta device, with its record (``structinit_settings``) and what exports need (``network_args``).

    The class sets ``family`` (``"swin"`` or ``"mixer"``); ``__init__`` calls :meth:`_setup_structured_init` with
    the keywords it was given before handing the rest to timm's class.
    """

    family = "vit"
    structinit_settings = None  # the init's record (a dict); None where nothing ran (meta device, loaded weights)

    @classmethod
    def pop_init(cls, kwargs: dict[str, Any], attention_init: str) -> dict[str, Any]:
        """Take this family's init options out of ``kwargs``; return the validated settings (defaults filled in)."""
        from ..init.options import family_options, init_settings

        options = {name: kwargs.pop(name) for name in family_options(cls.family) if name in kwargs}
        return init_settings(attention_init, options, cls.family if attention_init != "default" else "vit")

    def _run_structured_init(self) -> None:
        """The named init on the weights timm just drew, and its record; nothing on the meta device."""
        from ..init.apply import apply_structured_init

        if any(p.is_meta for p in self.parameters()):  # an empty skeleton to load weights into: nothing to write
            self.structinit_settings = None
            return
        options = {k: v for k, v in self._settings.items() if k not in ("attention_init", "family")}
        apply_structured_init(self, self.attention_init, **options)
        self.structinit_settings = dict(self._settings)
        if getattr(self, "structinit_shifts", None) is not None and self.attention_init == "impulse":
            self.structinit_settings["shifts"] = self.structinit_shifts


def without_network_args(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The builder keywords that shape the network (what an export's ``model_args`` keeps)."""
    return {k: v for k, v in kwargs.items() if k not in NOT_NETWORK_ARGS}
