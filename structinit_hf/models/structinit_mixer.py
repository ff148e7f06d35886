"""timm model registry: MLP-Mixers whose only difference is how token mixing starts.

:class:`StructInitMlpMixer` is timm's ``MlpMixer`` with a named init run after timm's: ``"impulse"`` makes every
block's token MLP act as a shift of the token grid (:class:`~structinit_hf.init.options.MixerImpulseOptions`). One
builder, one cfg table, one short function per name, beside timm's ``mixer_s16_224``. A checkpoint has stock timm's
keys; its export names the stock Mixer of the same patch size, depth and width where timm has one
(``mixer_s16_224`` ...), and otherwise this package's control name of the family (timm's Mixer builders fix those
three keywords, so no stock name rebuilds another geometry).
"""

from __future__ import annotations

from typing import Any

from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.mlp_mixer import MlpMixer, checkpoint_filter_fn

from .common import StructuredInitMixin, cifar_cfg, pretrained_args, require_hub_weights, without_network_args

__all__ = ["STOCK_MIXERS", "StructInitMlpMixer", "default_cfgs"]  # @register_model adds each name

# timm's Mixer names by the (patch_size, num_blocks, embed_dim) their builders fix
STOCK_MIXERS = {
    (32, 8, 512): "mixer_s32_224",
    (16, 8, 512): "mixer_s16_224",
    (32, 12, 768): "mixer_b32_224",
    (16, 12, 768): "mixer_b16_224",
    (32, 24, 1024): "mixer_l32_224",
    (16, 24, 1024): "mixer_l16_224",
}
_FIXED_BY_STOCK = ("patch_size", "num_blocks", "embed_dim")
_CONTROL = "mixer_s4_32"  # this package's default-init Mixer: names other geometries in exports


class StructInitMlpMixer(StructuredInitMixin, MlpMixer):
    """timm's ``MlpMixer`` whose token mixing starts from ``attention_init``: ``"impulse"`` (keyword options: the
    fields of :class:`~structinit_hf.init.options.MixerImpulseOptions`) or ``"default"`` (timm's init only). The init
    runs after timm's and is skipped on the meta device; ``structinit_settings`` records what ran."""

    family = "mixer"
    __jit_unused_properties__ = ["stock_architecture", "network_args"]

    def __init__(self, attention_init: str = "impulse", nlhb: bool = False, **kwargs: Any) -> None:
        settings = self.pop_init(kwargs, attention_init)  # validates before anything is built
        super().__init__(nlhb=nlhb, **kwargs)  # timm's init runs inside
        self.attention_init, self._settings, self.nlhb = attention_init, settings, nlhb
        self._builder_args = without_network_args({**kwargs, **({"nlhb": True} if nlhb else {})})
        self._run_structured_init()

    def _stock_key(self) -> tuple[int, int, int]:
        defaults = dict(patch_size=16, num_blocks=8, embed_dim=512)
        return tuple(self._builder_args.get(name, defaults[name]) for name in _FIXED_BY_STOCK)

    @property
    def stock_architecture(self) -> str:
        """The timm name whose builder, given :attr:`network_args`, makes this network (for exports)."""
        return STOCK_MIXERS.get(self._stock_key(), _CONTROL)

    @property
    def network_args(self) -> dict[str, Any]:
        """The builder keywords that rebuild this network under :attr:`stock_architecture` (less those it fixes)."""
        if self._stock_key() in STOCK_MIXERS:
            return {k: v for k, v in self._builder_args.items() if k not in _FIXED_BY_STOCK}
        return {**self._builder_args, **dict(zip(_FIXED_BY_STOCK, self._stock_key(), strict=True))}

    def init_weights(self, nlhb: bool = False) -> None:
        """timm's init, then the token-mixing init (once the model is built)."""
        super().init_weights(nlhb=nlhb or getattr(self, "nlhb", False))
        if hasattr(self, "_settings"):
            self._run_structured_init()


def _create_mixer(variant: str, pretrained: bool = False, **kwargs: Any) -> StructInitMlpMixer:
    """Build ``variant`` with its pretrained cfg; with ``pretrained=True`` the weights are loaded and no init runs."""
    require_hub_weights(variant, pretrained, kwargs)
    model_args = dict(kwargs)
    if pretrained:  # the same network, built without the init: its weights are loaded
        StructInitMlpMixer.pop_init(model_args, model_args.get("attention_init", "impulse"))
        model_args["attention_init"] = "default"
    out_indices = model_args.pop("out_indices", 3)
    loading = pretrained_args(variant, pretrained, model_args, checkpoint_filter_fn)
    model = build_model_with_cfg(
        StructInitMlpMixer,
        variant,
        pretrained,
        **loading,
        feature_cfg=dict(out_indices=out_indices, feature_cls="getter"),
        **model_args,
    )
    if pretrained:
        getattr(model, "model", model).structinit_settings = None  # loaded, not initialized
    return model


def _cifar_cfg(**kwargs: Any) -> dict[str, Any]:
    return cifar_cfg(first_conv="stem.proj", paper_ids="arXiv:2105.01601", **kwargs)


default_cfgs = generate_default_cfgs(
    {
        "mixer_s4_32": _cifar_cfg(),
        "mixer_s4_impulse3_32": _cifar_cfg(),
        "mixer_s16_impulse3_224": _cifar_cfg(
            num_classes=1000, input_size=(3, 224, 224), crop_pct=0.875, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)
        ),
    }
)


@register_model
def mixer_s4_32(pretrained: bool = False, **kwargs) -> StructInitMlpMixer:
    """Mixer-S at 32 px, patch 4 (8 x 8 tokens), with timm's default init: the control of the Mixer runs."""
    model_args = dict(img_size=32, patch_size=4, num_blocks=8, embed_dim=512, attention_init="default")
    return _create_mixer("mixer_s4_32", pretrained, **dict(model_args, **kwargs))


@register_model
def mixer_s4_impulse3_32(pretrained: bool = False, **kwargs) -> StructInitMlpMixer:
    """Mixer-S at 32 px, patch 4, every token MLP starting as a random 3x3 shift (exact: 256 hidden, 64 tokens)."""
    model_args = dict(img_size=32, patch_size=4, num_blocks=8, embed_dim=512, attention_init="impulse", kernel_size=3)
    return _create_mixer("mixer_s4_impulse3_32", pretrained, **dict(model_args, **kwargs))


@register_model
def mixer_s16_impulse3_224(pretrained: bool = False, **kwargs) -> StructInitMlpMixer:
    """Mixer-S/16 at 224 px (timm's ``mixer_s16_224``), every token MLP starting as a random 3x3 shift."""
    model_args = dict(patch_size=16, num_blocks=8, embed_dim=512, attention_init="impulse", kernel_size=3)
    return _create_mixer("mixer_s16_impulse3_224", pretrained, **dict(model_args, **kwargs))
