"""Apply a named attention initialization to a Vision Transformer (timm or transformers), a Swin or an MLP-Mixer.

The algorithms live in :mod:`.impulse`, :mod:`.solvers`, :mod:`.token_mixing` and :mod:`.mimetic`, the options in
:mod:`.options`, where a model keeps its weights in :mod:`.layouts`, each family's constructions in :mod:`.families`;
this module dispatches an init to its family, adds what every family shares (the attention layer scale, mimetic MLPs,
the norm-matched control), and puts the model back as it was when anything fails.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn

from . import impulse
from .check import InitRefused
from .control import norm_matched
from .families import FAMILY_INITS
from .layer_scale import attention_layer_scale, attention_scales, layer_scale_plan, open_attention_scale, scale_line
from .layouts import model_family, vit_layout
from .mlp import mimetic_mlp
from .options import (
    AUTO_INITS,
    FAMILIES,
    FAMILY_IMPULSE_DEFAULTS,
    FAMILY_METHODS,
    INIT_METHODS,
    family_options,
    impulse_options,
    init_settings,
)
from .provenance import RECORDS, init_record, kept_records
from .relative_layouts import RelativeLayout, relative_layout

__all__ = [
    "RECORDS",
    "InitRefused",
    "apply_structured_init",
    "auto_init",
    "impulse_block_targets",
    "init_family",
    "init_record",
    "init_refusal",
    "said_changes",
]


def impulse_block_targets(model: nn.Module, shifts: list[list[list[int]]] | None = None) -> list[torch.Tensor]:
    """The impulse target maps (``heads x N x N``, patch tokens) of every block, from recorded shifts.

    ``shifts`` (per block, ``[dy, dx]`` per head) default to the model's own ``structinit_shifts``, which
    :func:`apply_structured_init` records; pass another model's to check this one against its impulses.
    """
    shifts = getattr(model, "structinit_shifts", None) if shifts is None else shifts
    if shifts is None:
        raise ValueError(
            f"{type(model).__name__} records no impulse shifts (structinit_shifts): it was not built with impulse "
            "init; pass the shifts of one that was"
        )
    relative = relative_layout(model)
    grid = relative.grid_size if relative is not None else vit_layout(model).grid_size
    return [impulse.impulse_targets(grid, torch.tensor(block, dtype=torch.long)) for block in shifts]


@contextmanager
def _init_defaults() -> Iterator[None]:
    """Create new tensors in float32 and on the CPU inside, whatever the caller's defaults. The dtype: the solves need
    float32 (no half-precision SVD on the CPU) and write their results into the model's own dtype, whatever
    ``torch.set_default_dtype`` (which transformers' ``from_config(dtype=...)`` also sets) says. The device: every draw
    uses a seeded CPU generator, which a ``with torch.device("cuda")`` build would otherwise refuse; what runs on the
    model's device says so (the ViT's solve), and a value copied into a meta parameter is dropped."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        if torch.empty(()).device.type == "cpu":  # no device mode to undo: none is entered (one costs every torch call)
            yield
        else:
            with torch.device("cpu"):
                yield
    finally:
        torch.set_default_dtype(previous)


def init_family(model: nn.Module) -> tuple[str, RelativeLayout | None]:
    """Which init family ``model`` is (:data:`~.options.FAMILIES`), and its relative layout where it has one."""
    relative = relative_layout(model)
    return (relative.kind, relative) if relative is not None else (model_family(model), None)


def _apply(model: nn.Module, method: str, family: str, settings: dict, options: dict) -> None:
    construction = FAMILY_INITS[family]
    if method == "impulse":
        construction.impulse_init(model, impulse_options(family, options))
    else:
        construction.mimetic_init(model, settings["seed"])


def init_refusal(model: nn.Module, method: str = "impulse", **options) -> str | None:
    """Why ``model`` refuses init ``method`` with ``options`` (the one-line message), or ``None`` where it takes it.

    Runs the init on a copy of ``model`` (its self-check included); ``model`` is not touched. A bad option is still an
    error (``ValueError``), not a refusal.
    """
    if method == "default":
        return None
    try:
        with said_changes():  # a question, not a change: nothing to say
            apply_structured_init(copy.deepcopy(model), method, **options)
    except InitRefused as error:
        return str(error)
    return None


logger = logging.getLogger(__name__)

# where apply_structured_init puts its line of what it changed beyond the attention: a list (said_changes) or the log
_SAID: ContextVar[list[str] | None] = ContextVar("structinit_said", default=None)


def auto_init(model: nn.Module, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any], str]:
    """What init ``"auto"`` writes into ``model``: ``(method, options, reason)`` from :data:`~.options.AUTO_INITS` for
    the model's family (its ``/open`` row where the model's attention layer scale is already 1); ``options``
    (``seed`` only) pass on to the chosen init, none to timm's default."""
    options = dict(options or {})
    if set(options) - {"seed"}:
        raise ValueError(f"init method 'auto' takes only seed, got {sorted(set(options) - {'seed'})}")
    family, _ = init_family(model)
    opened = attention_layer_scale(model) == 1.0 and f"{family}/open" in AUTO_INITS
    method, chosen, reason = AUTO_INITS[f"{family}/open" if opened else family]
    return method, ({**chosen, **options} if method != "default" else {}), reason


