"""``compare --model <any timm name>``: timm's default against every init that model takes.

Each arm of :data:`~.arms.MODEL_ARMS` trains the stock model with its init named in ``--model-kwargs``
(``attention_init=impulse kernel_size=3``), which training runs through :func:`structinit_hf.apply_structured_init`
right after timm builds the model. Before anything trains, each init runs once on a build of the model: one the model
refuses (``apply_structured_init`` raises :class:`~structinit_hf.InitRefused`) is left out of the comparison,
with the first line of its message for the table's notes. Which families the init serves is the init's to say.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..init.apply import InitRefused, apply_structured_init, init_family, said_changes
from ..init.options import FAMILIES, family_options, init_settings
from ..train import UsageError
from ..train._internal import load_model, user_init_options
from .arms import Arm, arm_label
from .profiles import PROFILES, Profile

__all__ = [
    "DEFAULT_MODEL_ARMS",
    "FAMILY_NOTES",
    "REFUSALS",
    "ModelInits",
    "change_notes",
    "head_dim",
    "merged_notes",
    "model_inits",
    "model_profile",
]

DEFAULT_MODEL_ARMS = ("model-default", "model-mimetic", "model-impulse3")  # compare --model's, as --family vit's

# what apply_structured_init raises for a model it cannot serve (the arms' own options are valid by construction)
REFUSALS: tuple[type[Exception], ...] = (InitRefused,)


@dataclass(frozen=True)
class ModelInits:
    """What a comparison on one timm model trains: the arms it takes (``model`` filled in), why it refuses the others
    (arm name -> one line), and its attention's head dimension (0 where it has none), which sets the proxy's rate."""

    arms: list[Arm]
    refused: dict[str, str]
    head_dim: int
    note: str = ""  # what the campaign found for the model's family, where the impulse does not pay on it
    merged: dict[str, str] = field(default_factory=dict)  # arm -> the arm taken whose weights it would start from
    changes: dict[str, str] = field(default_factory=dict)  # arm -> what its init changed beyond the attention


# per init family (structinit_hf.init.apply.init_family), where the campaign found that no impulse option puts the
# impulse ahead of timm's default (the layer-scale factorial and the structure campaign, 3 seeds, the tie rule): the
# line compare --model prints under its table, so a user of that family reads it beside their own runs
FAMILY_NOTES = {
    "relpos": "On timm's relative-position ViTs no impulse option trained ahead of timm's default in the campaign's 3 "
    "seeds, while the impulse's norm-matched control (a random relative bias at the impulse's norms: the model-auto "
    "arm) did, on every seed (docs/campaign.md, 'The relative-position ViT, taken apart'): weigh this table's verdict "
    "with that.",
}


def head_dim(model: torch.nn.Module) -> int:
    """The head dimension of the first attention module of ``model`` (one with ``num_heads``: its ``head_dim``, else
    what its logit scale, ``head_dim ** -0.5``, says), else 0."""
    for module in model.modules():
        if not isinstance(getattr(module, "num_heads", None), int):
            continue
        if isinstance(getattr(module, "head_dim", None), int):
            return module.head_dim
        if isinstance(getattr(module, "scale", None), float):
            return round(module.scale**-2)
    return 0


def model_inits(model: str, model_kwargs: dict[str, Any], arms: list[Arm], seed: int = 0) -> ModelInits:
    """Build ``model`` with ``model_kwargs`` once (a bad keyword is the caller's error) and try each arm's init on a
    copy, as training runs it; the global random state is left as it was. An init keyword in ``model_kwargs`` is
    refused: each arm names its own. An arm option ``None`` takes the model's family's options class default (the
    as-built arm). An arm whose init starts the model from the same weights as an arm before it is merged into that
    one (trained once); what each init changes beyond the attention (a layer scale, value/output by a family
    default) is kept for the table's notes."""
    init_keywords = sorted({"attention_init", *(name for family in FAMILIES for name in family_options(family))})
    given = [name for name in init_keywords if name in model_kwargs]
    if given:
        raise UsageError(
            f"--model-kwargs {', '.join(given)}: compare --model sets the init of each arm (--arms); pass the model's "
            "geometry and regularisation only (img_size, patch_size, depth, drop_path_rate ...)"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        built = load_model(model, model_kwargs=model_kwargs).model
        taken, refused, merged, changes, starts = [], {}, {}, {}, {}
        for arm in arms:
            options = dict(arm.model_kwargs)
            method = options.pop("attention_init", "default")
            try:
                options = _class_defaults(built, method, options)
                probe = copy.deepcopy(built)
                with said_changes() as said:
                    apply_structured_init(probe, method, **user_init_options(method, options, model_kwargs))
            except REFUSALS as error:
                refused[arm.name] = (str(error).strip().splitlines() or [type(error).__name__])[0]
                continue
            digest = _weights_digest(probe)
            if digest in starts:
                merged[arm.name] = starts[digest]
                continue
            starts[digest] = arm.name
            changes.update({arm.name: said[0].removeprefix("structinit_hf: ")} if said else {})
            kwargs = {"attention_init": method, **options} if "attention_init" in arm.model_kwargs else options
            taken.append(replace(arm, model=model, model_kwargs=kwargs))
    if not taken:
        raise UsageError(f"--model {model}: it refuses every init asked for ({'; '.join(refused.values())})")
    return ModelInits(taken, refused, head_dim(built), _family_note(built), merged, changes)


def _class_defaults(model: torch.nn.Module, method: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with each ``None`` replaced by the default of ``model``'s family's options class (no family
    default): the as-built arm's ``value_init``."""
    unset = [name for name, value in options.items() if value is None]
    if not unset:
        return options
    family = init_family(model)[0]
    resolved = init_settings(method, {name: value for name, value in options.items() if value is not None}, family)
    return {name: resolved[name] if value is None else value for name, value in options.items()}


def _weights_digest(model: torch.nn.Module) -> str:
    """A digest of every tensor of ``model``'s state (name, dtype, shape, values): equal for models that train alike."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _family_note(model: torch.nn.Module) -> str:
    """:data:`FAMILY_NOTES`' line for ``model``'s init family ("" where none, or where the init knows no layout)."""
    try:
        return FAMILY_NOTES.get(init_family(model)[0], "")
    except InitRefused:
        return ""


def model_profile(model: str) -> Profile:
    """compare's default profile (cpu-proxy-n2500's data and recipe) on ``model`` at its own geometry: the
    architecture is ``--model-kwargs`` alone."""
    base = PROFILES["cpu-proxy-n2500"]
    return replace(
        base,
        architecture={},
        family="model",
        notes=f"{model} as timm builds it with --model-kwargs, timm's default init against each init "
        "apply_structured_init writes into it; " + base.notes,
    )


def change_notes(changes: dict[str, str]) -> list[str]:
    """What each init changed beyond the attention (arm -> the line it said), once for the arms it is the same for."""
    said: dict[str, list[str]] = {}
    for arm, change in changes.items():
        said.setdefault(change, []).append(arm_label(arm))
    return [f"{', '.join(labels)}: {change}" for change, labels in said.items()]


def merged_notes(merged: dict[str, str], model: str | None) -> list[str]:
    """One line per arm merged into another (``compare --model``): the same starting weights, trained once."""
    return [
        f"{arm_label(arm)}: the same weights as {arm_label(kept)} on {model} (its init settings resolve alike there): "
        "trained once, listed once"
        for arm, kept in merged.items()
    ]
