"""The run folder of :func:`structinit_hf.train.loop.train`: epoch checkpoints, ``metrics.jsonl``, recovery, and the
trained model in ``final/``.

A run folder holds ``checkpoints/epoch_XXXX/`` (accelerate's ``save_state`` plus ``trainer_state.json``,
which also records the settings the run was started with), ``metrics.jsonl`` (one line per epoch),
``final/`` and ``results.json``.  A checkpoint is written into ``checkpoints/.epoch_XXXX.tmp`` and
renamed into place only when complete, so a SIGKILL at any instant leaves the folder in a state that
:func:`clean_leftovers` and :func:`resume_point` turn into "resume from the newest complete checkpoint" or
"start clean" without a manual step; ``metrics.jsonl`` is cut back to the checkpoint, so no epoch is logged
twice.  A resumed run must keep the settings it was started with (:func:`check_same_settings`).
"""

from __future__ import annotations

import json
import shutil
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import safetensors
import safetensors.torch
import torch
from accelerate import Accelerator
from timm.models import save_for_hf
from timm.utils import ModelEmaV3
from torch import nn

from ..atomic import delete_folder, recover_folder, replace_folder, swap_in_folder, write_text
from ..models.timm_wrapper import write_checkpoint
from .errors import UsageError
from .loading import ClassifierLogits

__all__ = [
    "CHECKPOINT_PREFIX",
    "EMA_WEIGHTS",
    "METRICS",
    "RESULT_NEUTRAL_FLAGS",
    "RunState",
    "TRAINER_STATE",
    "append_metrics",
    "check_checkpoint_files",
    "check_same_settings",
    "clean_leftovers",
    "complete_checkpoints",
    "find_checkpoint",
    "load_training_state",
    "read_trainer_state",
    "reset_metrics",
    "resume_point",
    "result_flags",
    "save_final_model",
    "save_timm_folder",
    "save_training_state",
]

CHECKPOINT_PREFIX = "epoch_"


TRAINER_STATE = "trainer_state.json"


EMA_WEIGHTS = "ema.safetensors"


METRICS = "metrics.jsonl"


# flags that cannot change the trained weights or the scores: a resumed run may change them freely
RESULT_NEUTRAL_FLAGS = frozenset(
    {
        "workers", "report_to", "resume", "output_dir", "checkpoint_every", "keep_checkpoints", "compile",
        "eval_batch_size", "trust_remote_code", "allow_new_label_names",
    }
)  # fmt: skip


@dataclass
class RunState:
    """Where a run is: completed epochs, optimizer steps, training images seen and time spent."""

    epoch: int = 0
    step: int = 0
    images_seen: int = 0
    wall_time_s: float = 0.0


def complete_checkpoints(output_dir: Path) -> list[Path]:
    """The complete ``checkpoints/epoch_XXXX`` folders of a run, oldest first."""
    folder = Path(output_dir) / "checkpoints"
    found = (path for path in folder.glob(f"{CHECKPOINT_PREFIX}[0-9]*") if (path / TRAINER_STATE).is_file())
    return sorted(found)


def find_checkpoint(output_dir: Path, resume: str) -> Path | None:
    """The checkpoint ``--resume`` names: the newest complete one for ``latest`` (``None`` if there is none
    yet), else the given folder."""
    if resume == "latest":
        complete = complete_checkpoints(output_dir)
        return complete[-1] if complete else None
    path = Path(resume).expanduser()
    if not (path / TRAINER_STATE).is_file():
        raise UsageError(f"--resume {resume!r} is not a checkpoint folder (no {TRAINER_STATE}); pass 'latest' or one")
    return path


def clean_leftovers(output_dir: Path) -> None:
    """Undo what a kill left in a run folder: half-written checkpoints, half-done folder swaps and deletions.

    Call it on the main process only, before anything reads the folder.
    """
    output_dir = Path(output_dir)
    checkpoints = output_dir / "checkpoints"
    for leftover in sorted(checkpoints.glob(".*")):
        name = leftover.name
        if name.endswith(".old"):  # a swap cut between its renames: put the previous version back
            recover_folder(checkpoints / name[1 : -len(".old")])
        elif leftover.exists():
            shutil.rmtree(leftover)
    recover_folder(output_dir / "final")


