"""Checkpoints: ``checkpoints/epoch_XXXX/`` (an epoch's end) and ``checkpoints/epoch_XXXX_step_YYYYYYYY/`` (inside
epoch XXXX + 1, after optimizer step YYYYYYYY), written whole or not at all, read back, checked; names sort in
training order.

A checkpoint is accelerate's ``save_state`` plus ``trainer_state.json`` (where the run was, and the result flags it
was started with) and, with ``--model-ema``, the EMA weights. It is written into ``checkpoints/.epoch_XXXX.tmp`` and
renamed into place only when complete, so a SIGKILL at any instant leaves either the previous checkpoints or the new
one; what a kill leaves is cleared by :mod:`.run_folder`, which also decides which checkpoint a run resumes from.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import safetensors
import safetensors.torch
import torch
from accelerate import Accelerator
from timm.utils import ModelEmaV3

from ...atomic import delete_folder, swap_in_folder, write_failure
from ..cli.errors import UsageError

__all__ = [
    "CHECKPOINT_PREFIX",
    "EMA_WEIGHTS",
    "RunState",
    "TRAINER_STATE",
    "check_checkpoint_files",
    "complete_checkpoints",
    "find_checkpoint",
    "load_training_state",
    "read_trainer_state",
    "save_training_state",
    "writing",
]

CHECKPOINT_PREFIX = "epoch_"


TRAINER_STATE = "trainer_state.json"


EMA_WEIGHTS = "ema.safetensors"


@dataclass
class RunState:
    """Where a run is: completed epochs, optimizer steps, training images seen and time spent; inside an epoch, its
    optimizer steps so far, their summed loss (the mean over processes of each one's sum) and their seconds."""

    epoch: int = 0
    step: int = 0
    images_seen: int = 0
    wall_time_s: float = 0.0
    epoch_step: int = 0
    epoch_loss_sum: float = 0.0
    epoch_seconds: float = 0.0

    @property
    def checkpoint_name(self) -> str:
        """``epoch_XXXX`` at an epoch's end, ``epoch_XXXX_step_YYYYYYYY`` inside the next one."""
        inside = f"_step_{self.step:08d}" if self.epoch_step else ""
        return f"{CHECKPOINT_PREFIX}{self.epoch:04d}{inside}"


_REQUIRED_STATE = ("epoch", "step", "images_seen", "wall_time_s")  # what every checkpoint records (the rest: 0)


def complete_checkpoints(output_dir: Path) -> list[Path]:
    """The complete ``checkpoints/epoch_XXXX`` folders of a run, oldest first."""
    folder = Path(output_dir) / "checkpoints"
    found = (path for path in folder.glob(f"{CHECKPOINT_PREFIX}[0-9]*") if (path / TRAINER_STATE).is_file())
    return sorted(found)


def last_good(output_dir: Path) -> str:
    """``the last good checkpoint is <path>`` (or that there is none yet): what a stopped run leaves to resume from."""
    checkpoints = complete_checkpoints(output_dir)
    return f"the last good checkpoint is {checkpoints[-1]}" if checkpoints else "no checkpoint was written yet"


@contextmanager
def writing(path: Path, output_dir: Path) -> Iterator[None]:
    """Turn a failed write of ``path`` (a full disk, a quota, a read-only or vanished folder; torch's writer included)
    into one ``OSError`` line naming the file, the OS's reason and the run's last good checkpoint."""
    try:
        yield
    except (OSError, RuntimeError) as error:
        reason = write_failure(error, path)
        if reason is None:
            raise
        failed = getattr(error, "filename", None) or path
        raise OSError(
            f"could not write {failed}: {reason}; {last_good(output_dir)}. Free space (or pass another --output-dir) "
            "and rerun the same command with --resume latest"
        ) from error


def find_checkpoint(output_dir: Path, resume: str) -> Path | None:
    """The checkpoint ``--resume`` names: the newest complete one for ``latest`` (refused where there is none, as
    transformers' ``Trainer(resume_from_checkpoint=True)`` refuses) and for ``auto`` (``None`` where there is none: a
    fresh start, so one command serves a job started and restarted), else the given folder."""
    if resume in ("latest", "auto"):
        complete = complete_checkpoints(output_dir)
        if not complete and resume == "latest" and not (Path(output_dir) / "results.json").is_file():  # else: finished
            raise UsageError(
                f"--resume latest: {output_dir} holds no checkpoint to resume from; check --output-dir, or pass "
                "--resume auto to start a fresh run where there is none"
            )
        return complete[-1] if complete else None
    path = Path(resume).expanduser()
    if not (path / TRAINER_STATE).is_file():
        raise UsageError(
            f"--resume {resume!r} (resume={resume!r}) is not a checkpoint folder (no {TRAINER_STATE}); pass 'latest', "
            "'auto' or one"
        )
    return path


def _recovery(checkpoint: Path) -> str:
    """How to go on without ``checkpoint``: the previous complete checkpoint, else a fresh start."""
    older = [path for path in complete_checkpoints(checkpoint.parent.parent) if path.name < checkpoint.name]
    fresh = "or start afresh in another --output-dir"
    if older:
        return f"resume from the previous checkpoint with --resume {older[-1]}, {fresh}"
    return f"it is the run's only checkpoint: delete {checkpoint} and rerun with --resume auto to start over, {fresh}"


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
    flags: dict[str, Any],
    ema: ModelEmaV3 | None,
    keep: int,
) -> Path:
    """Write ``checkpoints/epoch_XXXX`` (a temporary folder, then a rename), recording ``state`` and the run's
    ``flags`` (what a resume takes the flags it is not given from, and must keep those deciding the result); keep the
    newest ``keep``."""
    checkpoints = Path(output_dir) / "checkpoints"
    target = checkpoints / state.checkpoint_name
    temporary = checkpoints / f".{target.name}.tmp"
    try:  # the reason is asked of the disk while the half-written folder still fills it; then it goes
        with writing(target, output_dir):
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
                trainer_state = {**asdict(state), "settings": flags}  # older runs wrote the result flags only
                (temporary / TRAINER_STATE).write_text(json.dumps(trainer_state, indent=2) + "\n")
                swap_in_folder(temporary, target)
    except BaseException:
        if accelerator.is_main_process:
            shutil.rmtree(temporary, ignore_errors=True)
        raise
    if accelerator.is_main_process:
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
    accelerator: Accelerator,
    checkpoint: Path,
    trainer_state: dict[str, Any],
    ema: ModelEmaV3 | None,
    model: torch.nn.Module,
) -> RunState:
    """Restore model, optimizer, RNG states and EMA weights from ``checkpoint`` (whose ``trainer_state.json`` was read
    as ``trainer_state``); return where the run was."""
    check_checkpoint_files(checkpoint)
    saved = trainer_state
    _check_same_parameters(accelerator.unwrap_model(model), checkpoint)
    accelerator.load_state(str(checkpoint))
    if ema is not None:
        if not (checkpoint / EMA_WEIGHTS).is_file():
            raise UsageError(f"--model-ema is on but {checkpoint} holds no EMA weights ({EMA_WEIGHTS})")
        safetensors.torch.load_model(ema.module, str(checkpoint / EMA_WEIGHTS), device=str(accelerator.device))
    missing = [key for key in _REQUIRED_STATE if key not in saved]
    if missing:
        raise UsageError(f"{checkpoint / TRAINER_STATE} lacks {missing[0]!r}; {_recovery(Path(checkpoint))}")
    return RunState(**{key: saved[key] for key in RunState.__dataclass_fields__ if key in saved})
