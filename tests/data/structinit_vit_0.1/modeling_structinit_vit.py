"""StructInitViT for transformers: timm's ``VisionTransformer`` behind the transformers Auto classes.

The network is the one the timm route builds (``structinit_hf.timm_models.create_structinit_vit``),
kept under ``timm_model``; checkpoints store timm's own state-dict keys, so one ``model.safetensors``
loads in timm and in transformers.  The structured attention init runs once, when a new model is
built (``Model(config)`` / ``from_config``); ``from_pretrained`` builds an empty skeleton on the meta
device, loads the weights into it and never runs the solver.

This module is also saved next to every checkpoint as remote code (``trust_remote_code=True``): it
imports timm and transformers only.  structinit-hf is needed just to build a new model, and is
imported lazily inside a ``try`` block (which transformers' remote-code import check skips).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors import safe_open
from timm.models.vision_transformer import VisionTransformer, init_weights_vit_timm
from timm.utils import AttentionExtract
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput

from .configuration_structinit_vit import StructInitViTConfig

__all__ = [
    "ATTENTION_MODULES",
    "StructInitViTForImageClassification",
    "StructInitViTModel",
    "StructInitViTPreTrainedModel",
    "extract_attention",
]

TIMM_PREFIX = "timm_model."
WEIGHTS_NAME = "model.safetensors"
_REMOTE_MODULE = __name__.rsplit(".", 1)[-1]  # the file's name next to a saved checkpoint


def _structinit_hf() -> Any:
    """The structinit_hf package, needed only to build (and initialize) a new model."""
    try:
        import structinit_hf.init
        import structinit_hf.timm_models
    except ImportError as error:
        raise ImportError(
            "Building a new StructInitViT (with its structured attention init) needs the structinit-hf package: "
            "`pip install structinit-hf`. Loading saved weights with from_pretrained does not."
        ) from error
    return structinit_hf


def _build_vit(config: StructInitViTConfig, num_classes: int) -> VisionTransformer:
    """timm's network for ``config``; the weights of a new model get timm's init, attention is solved later."""
    kwargs = dict(config.timm_kwargs(), num_classes=num_classes)
    if torch.empty(0).is_meta:  # from_pretrained: an empty skeleton the checkpoint is loaded into, no init needed
        pos_embed = "none" if config.position_embedding == "none" else "learn"
        model = VisionTransformer(pos_embed=pos_embed, weight_init="skip", **kwargs)
    else:
        model = _structinit_hf().timm_models.create_structinit_vit(
            "vit_tiny_impulse3",  # only names the pretrained-cfg template; the overlay below makes it this config's
            attention_init="default",  # the structured init runs in `initialize_weights`, never on loading
            pos_embed=config.position_embedding,
            pretrained_cfg_overlay=dict(
                mean=tuple(config.image_mean), std=tuple(config.image_std), num_classes=num_classes
            ),
            **kwargs,
        )
    if config.position_embedding == "sincos":
        model.pos_embed.requires_grad_(config.trains_position_code)  # a fixed sin-cos code is a frozen parameter
    return model


def _check_weight_shapes(path: Path, config: StructInitViTConfig, num_classes: int) -> None:
    """Raise ``ValueError`` naming ``path`` if its tensors do not have the shapes ``config`` builds."""
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in _build_vit(config, num_classes).state_dict().items()}
    with safe_open(path, framework="pt") as weights:
        found = {k: tuple(weights.get_slice(k).get_shape()) for k in weights.keys()}
    wrong = [
        f"{k}: {found[k]} in the file, {expected[k]} for the config"
        for k in expected
        if k in found and found[k] != expected[k]
    ]
    if wrong:
        raise ValueError(
            f"{path} does not fit its config ({len(wrong)} tensors of the wrong shape: {'; '.join(wrong[:3])}"
            f"{' ...' if len(wrong) > 3 else ''}); pass ignore_mismatched_sizes=True to re-initialize them"
        )


# where timm's ViT and ConViT blocks (GPSA included) pass each attention map through dropout
ATTENTION_MODULES = ["blocks.*.attn.attn_drop"]


@contextmanager
def extract_attention(model: nn.Module) -> Iterator[AttentionExtract]:
    """timm's ``AttentionExtract`` hooked on every block's attention map of ``model`` (a timm ViT or ConViT).

    Inside the block, each forward of ``model`` leaves the maps (``B x heads x T x T``, in block order) for
    ``extractor.hooks.get_output(device)``; calling ``extractor(images)`` runs a forward and returns them.
    Fused attention never materializes the maps, so it is off meanwhile; ``model`` keeps its train/eval
    mode, and the hooks are removed on exit.  This is the one attention reader of the package (plots,
    init checks and ``output_attentions`` all go through it); it lives here because this file must run
    as remote code, without structinit-hf.
    """
    fused = [(module, module.fused_attn) for module in model.modules() if hasattr(module, "fused_attn")]
    for module, _ in fused:
        module.fused_attn = False
    mode = "train" if model.training else "eval"
    extractor = AttentionExtract(model, names=ATTENTION_MODULES, method="hook", mode=mode)
    try:
        yield extractor
    finally:
        for handle in extractor.hooks._handles:  # timm's FeatureHooks keeps the handles but offers no removal
            handle.remove()
        for module, value in fused:
            module.fused_attn = value


@contextmanager
def _record(model: VisionTransformer, attentions: bool, hidden_states: bool) -> Iterator[dict[str, list[torch.Tensor]]]:
    """Collect each block's attention map and input/output tokens during one forward of ``model``.

    The maps are those of that very forward (after dropout, as transformers' ViT returns them).
    """
    record: dict[str, list[torch.Tensor]] = {"attentions": [], "hidden_states": []}
    hooks = []
    try:
        if hidden_states:  # the tokens entering the first block, then every block's output
            hooks.append(
                model.blocks[0].register_forward_pre_hook(lambda _m, args: record["hidden_states"].append(args[0]))
            )
            for block in model.blocks:
                hooks.append(block.register_forward_hook(lambda _m, _args, out: record["hidden_states"].append(out)))
        if attentions:
            with extract_attention(model) as extractor:
                yield record
                record["attentions"] = list(extractor.hooks.get_output(next(model.parameters()).device).values())
        else:
            yield record
    finally:
        for hook in hooks:
            hook.remove()


class StructInitViTPreTrainedModel(PreTrainedModel):
    """Weight handling shared by the StructInitViT models: timm keys on disk, init only when built new."""

    config_class = StructInitViTConfig
    base_model_prefix = "timm_model"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    accepts_loss_kwargs = False
    with_classifier: ClassVar[bool]  # whether timm's classifier head is built (num_labels outputs)

    def __init__(self, config: StructInitViTConfig) -> None:
        super().__init__(config)
        self.timm_model = _build_vit(config, self._num_classes(config))
        self._built_for_loading = self.timm_model.patch_embed.proj.weight.is_meta
        self.post_init()

    @torch.no_grad()
    def initialize_weights(self) -> None:
        """transformers' init pass, plus the structured attention init on a newly built model.

        A new model has timm's init from construction; the pass only (re)initializes what a
        checkpoint did not provide.  The solver runs when the model was built new and nothing was
        loaded into it, so ``from_pretrained`` (meta skeleton, then loaded) never runs it.
        """
        super().initialize_weights()
        loaded = any(getattr(p, "_is_hf_initialized", False) for p in self.timm_model.parameters())
        if not self._built_for_loading and not loaded:
            package, options = _structinit_hf(), self.config.init_options()
            package.init.apply_structured_init(self.timm_model, self.config.attention_init, **options)
            if self.config.attention_init == "impulse":  # record what the preset and defaults resolved to
                self.config.record_impulse_options(package.init.ImpulseOptions(**options))
        if self.config.position_embedding == "sincos":  # transformers' loader does not keep requires_grad
            self.timm_model.pos_embed.requires_grad_(self.config.trains_position_code)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Give parameters a checkpoint did not provide timm's init (a new model has it from construction)."""
        own = dict(module.named_parameters(recurse=False))
        loaded = {n: p.detach().clone() for n, p in own.items() if getattr(p, "_is_hf_initialized", False)}
        if not self._built_for_loading or len(loaded) == len(own):
            return
        if module is self.timm_model:
            if module.pos_embed is not None and "pos_embed" not in loaded:
                nn.init.trunc_normal_(module.pos_embed, std=0.02)  # a learned embedding's init; sin-cos is always saved
            for token in ("cls_token", "reg_token"):
                if getattr(module, token, None) is not None and token not in loaded:
                    nn.init.normal_(getattr(module, token), std=1e-6)
        else:
            init_weights_vit_timm(module)  # Linear: truncated normal and zero bias; others: their reset_parameters
        for name, value in loaded.items():
            own[name].copy_(value)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *model_args: Any, **kwargs: Any) -> Any:
        """transformers' ``from_pretrained``; a local checkpoint whose weights do not fit its config fails
        up front with a ``ValueError`` naming the file (unless ``ignore_mismatched_sizes=True``)."""
        folder = Path(pretrained_model_name_or_path, kwargs.get("subfolder", ""))
        if (folder / WEIGHTS_NAME).is_file() and not kwargs.get("ignore_mismatched_sizes", False):
            config = kwargs.get("config")
            if not isinstance(config, StructInitViTConfig):
                labels = {k: kwargs[k] for k in ("num_labels", "id2label", "label2id") if k in kwargs}
                config = StructInitViTConfig.from_pretrained(folder, **labels)
            _check_weight_shapes(folder / WEIGHTS_NAME, config, cls._num_classes(config))
        return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)

    @classmethod
    def _num_classes(cls, config: StructInitViTConfig) -> int:
        return config.num_labels if cls.with_classifier else 0

    def load_state_dict(self, state_dict: dict[str, torch.Tensor], *args: Any, **kwargs: Any) -> Any:
        """Accept timm's keys (what ``model.safetensors`` holds) as well as this module's own."""
        state_dict = {k if k.startswith(TIMM_PREFIX) else TIMM_PREFIX + k: v for k, v in state_dict.items()}
        return super().load_state_dict(state_dict, *args, **kwargs)

    def save_pretrained(
        self,
        save_directory: str | os.PathLike,
        *args: Any,
        state_dict: dict[str, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> None:
        """Save with timm's state-dict keys, so ``timm.create_model("local-dir:...")`` loads the same file."""
        state_dict = self.state_dict() if state_dict is None else state_dict
        state_dict = {k.removeprefix(TIMM_PREFIX): v for k, v in state_dict.items()}
        if self._auto_class is not None:  # one modeling file serves both Auto classes
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoModel": f"{_REMOTE_MODULE}.StructInitViTModel",
                "AutoModelForImageClassification": f"{_REMOTE_MODULE}.StructInitViTForImageClassification",
            }
        super().save_pretrained(save_directory, *args, state_dict=state_dict, **kwargs)

    def _set_gradient_checkpointing(self, enable: bool = True, *args: Any, **kwargs: Any) -> None:
        self.timm_model.set_grad_checkpointing(enable)

    def _flags(
        self, output_attentions: bool | None, output_hidden_states: bool | None, return_dict: bool | None
    ) -> tuple[bool, bool, bool]:
        return (
            self.config.output_attentions if output_attentions is None else output_attentions,
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states,
            self.config.return_dict if return_dict is None else return_dict,
        )


class StructInitViTModel(StructInitViTPreTrainedModel):
    """The StructInitViT encoder: token features and the pooled feature vector, no classifier."""

    with_classifier = False

    def forward(
        self,
        pixel_values: torch.Tensor,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutputWithPooling | tuple[torch.Tensor, ...]:
        """``last_hidden_state`` (B x T x D, after the final norm) and ``pooler_output`` (B x D)."""
        output_attentions, output_hidden_states, return_dict = self._flags(
            output_attentions, output_hidden_states, return_dict
        )
        with _record(self.timm_model, output_attentions, output_hidden_states) as record:
            tokens = self.timm_model.forward_features(pixel_values.to(self.dtype))
        pooled = self.timm_model.forward_head(tokens, pre_logits=True)
        attentions = tuple(record["attentions"]) if output_attentions else None
        hidden_states = tuple(record["hidden_states"]) if output_hidden_states else None
        if not return_dict:
            return tuple(v for v in (tokens, pooled, hidden_states, attentions) if v is not None)
        return BaseModelOutputWithPooling(
            last_hidden_state=tokens, pooler_output=pooled, hidden_states=hidden_states, attentions=attentions
        )


class StructInitViTForImageClassification(StructInitViTPreTrainedModel):
    """StructInitViT with timm's classifier head; returns ``ImageClassifierOutput`` (with ``loss`` given labels)."""

    with_classifier = True

    def forward(
        self,
        pixel_values: torch.Tensor,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> ImageClassifierOutput | tuple[torch.Tensor, ...]:
        """Logits (B x num_labels); ``attentions`` holds each block's softmax maps when asked for."""
        output_attentions, output_hidden_states, return_dict = self._flags(
            output_attentions, output_hidden_states, return_dict
        )
        with _record(self.timm_model, output_attentions, output_hidden_states) as record:
            logits = self.timm_model(pixel_values.to(self.dtype))
        loss = self.loss_function(labels, logits, self.config) if labels is not None else None
        attentions = tuple(record["attentions"]) if output_attentions else None
        hidden_states = tuple(record["hidden_states"]) if output_hidden_states else None
        if not return_dict:
            return tuple(v for v in (loss, logits, hidden_states, attentions) if v is not None)
        return ImageClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states, attentions=attentions)