def resume_point(output_dir: Path, resume: str | None) -> Path | None:
    """The checkpoint a run continues from, or ``None`` to start clean.

    Without ``--resume`` a folder that already holds a complete checkpoint is refused (its run would be
    overwritten); ``--resume latest`` on a folder with none starts clean, so the same command works
    before and after a kill at any instant.  A finished run whose checkpoints were deleted (its
    ``results.json`` stays; no kill leaves that) is refused either way rather than trained again.
    """
    output_dir = Path(output_dir)
    if resume is None and complete_checkpoints(output_dir):
        raise UsageError(f"{output_dir} already holds checkpoints; pass --resume latest or another --output-dir")
    checkpoint = find_checkpoint(output_dir, resume) if resume is not None else None
    if checkpoint is None and (output_dir / "results.json").is_file():
        raise UsageError(
            f"{output_dir} holds a finished run (results.json) and no checkpoint to resume from; pass another "
            "--output-dir, or move the old run away to train it again"
        )
    return checkpoint


def reset_metrics(output_dir: Path, last_epoch: int) -> None:
    """Cut ``metrics.jsonl`` back to the epochs up to ``last_epoch`` (0: remove it), each logged once."""
    _truncate_metrics(Path(output_dir) / METRICS, last_epoch)


def _truncate_metrics(path: Path, last_epoch: int) -> None:
    """Keep the lines of epochs up to ``last_epoch``, each once; a line cut short by a kill is dropped."""
    if not path.is_file():
        return
    kept: dict[int, str] = {}
    for line in path.read_text().splitlines():
        try:
            epoch = json.loads(line)["epoch"]
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
        if epoch <= last_epoch:
            kept[epoch] = line
    if kept:
        write_text(path, "".join(kept[epoch] + "\n" for epoch in sorted(kept)))
    else:
        path.unlink()


def append_metrics(output_dir: Path, record: dict[str, Any]) -> None:
    """Add one epoch's line to ``metrics.jsonl``."""
    with (Path(output_dir) / METRICS).open("a") as handle:
        handle.write(json.dumps(record) + "\n")


def result_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """Those of the recorded ``flags`` (:meth:`~structinit_hf.train.args.TrainingSettings.flags`) that decide a run's
    result: what a resumed run must keep (``trainer_state.json``'s ``settings``)."""
    return {key: value for key, value in flags.items() if key not in RESULT_NEUTRAL_FLAGS}


def _flag(name: str, value: Any) -> str:
    if isinstance(value, dict):
        value = " ".join(f"{key}={item}" for key, item in value.items()) or "(none)"
    elif isinstance(value, list):
        value = " ".join(str(item) for item in value)
    return f"--{name.replace('_', '-')} {value}"


def _recovery(checkpoint: Path) -> str:
    """How to go on without ``checkpoint``: the previous complete checkpoint, else a fresh start."""
    older = [path for path in complete_checkpoints(checkpoint.parent.parent) if path.name < checkpoint.name]
    fresh = "or start afresh in another --output-dir"
    if older:
        return f"resume from the previous checkpoint with --resume {older[-1]}, {fresh}"
    return f"it is the run's only checkpoint: delete {checkpoint} and rerun with --resume latest to start over, {fresh}"


def read_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """``trainer_state.json`` of ``checkpoint``; a file that does not parse is a user error naming it."""
    path = Path(checkpoint) / TRAINER_STATE
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"{path} is unreadable ({error}); {_recovery(Path(checkpoint))}") from None
    if not isinstance(state, dict):
        raise UsageError(f"{path} holds no trainer state (a JSON object); {_recovery(Path(checkpoint))}")
    return state


