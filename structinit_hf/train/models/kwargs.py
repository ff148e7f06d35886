"""What a timm name's ``--model-kwargs`` may be: the keywords its network takes and the types they are annotated with;
and the build itself (:func:`create_timm_model`), with an attention init named there run on a model of timm's own.

The network is read off the timm entrypoint's return annotation, or, where timm has none, off the class that timm's
``TypeError`` names. Both the value check before a model is built (:func:`check_model_kwargs`, which ``train``,
``evaluate`` and ``compare`` call) and the diagnosis of what ``timm.create_model`` refused (:func:`create_timm_model`:
an unknown keyword, one the variant's entrypoint sets itself, any value the network cannot be built with) use it.
"""

from __future__ import annotations

import difflib
import inspect
import re
import sys
import typing
from typing import Any

import timm
from timm.models import is_model_in_modules
from torch import nn

from ...init.apply import apply_structured_init, init_family, init_record
from ...init.layer_scale import KEEP
from ...init.options import (
    FAMILIES,
    IMPULSE_KWARGS,
    ImpulseOptions,
    MixerImpulseOptions,
    SwinImpulseOptions,
    family_options,
    init_settings,
)
from ...models.common import StructuredInitMixin
from ...models.structinit_vit import StructInitVisionTransformer
from ..cli.errors import UsageError, check_kwarg_types, did_you_mean

__all__ = ["check_model_kwargs", "create_timm_model", "run_init_record", "unknown_keyword", "user_init_options"]


def _network_class(model: str) -> type | None:
    """The class the timm name ``model`` builds, read off its entrypoint's return annotation; ``None`` for what is not
    a timm name (a checkpoint folder, a Hub id) or an entrypoint without one."""
    if not timm.is_model(model):
        return None
    try:
        network = typing.get_type_hints(timm.models.model_entrypoint(model)).get("return")
    except (NameError, TypeError):
        return None
    return network if isinstance(network, type) else None


def _class_named_in(error: TypeError) -> type | None:
    """The model class whose ``__init__`` refused a keyword (``"EfficientVit.__init__() got an unexpected keyword
    argument ..."``), found among the loaded timm model modules and this package's; ``None`` if none matches."""
    named = re.match(r"(\w+)\.__init__\(\)", str(error))
    if named is None:
        return None
    modules = [m for name, m in list(sys.modules.items()) if name.startswith(("timm.models.", "structinit_hf.models."))]
    found = (getattr(module, named.group(1), None) for module in modules)
    return next((klass for klass in found if isinstance(klass, type) and issubclass(klass, nn.Module)), None)


def _builder_keywords(model: str, error: TypeError) -> list[str] | None:
    """The keywords ``timm.create_model(model, ...)`` accepts: its network's (annotated on the entrypoint, else named
    by the ``error`` its ``__init__`` raised), ``create_model``'s own, and for this package's ViTs the init options;
    ``None`` when the network is not known."""
    network = _network_class(model) or _class_named_in(error)
    if network is None:
        return None
    names = set(inspect.signature(timm.create_model).parameters)
    for klass in network.__mro__[: network.__mro__.index(nn.Module)]:  # its own keywords, then its bases' (timm's)
        names |= set(inspect.signature(klass).parameters)
    if issubclass(network, StructInitVisionTransformer):
        names |= set(IMPULSE_KWARGS)
    if issubclass(network, StructuredInitMixin):  # the family's init options
        names |= set(family_options(network.family))
    return sorted(name for name in names if name not in ("self", "kwargs", "args", "model_name", "variant"))


def unknown_keyword(source: str, error: TypeError) -> UsageError | None:
    """The user error for ``timm.create_model(source, ...)``'s ``TypeError`` when it names an unknown keyword: the
    nearest keyword the network takes, and all of them; ``None`` when the error is another (or the network unknown)."""
    unknown = re.search(r"unexpected keyword argument '(\w+)'", str(error))
    allowed = _builder_keywords(source, error) if unknown else None
    if not allowed:
        return None
    name = unknown.group(1)
    hint = ""
    if name in _init_options() and "attention_init" not in allowed:  # timm's own network: the init is asked for
        hint = f"{name} is an init option: add attention_init=impulse (or mimetic) to run that init on {source}; "
    return UsageError(
        f"unknown model keyword {name!r} for {source}{did_you_mean(name, allowed)}; {hint}"
        f"{source} takes: {', '.join(allowed)}"
    )


