"""Tiny training runs shared by the training tests: a depth-1, 16 px ViT and a synthetic dataset."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import tempfile
from pathlib import Path

import datasets
import torch
from PIL import Image
from safetensors.torch import load_file

from structinit_hf.train import run as run_training
from structinit_hf.train.cli.args import settings_from_args, training_parser

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = [
    "--model",
    "vit_tiny_impulse3",
    "--model-kwargs",
    "depth=1",
    "img_size=16",
    "patch_size=4",
    "embed_dim=48",
]
# differ between identical runs
TIMINGS = {"images_per_sec", "val_images_per_sec", "wall_time_s", "train_s", "data_wait_s", "val_s"}


def run(argv: list[str]) -> dict:
    return run_training(settings_from_args(training_parser().parse_args(argv))).results


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def synthetic_dataset(folder: Path, bad_row: int | None = None) -> Path:
    """A save_to_disk dataset of 32 train and 8 test random 16 px images in 4 classes (class names recorded)."""
    generator = torch.Generator().manual_seed(0)
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=list("abcd"))})

    def split(count: int) -> datasets.Dataset:
        pixels = torch.randint(0, 256, (count, 16, 16, 3), generator=generator, dtype=torch.uint8).numpy()
        images: list = [Image.fromarray(array) for array in pixels]
        if bad_row is not None and count == 32:
            images[bad_row] = {"path": "broken.png", "bytes": b"\x89PNG truncated"}
        return datasets.Dataset.from_dict({"img": images, "label": [i % 4 for i in range(count)]}, features=features)

    datasets.DatasetDict({"train": split(32), "test": split(8)}).save_to_disk(folder)
    return folder


def image_folder(folder: Path, classes: list[str], per_class: int = 8) -> Path:
    """An ``imagefolder`` dataset: one sub-folder of random 20 px PNGs per class (no split folders)."""
    generator = torch.Generator().manual_seed(1)
    for name in classes:
        (folder / name).mkdir(parents=True)
        for index in range(per_class):
            pixels = torch.randint(0, 256, (20, 20, 3), generator=generator, dtype=torch.uint8).numpy()
            Image.fromarray(pixels).save(folder / name / f"{index}.png")
    return folder


def synthetic_args(dataset: Path, output_dir: Path, *extra: str) -> list[str]:
    """Three epochs of 4 steps of 8 images, one checkpoint kept: every kind of folder swap happens."""
    return [
        *TINY_MODEL, "--dataset", str(dataset), "--output-dir", str(output_dir), "--val-split", "0",
        "--batch-size", "8", "--epochs", "3", "--warmup-epochs", "1", "--keep-checkpoints", "1", *extra,
    ]  # fmt: skip


# Run scripts/train.py with one function patched to SIGKILL the process at a precise instant (KILL_AT), or to
# stop it, alive and holding its run folder, before its first epoch (KILL_AT=pause: it writes PAUSED_FILE and
# sleeps).  No polling: where the process dies or waits is fixed by the patch, not by timing.
KILLING_TRAIN = """
import os, runpy, shutil, signal, sys, time
from pathlib import Path
import accelerate
import structinit_hf.train.training.checkpoints, structinit_hf.train.training.loop

point, calls = os.environ["KILL_AT"], []

def kill_when(owner, name, condition, after=False):
    real = getattr(owner, name)
    def patched(*args, **kwargs):
        hit = condition(*args, **kwargs)
        if hit and not after:
            os.kill(os.getpid(), signal.SIGKILL)
        result = real(*args, **kwargs)
        if hit:
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    setattr(owner, name, patched)

def nth_call(n):
    def condition(*args, **kwargs):
        calls.append(1)
        return len(calls) == n
    return condition

def pause(*args, **kwargs):
    Path(os.environ["PAUSED_FILE"]).write_text(str(os.getpid()))
    time.sleep(3600)

if point == "checkpoint-write":  # the model is in the temporary folder, the trainer state not yet
    kill_when(accelerate.Accelerator, "save_state", nth_call(1), after=True)
elif point.startswith("after-checkpoint-"):  # checkpoint N renamed into place, older ones not yet deleted
    checkpoints = structinit_hf.train.training.checkpoints
    kill_when(checkpoints, "swap_in_folder", nth_call(int(point.split("-")[-1])), after=True)
elif point == "checkpoint-delete":  # an old checkpoint renamed away, not yet removed
    kill_when(shutil, "rmtree", lambda path, *a, **k: ".deleted-" in str(path))
elif point == "final-swap-in":  # final/ staged, not yet renamed into place
    kill_when(os, "replace", lambda src, dst: Path(dst).name == "final")
elif point == "final-swap-aside":  # between the renames: the old final/ moved aside, the new one not yet in
    kill_when(os, "replace", lambda src, dst: Path(src).name == "final", after=True)
elif point == "pause":  # set up, run folder locked, before the first epoch
    structinit_hf.train.training.loop.train_one_epoch = pause
elif point == "pause-in-step":  # inside the first step until a stop signal is noted, then WAIT_AFTER_SIGNAL seconds
    import structinit_hf.train.training.step
    real_step = structinit_hf.train.training.step.TrainingStep.__call__
    def paused_step(self, *args):
        if not calls:
            calls.append(1)
            Path(os.environ["PAUSED_FILE"]).write_text(str(os.getpid()))
            noted, deadline = signal.getsignal(signal.SIGINT).__self__, time.monotonic() + 240
            while noted.signal is None and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(float(os.environ.get("WAIT_AFTER_SIGNAL", "0")))
        return real_step(self, *args)
    structinit_hf.train.training.step.TrainingStep.__call__ = paused_step
sys.argv = [os.environ["TRAIN_SCRIPT"], *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def script_env(**extra: str) -> dict[str, str]:
    """The environment a test starts a script in: offline, the test's thread count."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(torch.get_num_threads()), **extra}


def _forked_main(code: str, argv: list[str], env: dict[str, str], output: int) -> None:
    os.dup2(output, 1)
    os.dup2(output, 2)
    sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)  # the child's until it ends
    os.environ.update(env)
    sys.argv = ["-c", *argv]
    exec(code, {"__name__": "__main__"})


def run_forked(code: str, argv: list[str], **env: str) -> tuple[int, str]:
    """Run ``python -c code argv`` with ``env`` added, in a child forked from this process: torch, timm and
    transformers are imported already, so it starts in a moment instead of seconds. Returns the child's exit code
    (``-signal`` when a signal ended it) and what it printed on stdout and stderr."""
    with tempfile.TemporaryFile("w+") as output:
        child = multiprocessing.get_context("fork").Process(
            target=_forked_main, args=(code, argv, env, output.fileno())
        )
        child.start()
        child.join(timeout=300)
        assert child.exitcode is not None, "the forked run did not end in 300 s"
        output.seek(0)
        return child.exitcode, output.read()


def run_killed_at(point: str, argv: list[str]) -> None:
    """Run ``scripts/train.py argv`` in a forked child that SIGKILLs itself at ``point`` (see :data:`KILLING_TRAIN`)."""
    status, output = run_forked(KILLING_TRAIN, argv, KILL_AT=point, TRAIN_SCRIPT=str(REPO / "scripts" / "train.py"))
    assert status == -signal.SIGKILL, f"{point}: not killed: {output[-3000:]}"