def check_same_settings(checkpoint: Path, settings: dict[str, Any]) -> None:
    """Refuse to resume ``checkpoint`` with settings other than those its run was started with."""
    started = read_trainer_state(checkpoint).get("settings")
    if started is None:  # a checkpoint from before settings were recorded: nothing to compare
        return
    changed = sorted(key for key in started.keys() | settings.keys() if started.get(key) != settings.get(key))
    if changed:
        differences = ", ".join(f"{_flag(key, started.get(key))} (now {settings.get(key)})" for key in changed)
        raise UsageError(
            f"cannot resume {checkpoint}: the run was started with {differences}; resume with the flags it was "
            "started with, or pass another --output-dir to start a new run with these"
        )


def check_checkpoint_files(checkpoint: Path) -> None:
    """Refuse a checkpoint with a damaged file (cut short by a full disk, a copy, an editor), naming the file.

    ``*.safetensors`` files are read whole (their header and every tensor), the ``*.bin`` files torch wrote
    (zip archives) have every member's checksum tested; nothing is unpickled here.
    """
    checkpoint = Path(checkpoint)
    for path in sorted(checkpoint.iterdir()):
        try:
            if path.suffix == ".safetensors":
                with safetensors.safe_open(str(path), framework="pt") as saved:
                    for name in saved.keys():  # noqa: SIM118  safe_open has no __iter__
                        saved.get_tensor(name)
            elif path.suffix == ".bin":
                with zipfile.ZipFile(path) as archive:
                    bad = archive.testzip()
                if bad is not None:
                    raise ValueError(f"member {bad} fails its checksum")
        except Exception as error:  # noqa: BLE001  whatever a damaged file raises: name the file
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
            raise UsageError(f"{path} is damaged ({reason}); {_recovery(checkpoint)}") from None


def save_training_state(
    accelerator: Accelerator,
    output_dir: Path,
    state: RunState,
    settings: dict[str, Any],
    ema: ModelEmaV3 | None,
    keep: int,
) -> Path:
    """Write ``checkpoints/epoch_XXXX`` (a temporary folder, then a rename); keep the newest ``keep``."""
    checkpoints = Path(output_dir) / "checkpoints"
    target = checkpoints / f"{CHECKPOINT_PREFIX}{state.epoch:04d}"
    temporary = checkpoints / f".{target.name}.tmp"
    if accelerator.is_main_process:
        if temporary.exists():
            shutil.rmtree(temporary)
        temporary.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(temporary))
    accelerator.wait_for_everyone()  # every process has written its RNG state before the folder moves
    if accelerator.is_main_process:
        if ema is not None:
            safetensors.torch.save_model(ema.module, str(temporary / EMA_WEIGHTS))
        trainer_state = {**asdict(state), "settings": settings}
        (temporary / TRAINER_STATE).write_text(json.dumps(trainer_state, indent=2) + "\n")
        swap_in_folder(temporary, target)
        for old in complete_checkpoints(output_dir)[:-keep]:
            delete_folder(old)
    accelerator.wait_for_everyone()
    return target


def _check_same_parameters(model: torch.nn.Module, checkpoint: Path) -> None:
    """Refuse a checkpoint whose weights do not fit ``model`` (the code that builds it changed since the run began)."""
    saved_file = checkpoint / "model.safetensors"
    if not saved_file.is_file():  # sharded or another format: accelerate's own checks apply
        return
    with safetensors.safe_open(str(saved_file), framework="pt") as saved:
        saved_shapes = {name: tuple(saved.get_slice(name).get_shape()) for name in saved.keys()}  # noqa: SIM118
    state = model.state_dict()
    shapes = {name: tuple(tensor.shape) for name, tensor in state.items()}
    saved_storages = {state[name].untyped_storage().data_ptr() for name in saved_shapes.keys() & state.keys()}
    tied = {
        name
        for name in state.keys() - saved_shapes.keys()
        if state[name].untyped_storage().data_ptr() in saved_storages
    }
    differences = sorted(
        f"{name} {saved_shapes.get(name, 'absent')} -> {shapes.get(name, 'absent')}"
        for name in (saved_shapes.keys() | shapes.keys()) - tied  # a tied weight is saved once
        if saved_shapes.get(name) != shapes.get(name)
    )
    if differences:
        raise UsageError(
            f"cannot resume {checkpoint}: its weights do not fit the model built now ({len(differences)} parameters "
            f"differ, e.g. {'; '.join(differences[:3])}); the model code changed since the run started: resume with "
            "that version, or pass another --output-dir to start a new run"
        )