def _init_options() -> set[str]:
    """Every init option of every family (``kernel_size``, ``seed``, ``value_init`` ...)."""
    return {name for family in FAMILIES for name in family_options(family)}


def _init_clash(source: str, kwargs: dict[str, Any], error: Exception) -> UsageError | None:
    """The line for ``attention_init`` asking one of this package's names for another init than the one it is
    registered with (its own options then fail that init's check): the names that have it, or timm's own."""
    method = kwargs.get("attention_init")
    if method is None or "init method" not in str(error) or not is_model_in_modules(source, SELF_INITIALIZING_MODULES):
        return None
    module = next(name for name in SELF_INITIALIZING_MODULES if is_model_in_modules(source, [name]))
    others = [name for name in timm.list_models(module=module) if method in name] if method != "default" else []
    nearest = difflib.get_close_matches(source, others, n=1, cutoff=0)
    alternative = f"train {nearest[0]}, or " if nearest else "train "
    own = next((init for init in ("impulse", "mimetic") if init in source), "timm's default")  # the names say it
    return UsageError(
        f"--model-kwargs attention_init={method!r}: {source} is registered with {own} init and its options, which "
        f"{method} init does not take; for {method} init {alternative}a stock timm name with attention_init={method}"
    )


def _keyword_hints(model: str) -> dict[str, Any]:
    """The annotated keywords of the network a timm name builds (its class's ``__init__`` up the MRO), and this
    package's init options; ``{}`` for what is not a timm name. Annotations that do not resolve are left out."""
    hints: dict[str, Any] = {}
    network = _network_class(model)
    for klass in reversed(getattr(network, "__mro__", ())):
        try:
            hints.update(typing.get_type_hints(klass.__init__))
        except (NameError, TypeError):
            continue
    if isinstance(network, type) and issubclass(network, StructInitVisionTransformer):
        hints.update(typing.get_type_hints(ImpulseOptions))
    if isinstance(network, type) and issubclass(network, StructuredInitMixin):
        options = {"swin": SwinImpulseOptions, "mixer": MixerImpulseOptions}[network.family]
        hints.update(typing.get_type_hints(options))
    hints.pop("return", None)
    return hints


def check_model_kwargs(model_kwargs: dict[str, Any], model: str) -> None:
    """``--model-kwargs`` for the timm name ``model``, before anything is built: a value of the wrong type for its
    network's keyword or for an init option (``depth=abc``, ``seed=abc``, ``global_pool=mean``) is refused naming the
    keyword and what it takes; a ``None``, which ``timm.create_model`` drops (the model would keep its own value while
    the run's record says ``None``), is refused naming the keyword."""
    dropped = [name for name, value in model_kwargs.items() if value is None]
    if dropped and timm.is_model(model):
        name = dropped[0]
        if name == "attn_layer_scale":
            raise UsageError(
                f"--model-kwargs attn_layer_scale=None: None is no value here; attn_layer_scale={KEEP} keeps "
                f"{model}'s own layer scale, a number > 0 sets it, leaving it out takes the impulse's default"
            )
        raise UsageError(
            f"--model-kwargs {name}=None: timm.create_model drops a keyword whose value is None, so {model} would be "
            f"built with its own {name}; leave {name} out for that, or give it a value"
        )
    check_kwarg_types(model_kwargs, _keyword_hints(model), "--model-kwargs")


# the modules of this package's registered names: their builders take the init keywords and run the init themselves
SELF_INITIALIZING_MODULES = ["structinit_vit", "structinit_swin", "structinit_mixer"]


def create_timm_model(source: str, **kwargs: Any) -> nn.Module:
    """``timm.create_model(source, **kwargs)``; what it refuses is one :class:`UsageError` (:func:`_build_refusal`).

    For a timm name of timm's own, ``attention_init`` and the init's options (``kernel_size``, ``seed`` ...) are taken
    out of ``kwargs`` and that init runs on the built model (:func:`~structinit_hf.apply_structured_init`; a model it
    refuses is its ``ValueError``), recorded as ``structinit_settings``: ``attention_init``, the options given and the
    impulse shifts written, as this package's names record theirs.
    """
    init = _pop_init(source, kwargs)
    try:
        model = timm.create_model(source, **kwargs)
    except UsageError:
        raise
    except (TypeError, ValueError, AssertionError, ZeroDivisionError, RuntimeError) as error:
        refusal = _build_refusal(source, kwargs, error)
        if refusal is None:
            raise
        raise refusal from error
    if init is not None:
        method, options = init
        apply_structured_init(model, method, **user_init_options(method, options, kwargs))
        auto = getattr(model, "structinit_auto", None)
        if auto is not None:  # init "auto": the init it chose is the run's, named as chosen by it
            method, options = auto["method"], auto["options"]
        model.structinit_settings = run_init_record(model, method, options, chosen_by="auto" if auto else None)
    return model


