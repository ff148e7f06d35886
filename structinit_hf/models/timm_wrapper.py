"""The transformers route: transformers' own timm wrapper, reaching this package's names; and the checkpoint format.

Every folder a model of this package is saved to (``save_pretrained``, ``Trainer.save_model``, ``push_to_hub``,
:func:`save_checkpoint`) is a stock ``timm_wrapper`` folder, as timm's own Hub checkpoints are: it loads in stock
transformers and stock timm without this package, and ``AutoImageProcessor`` / ``pipeline`` read it from the folder
alone. ``config.json`` (:func:`stock_timm_config`) names a stock timm architecture with the ``model_args`` that
rebuild the network, its data cfg (``pretrained_cfg``) and the init the model started from (``structinit``);
``model.safetensors`` has timm's state-dict keys.

With ``structinit_hf`` imported, ``TimmWrapperConfig(architecture="vit_tiny_impulse3", model_args={...})`` builds
the model through ``AutoModelForImageClassification.from_config`` and keeps its init: transformers re-draws every
``nn.Linear`` after construction, then calls the timm model's ``init_non_persistent_buffers()``, which runs the
model's own init again (``StructInitVisionTransformer`` in :mod:`structinit_hf.models.structinit_vit`).
``from_pretrained`` builds on the meta device, where no init runs, and loads the weights.

:class:`StructInitViTConfig` is that config under this package's ``model_type`` (``structinit_vit``), defaulting to
``vit_tiny_impulse3``; it also reads older ``structinit_vit`` folders, whose ``config.json`` already names a stock
timm architecture. Its models save under :func:`stock_timm_config`: a ``timm_wrapper`` config naming a stock timm
architecture with the ``model_args`` that rebuild the network, timm's pretrained cfg (data cfg, ``num_classes``,
``classifier``) and the init the model started from (``structinit``).
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import tempfile
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from timm.models import filter_pretrained_cfg, is_model, is_model_in_modules, model_entrypoint, save_for_hf
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForImageClassification,
    TimmWrapperConfig,
    TimmWrapperForImageClassification,
    TimmWrapperModel,
    TimmWrapperPreTrainedModel,
)

from ..atomic import replace_folder, write_json
from ..init.options import FAMILIES, IMPULSE_KWARGS, family_options

__all__ = [
    "StructInitViTConfig",
    "StructInitViTForImageClassification",
    "StructInitViTModel",
    "checkpoint_init_record",
    "save_checkpoint",
    "stock_timm_config",
    "write_checkpoint",
]

# pretrained cfg keys of the registered name, not of the saved weights (timm's filter drops the download sources)
_NAME_KEYS = ("architecture", "tag", "state_dict")


PACKAGE_MODEL_MODULES = ("structinit_vit", "structinit_swin", "structinit_mixer", "convit_baseline")  # our timm names


class StructInitViTConfig(TimmWrapperConfig):
    r"""transformers' ``TimmWrapperConfig`` for this package's registered timm names.

    architecture (`str`, *optional*, defaults to `"vit_tiny_impulse3"`):
        A timm name; any of ``timm.list_models("vit_*impulse*")``, ``vit_tiny_mimetic``, ``vit_tiny_patch2_32``. Left
        out, 0.1's init fields (``attention_init``, ``impulse_kernel_size``) choose the ViT-Tiny that has that init;
        given, a field that contradicts the init the name sets (``vit_tiny_impulse3`` with ``attention_init="mimetic"``
        or ``impulse_kernel_size=5``) is refused.
    model_args (`dict[str, Any]`, *optional*):
        Keywords for ``timm.create_model``: geometry (``img_size``, ``depth`` ...) and init options (``kernel_size``,
        ``seed``, ``preset`` ...), as in ``timm.create_model(architecture, **model_args)``.

    ``AutoModelForImageClassification.from_config(StructInitViTConfig(...))`` runs the init once per model, as
    ``timm.create_model`` does. It describes how to build and initialize a model; a saved model is described by
    :func:`stock_timm_config` instead (the trained network is a stock timm ViT).
    """

    model_type = "structinit_vit"

    architecture: str = ""  # not given: vit_tiny_impulse3, or the ViT-Tiny 0.1's init fields name

    def __post_init__(self, **kwargs: Any) -> None:
        """Build what 0.1's fields asked for (its ``StructInitViTConfig(attention_init="impulse",
        impulse_kernel_size=5)`` built a 5x5 impulse model): on this package's names they become ``model_args`` and,
        with no ``architecture`` given, the registered name of the init; on a stock timm architecture (0.1's saved
        folders name one, with the ``model_args`` that rebuild the weights) they stay the record of the init the
        weights started from."""
        release_0_1 = {name: kwargs.pop(name) for name in list(kwargs) if name in _RELEASE_0_1_FIELDS}
        given = self.architecture or None
        self.architecture = given or DEFAULT_ARCHITECTURE
        if release_0_1 and is_model_in_modules(self.architecture, ["structinit_vit"]):
            model_args = dict(self.model_args or {})
            for name, value in release_0_1.items():
                keyword = _RELEASE_0_1_FIELDS[name]
                if value is None:  # 0.1's "the preset's value"
                    continue
                if model_args.get(keyword, value) != value:
                    raise ValueError(
                        f"StructInitViTConfig: {name}={value!r} (0.1's name for the timm keyword {keyword!r}) "
                        f"contradicts model_args {keyword}={model_args[keyword]!r}; pass model_args alone"
                    )
                model_args[keyword] = value
            self.model_args = model_args
            init = {
                name: value
                for name, value in release_0_1.items()
                if _RELEASE_0_1_FIELDS[name] in _NAME_INIT and value is not None
            }
            if given is None and init:  # 0.1's fields name the model
                self.architecture = _registered_tiny_name({"attention_init": "impulse", **model_args})
            elif init:
                _check_name_init(given, init)
        else:
            kwargs.update(release_0_1)
        _refuse_init_on_stock(self.architecture, self.model_args or {})
        super().__post_init__(**kwargs)


DEFAULT_ARCHITECTURE = "vit_tiny_impulse3"


def _refuse_init_on_stock(architecture: str, model_args: dict[str, Any]) -> None:
    """Refuse init keywords in ``model_args`` for a timm name of timm's own, which would end in timm's ``TypeError``:
    only this package's names build with them; the route for timm's own is named."""
    if not is_model(architecture) or is_model_in_modules(architecture, list(PACKAGE_MODEL_MODULES)):
        return
    options = {"attention_init", *(name for family in FAMILIES for name in family_options(family))}
    given = [name for name in model_args if name in options]
    if given:
        words = " ".join(f"{name}={model_args[name]!r}" for name in given)
        raise ValueError(
            f"StructInitViTConfig(architecture={architecture!r}): model_args {words} are init options, which only "
            f"this package's timm names build with (timm.list_models('*impulse*')); for timm's own {architecture}, "
            "run structinit_hf.apply_structured_init on timm.create_model(...) and save it with "
            "structinit_hf.save_checkpoint (docs/transformers.md)"
        )


_NAME_INIT = ("attention_init", "kernel_size")  # the init keywords a registered name sets (vit_tiny_impulse3)


def _check_name_init(architecture: str, fields: dict[str, Any]) -> None:
    """Refuse 0.1's init ``fields`` (``attention_init``, ``impulse_kernel_size``) where the registered
    ``architecture`` sets that keyword itself to another value (its entrypoint's ``model_args = dict(...)``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(model_entrypoint(architecture))))
    preset = next(
        {word.arg: ast.literal_eval(word.value) for word in node.value.keywords if word.arg in _NAME_INIT}
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and [getattr(target, "id", None) for target in node.targets] == ["model_args"]
    )
    for name, value in fields.items():
        keyword = _RELEASE_0_1_FIELDS[name]
        if keyword in preset and preset[keyword] != value:
            asked = _registered_tiny_name({**preset, **{_RELEASE_0_1_FIELDS[n]: v for n, v in fields.items()}})
            raise ValueError(
                f"StructInitViTConfig: {name}={value!r} contradicts architecture={architecture!r}, which sets "
                f"{keyword}={preset[keyword]!r}; pass an architecture that builds it (the ViT-Tiny: {asked!r}) or "
                f"leave {name} out"
            )


# 0.1's config fields -> the timm.create_model keyword each one is now (0.1 described the model by these fields)
_RELEASE_0_1_FIELDS = {
    "attention_init": "attention_init",
    "impulse_kernel_size": "kernel_size",
    "init_seed": "seed",
    **{f"impulse_{name}": name for name in IMPULSE_KWARGS if name not in ("kernel_size", "seed")},
    "image_size": "img_size",
    "num_channels": "in_chans",
    "hidden_size": "embed_dim",
    "num_hidden_layers": "depth",
    "num_attention_heads": "num_heads",
    "pooling": "global_pool",
    "position_embedding": "pos_embed",
    **{name: name for name in ("patch_size", "mlp_ratio", "qkv_bias", "class_token", "drop_path_rate")},
    **{name: name for name in ("drop_rate", "pos_drop_rate", "proj_drop_rate", "attn_drop_rate")},
}


def _registered_tiny_name(model_args: dict[str, Any]) -> str:
    """The registered ViT-Tiny (0.1's default geometry: 32 px, patch 2) of the init ``model_args`` name."""
    init = model_args["attention_init"]
    name = {"mimetic": "vit_tiny_mimetic", "default": "vit_tiny_patch2_32"}.get(init)
    impulse = f"vit_tiny_impulse{model_args.get('kernel_size', 3)}"
    return name or (impulse if is_model(impulse) else "vit_tiny_impulse3")


class _StructInitViTMixin:
    """What the two model classes add to transformers' timm wrapper.

    The patch embedding is the input embedding (transformers' ViT says the same), so PEFT and
    ``enable_input_require_grads`` reach it; ``save_pretrained`` (and with it ``Trainer.save_model`` and
    ``push_to_hub``) writes the stock ``timm_wrapper`` folder of :func:`stock_timm_config`.
    """

    def get_input_embeddings(self) -> nn.Module:
        return self.timm_model.patch_embed

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.timm_model.patch_embed = value

    def save_pretrained(self, save_directory: str | os.PathLike, *args, state_dict=None, **kwargs):
        """transformers' ``save_pretrained`` under the stock config, with timm's state-dict keys (no ``timm_model.``
        prefix, as :func:`save_checkpoint` writes them): stock transformers and stock timm load
        the folder without this package."""
        state_dict = self.timm_model.state_dict() if state_dict is None else state_dict
        state_dict = {key.removeprefix(f"{self.base_model_prefix}."): value for key, value in state_dict.items()}
        if hasattr(self.timm_model, "network_args"):
            labels = [str(self.config.id2label[i]) for i in range(self.timm_model.num_classes)] or None
            stock = stock_timm_config(self.timm_model, labels)
        else:  # a stock timm network already (loaded from a stock folder): its config under the stock model_type
            stock = TimmWrapperConfig.from_dict({**self.config.to_dict(), "model_type": TimmWrapperConfig.model_type})
        built_with, self.config = self.config, stock
        try:
            return super().save_pretrained(save_directory, *args, state_dict=state_dict, **kwargs)
        finally:
            self.config = built_with


class StructInitViTModel(_StructInitViTMixin, TimmWrapperModel):
    """``TimmWrapperModel`` for :class:`StructInitViTConfig` (features, no classifier)."""

    config_class = StructInitViTConfig


class StructInitViTForImageClassification(_StructInitViTMixin, TimmWrapperForImageClassification):
    """``TimmWrapperForImageClassification`` for :class:`StructInitViTConfig`."""

    config_class = StructInitViTConfig


AutoConfig.register(StructInitViTConfig.model_type, StructInitViTConfig, exist_ok=True)


AutoModel.register(StructInitViTConfig, StructInitViTModel, exist_ok=True)


AutoModelForImageClassification.register(StructInitViTConfig, StructInitViTForImageClassification, exist_ok=True)


def stock_timm_config(model: nn.Module, label_names: list[str] | None = None) -> TimmWrapperConfig:
    """A stock ``timm_wrapper`` config for a model of this package: a stock timm architecture and the
    ``model_args`` that rebuild ``model``'s network, timm's pretrained cfg of the saved weights (data cfg,
    ``num_classes`` and ``classifier``, so timm's loader can swap the head for another class count), and the init it
    started from (``structinit``).
    """
    network_args = getattr(model, "network_args", None)
    if network_args is None:
        raise TypeError(
            f"expected a model built by one of this package's timm names (timm.create_model('vit_tiny_impulse3')), "
            f"got {type(model).__name__}"
        )
    labels = list(label_names) if label_names is not None else [f"LABEL_{i}" for i in range(model.num_classes)]
    if len(labels) != model.num_classes or len(set(labels)) != len(labels):
        raise ValueError(f"label_names must be {model.num_classes} unique names, got {labels}")
    cfg = filter_pretrained_cfg(model.pretrained_cfg, remove_source=True)
    cfg = {k: v for k, v in cfg.items() if k not in _NAME_KEYS}
    return TimmWrapperConfig(
        architecture=model.stock_architecture,
        model_args=dict(network_args),
        num_labels=model.num_classes,
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
        label_names=labels,
        global_pool=model.global_pool,
        num_features=model.num_features,
        pretrained_cfg={**cfg, "classifier": cfg.get("classifier", "head"), "num_classes": model.num_classes},
        structinit=dict(getattr(model, "structinit_settings", None) or {}),
    )


def save_checkpoint(
    model: torch.nn.Module, out_dir: str | os.PathLike, *, label_names: Sequence[str] | None = None
) -> Path:
    """Save ``model`` to ``out_dir`` and return the folder.

    ``model`` is a timm model (built by one of this package's names, or by timm's own and given an init with
    :func:`~structinit_hf.apply_structured_init`), or a transformers ``TimmWrapper`` model around one. One of this
    package's is saved under a stock timm name (:func:`stock_timm_config`), timm's own in timm's format
    (``save_for_hf``); ``config.json`` records the init in ``structinit`` (:func:`checkpoint_init_record`). The folder loads with
    ``timm.create_model("local-dir:<out_dir>", pretrained=True)``, ``AutoModelForImageClassification.from_pretrained(
    out_dir)`` and ``pipeline("image-classification", out_dir)``, none of which needs structinit_hf or
    ``trust_remote_code``. ``label_names`` (one per class) become the model's
    ``id2label``. The folder is written beside ``out_dir`` and moved into place when complete, so an existing
    checkpoint is never left half-replaced.
    """
    return replace_folder(out_dir, lambda folder: write_checkpoint(model, folder, label_names=label_names))


def write_checkpoint(
    model: torch.nn.Module,
    folder: str | os.PathLike,
    *,
    label_names: Sequence[str] | None = None,
    extra_config: dict[str, Any] | None = None,
) -> None:
    """Write :func:`save_checkpoint`'s files into the existing ``folder`` (no atomic swap: the caller's job), with
    ``extra_config``'s fields added to (or replacing) the config's."""
    timm_model = model.timm_model if isinstance(model, TimmWrapperPreTrainedModel) else model
    if getattr(timm_model, "network_args", None) is None:  # a network of timm's own: timm's format
        record = {"structinit": checkpoint_init_record(timm_model), **(extra_config or {})}
        _write_timm_folder(timm_model, Path(folder), label_names, record)
        return
    config = stock_timm_config(timm_model, None if label_names is None else [str(name) for name in label_names])
    if is_model_in_modules(config.architecture, list(PACKAGE_MODEL_MODULES)):  # a Mixer geometry timm has no name for
        warnings.warn(
            f"saving {type(timm_model).__name__} as {config.architecture!r}, a name only structinit_hf registers "
            "(timm has no stock name for this geometry): stock timm cannot load the folder by name, nor transformers "
            "without structinit_hf imported; see docs/transformers.md (MLP-Mixer folders)",
            UserWarning,
            stacklevel=2,
        )
    config.update(extra_config or {})
    config.save_pretrained(folder)
    state = {key: value.detach().contiguous() for key, value in timm_model.state_dict().items()}
    save_file(state, Path(folder) / "model.safetensors", metadata={"format": "pt"})


def checkpoint_init_record(model: nn.Module) -> dict[str, Any]:
    """The init ``model`` started from, for ``config.json``'s ``structinit``: its full record where one was kept
    (``structinit_settings``: this package's names, ``train``'s ``--model-kwargs attention_init=...``), else what
    :func:`~structinit_hf.apply_structured_init` left on it (the shifts of an impulse, the family defaults it applied);
    ``{}`` for a model no init ran on."""
    settings = getattr(model, "structinit_settings", None)
    if settings:
        return dict(settings)
    shifts, defaults = getattr(model, "structinit_shifts", None), getattr(model, "structinit_defaults", None) or {}
    return {"attention_init": "impulse", **defaults, "shifts": shifts} if shifts else dict(defaults)


def _write_timm_folder(
    model: nn.Module, folder: Path, label_names: Sequence[str] | None, extra_config: dict[str, Any]
) -> None:
    """timm's ``save_for_hf`` folder (``model.safetensors`` + ``config.json``) for a network of timm's own, loadable by
    transformers' ``TimmWrapper`` too: ``num_classes`` leaves ``model_args`` (the wrapper passes it itself, and twice
    is an error), and ``extra_config``'s fields join the config."""
    if not hasattr(model, "pretrained_cfg"):
        raise TypeError(
            f"save_checkpoint takes a timm model (or a transformers TimmWrapper model around one), got "
            f"{type(model).__name__}; save a transformers model with its save_pretrained"
        )
    labels = [str(name) for name in label_names] if label_names is not None else None
    if labels is not None and (len(labels) != model.num_classes or len(set(labels)) != len(labels)):
        raise ValueError(f"label_names must be {model.num_classes} unique names, got {labels}")
    folder.mkdir(parents=True, exist_ok=True)  # as save_for_hf does
    with tempfile.TemporaryDirectory(dir=folder) as scratch:  # on the folder's disk: the weights move, not copy
        save_for_hf(model, scratch, model_config={"label_names": labels} if labels else None, safe_serialization=True)
        (Path(scratch) / "model.safetensors").replace(folder / "model.safetensors")
        config = json.loads((Path(scratch) / "config.json").read_text())
    config.get("model_args", {}).pop("num_classes", None)
    write_json(folder / "config.json", {**config, **extra_config})