def load_training_state(
    accelerator: Accelerator, checkpoint: Path, ema: ModelEmaV3 | None, model: torch.nn.Module
) -> RunState:
    """Restore model, optimizer, RNG states and EMA weights from ``checkpoint``; return where the run was."""
    check_checkpoint_files(checkpoint)
    saved = read_trainer_state(checkpoint)
    _check_same_parameters(accelerator.unwrap_model(model), checkpoint)
    accelerator.load_state(str(checkpoint))
    if ema is not None:
        if not (checkpoint / EMA_WEIGHTS).is_file():
            raise UsageError(f"--model-ema is on but {checkpoint} holds no EMA weights ({EMA_WEIGHTS})")
        safetensors.torch.load_model(ema.module, str(checkpoint / EMA_WEIGHTS), device=str(accelerator.device))
    try:
        return RunState(**{key: saved[key] for key in RunState.__dataclass_fields__})
    except KeyError as error:
        raise UsageError(
            f"{checkpoint / TRAINER_STATE} lacks {error.args[0]!r}; {_recovery(Path(checkpoint))}"
        ) from None


def save_final_model(
    model: nn.Module,
    out_dir: Path,
    label_names: list[str],
    *,
    init: dict[str, Any] | None = None,
    fine_tuned_from: dict[str, Any] | None = None,
) -> Path:
    """Write the trained model to ``out_dir`` so that timm and transformers both load it.

    A model of this package built from its init goes through
    :func:`structinit_hf.models.timm_wrapper.write_checkpoint` (a stock ``timm_wrapper`` folder under a stock timm name,
    with the init it started from); another timm model (a loaded checkpoint among them) is saved in timm's format,
    which transformers loads through its ``TimmWrapper``; a transformers model is saved with ``save_pretrained``,
    beside the image processor it was loaded with (if any), so
    ``AutoImageProcessor`` and evaluation read the trained folder as they read the original. A fine-tuned model's
    ``config.json`` keeps the init record of the checkpoint it came from (``structinit``) and names it
    (``fine_tuned_from``).
    """
    # a fine-tuned model's own record is empty (loaded, not initialized): it carries its parent's
    extra = {} if fine_tuned_from is None else {"structinit": dict(init or {}), "fine_tuned_from": fine_tuned_from}

    def write(folder: Path) -> None:
        network = model.model if isinstance(model, ClassifierLogits) else model
        if hasattr(getattr(network, "timm_model", network), "network_args"):  # this package's ViTs and ConViT peer
            write_checkpoint(network, folder, label_names=label_names)
        elif isinstance(model, ClassifierLogits):
            model.model.save_pretrained(folder)
            if model.processor is not None:
                model.processor.save_pretrained(folder)
        else:
            save_timm_folder(model, folder, label_names)
        if extra:
            config_file = folder / "config.json"
            config_file.write_text(json.dumps({**json.loads(config_file.read_text()), **extra}, indent=2) + "\n")

    return replace_folder(out_dir, write)


def save_timm_folder(model: nn.Module, folder: Path, label_names: list[str]) -> None:
    """timm's ``save_for_hf`` (``config.json`` + ``model.safetensors``), loadable by transformers' TimmWrapper too.

    The wrapper passes ``num_classes`` itself, so it must not also sit in ``model_args``.
    """
    save_for_hf(model, folder, model_config={"label_names": label_names}, safe_serialization=True)
    config_file = Path(folder) / "config.json"
    config = json.loads(config_file.read_text())
    config.get("model_args", {}).pop("num_classes", None)
    config_file.write_text(json.dumps(config, indent=2) + "\n")