def user_init_options(method: str, options: dict[str, Any], model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The options ``apply_structured_init`` takes for init ``method`` with ``options`` on a model built with
    ``model_kwargs``: a layer scale built from the ``init_values`` given is the user's, kept (``attn_layer_scale=
    "model"``) unless ``attn_layer_scale`` is also given."""
    keep = method == "impulse" and model_kwargs.get("init_values") is not None
    return {"attn_layer_scale": KEEP, **options} if keep else dict(options)


def run_init_record(
    model: nn.Module, method: str, options: dict[str, Any], chosen_by: str | None = None
) -> dict[str, Any]:
    """What ``apply_structured_init(model, method, **options)`` ran, as this package's names record theirs: every
    setting with its default filled in, what the family's defaults and the layer scale did (:func:`init_record`:
    ``structinit_defaults``, ``attn_layer_scale_source``), the shifts, and ``chosen_by`` (init ``"auto"``)."""
    family, _ = init_family(model)
    done = init_record(model)
    given = {k: v for k, v in options.items() if not (k == "attn_layer_scale" and v == KEEP)}
    defaults = {k: v for k, v in done.items() if k != "attn_layer_scale_source"} if method == "impulse" else {}
    settings = init_settings(method, {**defaults, **given}, family if method != "default" else "vit")
    shifts = getattr(model, "structinit_shifts", None)
    return {
        **settings,
        **done,
        **({"chosen_by": chosen_by} if chosen_by else {}),
        **({"shifts": shifts} if shifts else {}),
    }


# what timm.create_model takes besides the network's keywords: not the user's to have got wrong
_LOADING_KEYWORDS = ("pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "checkpoint_path", "cache_dir")


def _build_refusal(source: str, kwargs: dict[str, Any], error: Exception) -> UsageError | None:
    """The one line for what ``timm.create_model(source, **kwargs)`` raised: an unknown keyword (the nearest one
    named), a keyword the variant's entrypoint sets itself (``mixer_s16_224`` fixes ``num_blocks``), or any other
    error with keywords given (``depth=-1``, ``num_heads`` that does not divide the width): the keywords and timm's
    reason. ``None`` (a bug: keep the traceback) when no keyword was given."""
    if isinstance(error, TypeError):
        refusal = unknown_keyword(source, error)
        if refusal is not None:
            return refusal
        fixed = re.search(r"got multiple values for keyword argument '(\w+)'", str(error))
        if fixed is not None and fixed.group(1) in kwargs:
            name = fixed.group(1)
            return UsageError(
                f"--model-kwargs {name}={kwargs[name]!r}: {source} sets {name} itself (its variant's own "
                f"{name}); leave {name} out, or pick a variant with the {name} you want "
                f"(timm.list_models({source.split('_')[0] + '*'!r}))"
            )
    clash = _init_clash(source, kwargs, error)
    if clash is not None:
        return clash
    given = {name: value for name, value in kwargs.items() if name not in _LOADING_KEYWORDS}
    if not given:
        return None
    reason = (str(error).strip().splitlines() or [""])[0]
    words = " ".join(f"{name}={value!r}" for name, value in given.items())
    return UsageError(f"{source} cannot be built with {words}: {type(error).__name__}: {reason}; check those values")


def _pop_init(source: str, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """``(attention_init, its options)`` taken out of ``kwargs`` for a timm name whose builder does not run the init;
    ``None`` (``kwargs`` untouched) for any other source or where no ``attention_init`` is named."""
    if "attention_init" not in kwargs or not timm.is_model(source):
        return None
    if is_model_in_modules(source, SELF_INITIALIZING_MODULES):
        return None
    names = _init_options()
    return kwargs.pop("attention_init"), {name: kwargs.pop(name) for name in list(kwargs) if name in names}
