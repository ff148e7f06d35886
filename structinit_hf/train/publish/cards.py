"""Model cards for trained runs: the Jinja templates in ``card_templates/`` rendered into a ``ModelCard``.

Everything a card states comes from the run itself: the metadata (``ModelCardData`` with a ``model-index`` of
``EvalResult``) and the body (init settings, recipe, results) from the run's ``results.json``, the architecture and
preprocessing from the checkpoint's ``config.json`` (the network's class and geometry read off it: :mod:`.network`), the
parameter count from ``model.safetensors``. One template for any timm network (``timm.md.j2``) and one for the ConViT
peer (``convit.md.j2``) include the shared sections (``_method``, ``_training``, ``_usage``,
``_limitations``, ``_citation``). Rendering needs no network.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from pathlib import Path
from typing import Any

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from safetensors import safe_open
from timm.models import is_model, is_model_in_modules, split_model_name_tag

from ...models.timm_wrapper import PACKAGE_MODEL_MODULES
from .network import describe_network

__all__ = [
    "CARD_TAGS",
    "MODEL_FAMILIES",
    "RESULTS_FIELDS",
    "TEMPLATE_DIR",
    "build_model_card",
    "count_parameters",
    "hub_dataset_id",
    "model_family",
    "parent_name",
    "read_results",
]

TEMPLATE_DIR = Path(__file__).parent / "card_templates"


MODEL_FAMILIES = {"timm": "timm.md.j2", "convit": "convit.md.j2"}


CARD_TAGS = ("image-classification", "timm", "transformers", "vision-transformer", "structured-initialization")


# results.json fields (contract item 2) that a card needs, with the types they must have
RESULTS_FIELDS: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "init": dict,
    "dataset": str,
    "split": str,
    "num_classes": int,
    "top1": (int, float),
    "top5": (int, float),
    "epochs": int,
    "images_seen": int,
    "wall_time_s": (int, float),
    "args": dict,
    "versions": dict,
}


_INIT_TITLES = {
    "impulse": "structured (impulse {k}x{k}) initialization",
    "mimetic": "mimetic initialization",
    "default": "timm's default initialization",
    "convit": "ConViT's convolutional initialization",
}


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


_SECRET_ARG = re.compile(r"token|secret|password|api_key", re.IGNORECASE)


def read_results(path: str | os.PathLike) -> dict[str, Any]:
    """Read a run's ``results.json`` and check the fields a card is built from (name and type of each)."""
    path = Path(path)
    results = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(results, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(results).__name__}")
    missing = [name for name in RESULTS_FIELDS if name not in results]
    if missing:
        raise ValueError(f"{path} lacks the field(s) {', '.join(missing)} (see results.json in docs/training.md)")
    for name, kind in RESULTS_FIELDS.items():
        value = results[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ValueError(f"{path}: field {name!r} has the wrong type ({type(value).__name__}: {value!r})")
    for name in ("top1", "top5"):
        if not 0.0 <= results[name] <= 100.0:
            raise ValueError(f"{path}: {name} must be a percentage in [0, 100], got {results[name]}")
    return results


def model_family(model_name: str) -> str:
    """The card template of a model name: ``"convit"`` for the ConViT peer (a checkpoint's stock ``convit_tiny``),
    ``"timm"`` for any other (``vit_tiny_impulse3.cifar10``, ``deit3_small_patch16_224``, a Swin, a Mixer)."""
    architecture, _ = split_model_name_tag(model_name)
    return "convit" if architecture.startswith("convit") else "timm"


def hub_dataset_id(dataset: str, dataset_id: str | None = None, digest: str | None = None) -> tuple[str | None, bool]:
    """The Hub id to declare in the card (``None`` for a local dataset that is no copy of a Hub one) and whether the
    run read a local folder.

    ``dataset`` is what the run trained on (a Hub id or a local path); ``dataset_id`` names the Hub dataset a local
    folder is a copy of, so the card links it; ``digest``, the run's ``dataset_digest``, which only a local folder
    has (a run's card then reads the same wherever it is rendered, the folder there or not).
    """
    is_local = digest is not None or Path(dataset).expanduser().exists() or not _HUB_ID.match(dataset)
    chosen = dataset_id if dataset_id is not None else (None if is_local else dataset)
    if chosen is not None and not _HUB_ID.match(chosen):
        raise ValueError(f"dataset_id {chosen!r} is not a Hub dataset id ('name' or 'namespace/name')")
    return chosen, is_local


def _local_dataset_line(results: dict[str, Any], limit: int = 20) -> str:
    """A local dataset's classes and sizes as the card states them: ``cat (36 training images), dog (...)``."""
    per_class = (results.get("images_per_class") or {}).get("train") or {}
    names = list(per_class) or list(results["label_names"])
    words = [f"{name} ({per_class[name]:,} training images)" if name in per_class else name for name in names[:limit]]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(words) + more


def count_parameters(weights: str | os.PathLike) -> int:
    """Number of parameters stored in a ``.safetensors`` file, read from its header (no tensor is loaded)."""
    with safe_open(str(weights), framework="pt") as f:
        return sum(math.prod(f.get_slice(name).get_shape()) for name in f.keys())


def _arch_line(model_args: dict[str, Any]) -> str:
    return ", ".join(f"`{name}={value!r}`" for name, value in model_args.items()) or "its default arguments"


def _format_value(value: Any) -> str:
    """A recorded setting as the card shows it; a local path keeps only its last part (the card is public)."""
    if not isinstance(value, str):
        return json.dumps(value)
    if os.path.isabs(value) or value.startswith(("~", "./", "../")):
        return f".../{Path(value).name}"
    return value


def _arg_rows(args: dict[str, Any], fine_tuned_from: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The training command's options, the parent checkpoint named as :func:`parent_name` names it; anything that
    looks like a credential is never printed."""
    shown = dict(args)
    if fine_tuned_from and str(args.get("model", "")).removeprefix("hf-hub:") != _parent_hub_id(fine_tuned_from):
        shown["model"] = parent_name(fine_tuned_from)
    return [(name, "<redacted>" if _SECRET_ARG.search(name) else _format_value(value)) for name, value in shown.items()]


# train.py's options that shape where and how a run is kept, not what it learns: a card's command leaves them out
_RUN_ONLY_ARGS = frozenset(
    "output_dir resume checkpoint_every checkpoint_steps checkpoint_minutes keep_checkpoints workers eval_batch_size "
    "report_to input_pipeline grad_accum".split()
)


def _train_command(args: dict[str, Any], dataset_id: str | None) -> str:
    """The ``structinit-hf train`` command that trains the run again: the dataset (its Hub id where the run read a
    local copy of one), the seed and every recipe option the run set otherwise than train.py's defaults."""
    from ..cli.args import training_parser  # the parser's own defaults, so a changed default changes no card

    defaults = vars(training_parser().parse_args([]))
    words = ["structinit-hf", "train"]
    for name, value in args.items():
        default = defaults.get(name, value)
        if isinstance(default, tuple):
            default = list(default)
        always = name in ("model", "dataset", "seed")
        if name in _RUN_ONLY_ARGS or _SECRET_ARG.search(name) or value is None or (value == default and not always):
            continue
        flag = f"--{name.replace('_', '-')}"
        if name == "dataset":
            value = dataset_id or _dataset_word(value)
        if isinstance(value, bool):
            words += [flag] if value else [f"--no-{name.replace('_', '-')}"] if name == "compile" else []
        elif isinstance(value, dict):
            words += [flag, *(f"{key}={item}" for key, item in value.items())] if value else []
        elif isinstance(value, list):
            words += [flag, *map(str, value)]
        else:
            words += [flag, _format_value(value)]
    return shlex.join(words)


def _dataset_word(dataset: str) -> str:
    """How a command names a run's local dataset (one that is no copy of a Hub dataset): the shipped sample by its
    name, another folder by its own name, as the user's copy of it (the card never shows where the run kept it)."""
    from ..settings import SAMPLE_DATASETS

    sample = next((name for name, path in SAMPLE_DATASETS.items() if Path(dataset) == path), None)
    return sample or f"{Path(dataset).name}/"


def _hardware(results: dict[str, Any]) -> str:
    """Where the run trained, as its record says: the GPU (and how many processes shared the batch), else the CPU."""
    numerics = results.get("numerics") or {}
    if not numerics.get("gpu"):
        return "the CPU" if numerics else "a machine not recorded"
    micro = (results.get("micro_batch") or 0) * (results.get("grad_accum") or 1)
    processes = results.get("global_batch", 0) // micro if micro else 1
    return f"one {numerics['gpu']}" if processes <= 1 else f"{processes} processes on {numerics['gpu']} GPUs"


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def _versions_line(versions: dict[str, Any]) -> str:
    return ", ".join(f"{name} {value}" for name, value in versions.items()) or "versions not recorded"


def _parent_hub_id(fine_tuned_from: dict[str, Any] | None) -> str | None:
    """The Hub id of the checkpoint a run was fine-tuned from, as loading recorded it (runs of 0.2 recorded only
    ``model``: an ``hf-hub:`` source there is a Hub id), else ``None``."""
    if not fine_tuned_from:
        return None
    source = fine_tuned_from["model"]
    return fine_tuned_from.get("hub_id", source.removeprefix("hf-hub:") if source.startswith("hf-hub:") else None)


def parent_name(fine_tuned_from: dict[str, Any] | None) -> str | None:
    """How a card and a commit message name the checkpoint a run was fine-tuned from: its Hub id, else its folder's
    name (a run's ``final/`` by its run folder's: ``runs/c10/final`` is ``c10``), never a path of the machine that
    trained; ``None`` for a run trained from scratch."""
    if not fine_tuned_from:
        return None
    folder = Path(fine_tuned_from["model"]).expanduser()
    named = folder.parent if folder.name == "final" and folder.parent.name else folder
    return _parent_hub_id(fine_tuned_from) or named.name


def _origin(fine_tuned_from: dict[str, Any] | None) -> dict[str, str]:
    """How the weights began, in the card's words: from scratch, or fine-tuned from a checkpoint, named by its Hub id
    when it has one, else "a local checkpoint" with the dataset it was trained on (its path means nothing on the Hub;
    the init it started from follows in the same sentence). ``origin`` ends where the init's name follows;
    ``training_origin`` starts the training section."""
    if not fine_tuned_from:
        return dict(origin="trained from scratch", training_origin="Trained from scratch")
    head = {"kept": "classifier kept", "re-initialized": "classifier re-initialized"}.get(fine_tuned_from.get("head"))
    head = f" ({head})" if head else ""
    hub_id = _parent_hub_id(fine_tuned_from)
    if hub_id:
        parent = f"[{hub_id}](https://huggingface.co/{hub_id})"
        return dict(
            origin=f"fine-tuned from {parent}{head}, a model that started",
            training_origin=f"Fine-tuned from {parent}{head}",
        )
    dataset = fine_tuned_from.get("dataset")
    trained_on = f" trained on `{hub_dataset_id(dataset)[0] or Path(dataset).name}`" if dataset else ""
    parent = f"a local checkpoint `{parent_name(fine_tuned_from)}`"
    return dict(
        origin=f"fine-tuned from {parent}{trained_on}{head}, a model that started",
        training_origin=f"Fine-tuned from {parent}{head}",
    )


def _split_attention_init(results_init: dict[str, Any], family: str) -> tuple[str, dict[str, Any]]:
    """The run's attention init (the family's own when not recorded) and the rest of its init settings."""
    init = dict(results_init)
    attention_init = init.pop("attention_init", "convit" if family == "convit" else "default")
    if attention_init not in _INIT_TITLES:
        raise ValueError(
            f"unknown attention_init {attention_init!r} in results.json; expected one of {', '.join(_INIT_TITLES)}"
        )
    if attention_init == "impulse" and "kernel_size" not in init:
        raise ValueError("results.json: init.attention_init is 'impulse' but init.kernel_size is missing")
    return attention_init, init


def _architecture_context(
    results: dict[str, Any], checkpoint_config: dict[str, Any], num_params: int
) -> dict[str, Any]:
    """What the card says about the network: its class and geometry, the name and arguments it loads with, size and
    preprocessing, from ``config.json``."""
    pretrained_cfg = checkpoint_config.get("pretrained_cfg", {})
    input_size = pretrained_cfg.get("input_size")
    if not input_size:
        raise ValueError("the checkpoint's config.json has no pretrained_cfg.input_size")
    architecture = checkpoint_config.get("architecture", results["model"])
    model_args = checkpoint_config.get("model_args", {})
    return dict(
        architecture=architecture,
        **describe_network(architecture, model_args),
        arch_line=_arch_line(model_args),
        params_m=num_params / 1e6,
        image_size=" x ".join(str(side) for side in input_size[1:]),
        mean=tuple(pretrained_cfg.get("mean", ())),
        std=tuple(pretrained_cfg.get("std", ())),
    )


def _layer_scale_line(init: dict[str, Any]) -> str | None:
    """What the init did to the attention branch's layer scale, from the run's init record (its value before and
    after where recorded, ``attn_layer_scale`` else, and whether the family's default chose it); ``None`` where it
    left the scale as built."""
    recorded = init.get("attention_layer_scale")
    after = recorded.get("after") if isinstance(recorded, dict) else init.get("attn_layer_scale")
    if after is None:
        return None
    before = recorded.get("before") if isinstance(recorded, dict) else None
    by_default = init.get("attn_layer_scale_source") == "family default"
    chosen = (
        ", the family's default" if by_default or "attn_layer_scale" in (init.get("structinit_defaults") or {}) else ""
    )
    start = f"from {before:g} (as built) to {after:g}" if isinstance(before, int | float) else f"at {after:g}"
    return (
        f"The attention branch's layer scale started {start} (`attn_layer_scale`{chosen}), so the pattern the init "
        "wrote reaches the residual stream from the first step; the MLP branch's layer scale stayed as built."
    )


def _card_metadata(results: dict[str, Any], dataset: str, repo_name: str, license: str) -> ModelCardData:
    """The card's YAML header: library, task, license, tags, dataset, the parent's Hub id (``base_model``) of a
    fine-tuned run, and top-1/top-5 as a ``model-index``."""
    eval_common = dict(
        task_type="image-classification",
        task_name="Image Classification",
        dataset_type=dataset,
        dataset_name=dataset,
        dataset_config=results.get("dataset_config"),
        dataset_split=results["split"],
    )
    return ModelCardData(
        model_name=repo_name,
        library_name="timm",
        base_model=_parent_hub_id(results.get("fine_tuned_from")),
        pipeline_tag="image-classification",
        license=license,
        tags=list(CARD_TAGS),
        datasets=[dataset] if _HUB_ID.match(dataset) else None,
        metrics=["accuracy"],
        eval_results=[
            EvalResult(metric_type=metric, metric_name=name, metric_value=results[field], **eval_common)
            for metric, name, field in (
                ("accuracy", "Top-1 accuracy (%)", "top1"),
                ("top_5_accuracy", "Top-5 accuracy (%)", "top5"),
            )
        ],
    )


def _render_card(template: str, context: dict[str, Any]) -> ModelCard:
    """Render a family's template (a value it uses that ``context`` lacks is an error), one blank line at most."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    content = environment.get_template(template).render(**context)
    return ModelCard(re.sub(r"\n{3,}", "\n\n", content))


def build_model_card(
    results: dict[str, Any],
    checkpoint_config: dict[str, Any],
    repo_id: str,
    *,
    num_params: int,
    dataset_id: str | None = None,
    license: str = "apache-2.0",
    attention_image: str | None = None,
) -> ModelCard:
    """Render the model card of a trained run.

    Args:
        results: the run's ``results.json`` (see :func:`read_results`).
        checkpoint_config: the checkpoint's timm ``config.json`` (``architecture``, ``model_args``, ``pretrained_cfg``).
        repo_id: the Hub repo the card describes; the usage snippets load from it.
        num_params: parameter count (:func:`count_parameters` of the weights file).
        dataset_id: Hub id of the dataset when ``results["dataset"]`` is a local path (see :func:`hub_dataset_id`).
        license: license id of the weights.
        attention_image: path, inside the repo, of the initial attention maps picture, when the run has one.
    """
    family = model_family(checkpoint_config.get("architecture") or results["model"])
    dataset, dataset_is_local = hub_dataset_id(results["dataset"], dataset_id, results.get("dataset_digest"))
    local_name = Path(results["dataset"]).name
    attention_init, init = _split_attention_init(results["init"], family)
    architecture = _architecture_context(results, checkpoint_config, num_params)
    registered = is_model(results["model"]) and is_model_in_modules(results["model"], list(PACKAGE_MODEL_MODULES))
    architecture["stock_loadable"] = not (
        is_model(architecture["architecture"])
        and is_model_in_modules(architecture["architecture"], list(PACKAGE_MODEL_MODULES))
    )
    repo_name = repo_id.split("/")[-1]
    context = dict(
        card_data=_card_metadata(results, dataset or f"local dataset {local_name}", repo_name, license).to_yaml(),
        family=family,
        repo_id=repo_id,
        repo_name=repo_name,
        # the registered name it was built as (a timm name of timm's own is the architecture itself)
        model_name=results["model"] if registered and not results.get("fine_tuned_from") else None,
        **_origin(results.get("fine_tuned_from")),
        **architecture,
        attention_init=attention_init,
        init_title=_INIT_TITLES[attention_init].format(k=init.get("kernel_size")),
        init=init,
        init_family=init.get("family", "vit"),
        init_target="token mixing" if init.get("family") == "mixer" else "attention",
        layer_scale_line=_layer_scale_line(init),
        init_rows=[(name, _format_value(value)) for name, value in init.items()],
        attention_image=attention_image,
        dataset_id=dataset,
        dataset_text=dataset or "a local dataset",
        local_classes=None if dataset else _local_dataset_line(results),
        dataset_config=results.get("dataset_config"),
        dataset_is_local=dataset_is_local,
        local_dataset_name=local_name,
        split=results["split"],
        num_classes=results["num_classes"],
        top1=results["top1"],
        top5=results["top5"],
        epochs=results["epochs"],
        images_seen=results["images_seen"],
        wall_time=_duration(results["wall_time_s"]),
        arg_rows=_arg_rows(results["args"], results.get("fine_tuned_from")),
        train_command=None if results.get("fine_tuned_from") else _train_command(results["args"], dataset),
        hardware=_hardware(results),
        versions_line=_versions_line(results["versions"]),
    )
    return _render_card(MODEL_FAMILIES[family], context)