@contextmanager
def said_changes() -> Iterator[list[str]]:
    """Collect, instead of logging them, the lines :func:`apply_structured_init` says of what it changed beyond the
    attention (a layer scale, value/output by a family default): for a caller that reports them itself."""
    lines: list[str] = []
    token = _SAID.set(lines)
    try:
        yield lines
    finally:
        _SAID.reset(token)


_FAMILY_WORDS = {"rope": "rotary", "relpos": "relative-position"}


def _say(line: str) -> None:
    lines = _SAID.get()
    if lines is None:
        logger.warning(line)
    else:
        lines.append(line)


def _family_defaults(family: str, options: dict) -> dict[str, Any]:
    """The family's impulse defaults (:data:`~.options.FAMILY_IMPULSE_DEFAULTS`) that ``options`` leave to it."""
    return {k: v for k, v in FAMILY_IMPULSE_DEFAULTS.get(family, {}).items() if k not in options}


def _tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from model.named_parameters()
    yield from model.named_buffers()


def _snapshot(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every parameter and buffer of ``model`` (non-persistent ones too) and its init records, as they are now."""
    with torch.no_grad():
        tensors = {name: tensor.clone() for name, tensor in _tensors(model) if not tensor.is_meta}
    return tensors, {name: model.__dict__[name] for name in RECORDS if name in model.__dict__}


def _restore(model: nn.Module, saved: tuple[dict[str, torch.Tensor], dict[str, Any]]) -> None:
    tensors, records = saved
    with torch.no_grad():
        for name, tensor in _tensors(model):
            if name in tensors:
                tensor.copy_(tensors[name])
    for name in RECORDS:
        model.__dict__.pop(name, None)
    model.__dict__.update(records)


def _auto_choice(model: nn.Module, method: str, options: dict[str, Any]) -> str:
    """What init "auto" wrote, in words: the method, the options it chose and the family defaults it took."""
    if method == "default":
        return "timm's default init, left as built"
    chosen = {k: v for k, v in options.items() if k != "seed"} | getattr(model, "structinit_defaults", {})
    return f"{method} init" + (f" with {', '.join(f'{k}={v!r}' for k, v in chosen.items())}" if chosen else "")


def _foreign_options(family: str, options: dict) -> list[str]:
    """The options given that another family's impulse init takes and ``family``'s does not (a Mixer's value_init)."""
    known = {name for other in FAMILIES for name in family_options(other)}
    return sorted(known.intersection(options) - set(family_options(family)))


def apply_structured_init(model: nn.Module, method: str = "impulse", **options) -> nn.Module:
    """Initialize the attention (or token mixing) of a timm or transformers ViT, a timm Swin Transformer or a timm
    MLP-Mixer in place and return it.

    ``method`` is ``"impulse"`` (structured init, arXiv 2404.01139), ``"mimetic"`` (Trockman & Kolter 2023; takes
    ``seed``; not for a Mixer, which has no attention) or ``"default"`` (leaves the weights as they are). Impulse init's
    keyword options are the fields of the family's options: :class:`ImpulseOptions` (ViT: Q/K solved on a positional
    pseudo input; the positional code is written into the patch slots of the model's absolute position embedding,
    since the solve assumes it), :class:`SwinImpulseOptions` (each head's impulse written exactly into its window's
    relative position bias; also the relative-position ViTs, whose bias table or MLP takes it, and the rotary ViTs,
    whose query/key biases do: :mod:`.relative_layouts`) or :class:`MixerImpulseOptions` (each block's token mixer
    starts as a shift). Every block's shifts are recorded as ``model.structinit_shifts`` (per block, ``[dy, dx]`` per
    head or token mixer shift). The init computes in float32 and writes into the model's dtype, whatever the default
    dtype.

    Beyond the attention, the impulse changes two things by default, where the campaign measured them to pay: the
    attention branch's layer scale of the block classes :data:`~.layer_scale.LAYER_SCALES` opens (DeiT-III's timm
    ``Block`` at 1e-6, the RoPE ViTs' ``EvaBlock`` at 1e-5: opened to 1, and only where the scale is still at that
    built value, so a scale the user chose or trained is kept), and a rotary ViT's value/output projections
    (mimetic: :data:`~.options.FAMILY_IMPULSE_DEFAULTS`). An option given overrides them: ``attn_layer_scale=<number>``
    sets the scale on any layer-scaled block, ``attn_layer_scale="model"`` (:data:`~.layer_scale.KEEP`) keeps the
    model's own, ``value_init="default"`` keeps value/output as drawn. What the call changed beyond the attention is
    said in one line on the logger ``structinit_hf.init.apply`` (a ``logging`` WARNING, printed by default as
    transformers' notices are; ``logging.getLogger("structinit_hf").setLevel(logging.ERROR)`` silences it); the
    defaults in force are recorded as ``model.structinit_defaults`` and the scale's value, value before and source
    (``"family default"``, ``"given"``, ``"model's own"``) as ``model.structinit_layer_scale``: both stay through a
    later init that leaves them in the weights (:func:`init_record` reads them for a run's record); the shifts and
    the check are the last init's (:data:`RECORDS`).

    Every family's impulse and mimetic init also take ``mlp_init="mimetic"`` (each block MLP's first layer given a
    nonzero mean: :mod:`.mlp`; ``"default"`` takes it too) and ``control="normmatched"`` (the init's norm-matched
    control: every tensor it wrote redrawn at random at its norms, :mod:`.control`). ``"auto"`` (takes ``seed``) writes
    what the evidence says leads on the model's family (:data:`~.options.AUTO_INITS`), says which in one line as the
    init's other changes are said, and records it as ``model.structinit_auto``.

    A ViT's impulse init checks itself (:mod:`.check`): every block's attention on the init's pseudo input is recorded
    as ``model.structinit_check`` (``target_mass``, ``hit_rate``, ``uniform`` per block), and the init is refused
    where a block falls short of the check's bar (:func:`~.check.require_pattern`).

    A model the init cannot serve (no layout it knows, a method its family does not take, a shape the construction
    cannot fill, the self-check's verdict) raises :class:`InitRefused` (a ``ValueError``, one line naming the model
    class and why); a bad option is a plain ``ValueError``, raised before anything is written. On any exception the
    model is put back as it was: every parameter and buffer, and its records. :func:`init_refusal` asks the question
    without touching the model.
    """
    if method == "auto":
        method, options, reason = auto_init(model, options)
        apply_structured_init(model, method, **options)
        model.structinit_auto = {"method": method, "options": options, "reason": reason}
        _say(f"init 'auto' on {type(model).__name__}: {_auto_choice(model, method, options)} ({reason})")
        return model
    if method == "default":
        settings = init_settings(method, options)
        for name in ("structinit_shifts", "structinit_check"):
            model.__dict__.pop(name, None)
        if settings.get("mlp_init") == "mimetic":
            with _init_defaults():
                mimetic_mlp(model)
        return model
    family, _ = init_family(model)
    if method in INIT_METHODS and method not in FAMILY_METHODS[family]:
        raise InitRefused(model, f"init method {method!r} does not apply to a {family} model; it takes "
                          f"{', '.join(FAMILY_METHODS[family])}")  # fmt: skip
    foreign = _foreign_options(family, options) if method == "impulse" else []
    if foreign:
        raise InitRefused(model, f"is a {family} model, whose impulse init has no {', '.join(foreign)}")
    defaults = _family_defaults(family, options) if method == "impulse" else {}
    settings = init_settings(method, {**defaults, **options}, family)  # a bad option is the caller's error
    scale, source = layer_scale_plan(model, settings.get("attn_layer_scale")) if method == "impulse" else (None, None)
    if source is None and method == "mimetic" and attention_scales(model):
        source = "model's own"
    if source == "family default":
        defaults["attn_layer_scale"] = scale
    before = attention_layer_scale(model)
    saved = _snapshot(model)
    try:
        kept = kept_records(model, method, settings, scale is not None)
        for name in RECORDS:
            model.__dict__.pop(name, None)
        with _init_defaults():
            if scale is not None:
                open_attention_scale(model, scale)
            _apply(model, method, family, settings, {**defaults, **options})
            if settings.get("mlp_init") == "mimetic":
                mimetic_mlp(model)
            if settings.get("control") is not None:  # the pattern goes: what the model records of it goes too
                norm_matched(model, saved[0], settings["seed"])
                for name in ("structinit_shifts", "structinit_check"):
                    model.__dict__.pop(name, None)
    except BaseException as error:
        _restore(model, saved)
        if isinstance(error, ValueError) and not isinstance(error, InitRefused):  # valid options: the model's shape
            raise InitRefused(model, str(error)) from error
        raise
    records = {**kept["structinit_defaults"], **defaults}
    if records:
        model.structinit_defaults = records
    if scale is not None or (source is not None and kept["structinit_layer_scale"] is None):
        model.structinit_layer_scale = {"attn_layer_scale": attention_layer_scale(model), "before": before,
                                        "source": source}  # fmt: skip
    elif kept["structinit_layer_scale"] is not None:
        model.structinit_layer_scale = kept["structinit_layer_scale"]
    changes = [scale_line(model, before, scale, source)] if scale is not None and before is not None else []
    if "value_init" in defaults:
        changes.append(
            f"value/output projections written as mimetic's, the default for a {_FAMILY_WORDS.get(family, family)} "
            "ViT (value_init='default' keeps them as drawn)"
        )
    if changes:
        _say(f"structinit_hf: {method} init on {type(model).__name__}: {'; '.join(changes)}")
    return model
