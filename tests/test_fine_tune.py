"""Fine-tuning a checkpoint the project wrote on a user's image folder, as timm's --pretrained --num-classes does."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import timm
import torch
from safetensors.torch import load_file
from tiny_runs import REPO, image_folder, run, run_forked, script_env, synthetic_args, synthetic_dataset, weights
from transformers import AutoModelForImageClassification

from structinit_hf.train.training import loop

pytestmark = pytest.mark.slow  # trains


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> SimpleNamespace:
    """A finished 4-class run of vit_tiny_impulse3 (16 px, patch 4, depth 1) and a 3-class image folder."""
    root = tmp_path_factory.mktemp("fine_tune")
    run(synthetic_args(synthetic_dataset(root / "data"), root / "A", "--epochs", "1"))
    return SimpleNamespace(root=root, final=root / "A" / "final", images=image_folder(root / "images", list("xyz")))


def _fine_tune(parent: SimpleNamespace, out: Path, *extra: str) -> dict:
    argv = ["--model", str(parent.final), "--dataset", str(parent.images), "--val-split", "0.25", "--batch-size", "6"]
    return run([*argv, "--epochs", "1", "--warmup-epochs", "0", "--output-dir", str(out), *extra])


# scripts/train.py in a forked Python, with the model's tensors saved (FIRST_STEP) when the first epoch starts
FIRST_STEP_TRAIN = """
import os, runpy, sys
from safetensors.torch import save_file
import structinit_hf.train.training.loop as training

train_one_epoch = training.train_one_epoch

def record_start(run, epoch):
    if epoch == 0:
        state = run.accelerator.unwrap_model(run.model).state_dict()
        save_file({k: v.detach().contiguous() for k, v in state.items()}, os.environ["FIRST_STEP"])
    return train_one_epoch(run, epoch)

training.train_one_epoch = record_start
sys.argv = [os.environ["TRAIN_SCRIPT"], *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_checkpoint_fine_tunes_on_other_classes(parent, tmp_path):
    """Through scripts/train.py in a forked process: the backbone starts as the checkpoint's, the head is new with one
    output per class folder, and every record of the run names the parent and keeps its init."""
    out, first_step = tmp_path / "B", tmp_path / "first_step.safetensors"
    argv = ["--model", str(parent.final), "--dataset", str(parent.images), "--val-split", "0.25", "--batch-size", "6"]
    argv += ["--epochs", "1", "--warmup-epochs", "0", "--output-dir", str(out)]
    train_script = str(REPO / "scripts" / "train.py")
    status, output = run_forked(FIRST_STEP_TRAIN, argv, FIRST_STEP=str(first_step), TRAIN_SCRIPT=train_script)
    assert status == 0, output[-3000:]
    assert "fine-tuning" in output and "classifier re-initialized for 3 classes (the checkpoint had 4)" in output
    started, saved = load_file(first_step), weights(parent.final)
    assert started["head.weight"].shape == (3, 48)
    for key, value in saved.items():
        if not key.startswith("head."):
            torch.testing.assert_close(started[key], value, rtol=0, atol=0, msg=key)
    results = json.loads((out / "results.json").read_text())
    parent_config = json.loads((parent.final / "config.json").read_text())
    config = json.loads((out / "final" / "config.json").read_text())
    assert config["label_names"] == ["x", "y", "z"] and config["num_classes"] == 3
    assert config["structinit"] == parent_config["structinit"] and config["structinit"]["attention_init"] == "impulse"
    assert config["fine_tuned_from"] == results["fine_tuned_from"]
    assert results["fine_tuned_from"] == {
        "model": str(parent.final), "head": "re-initialized", "checkpoint_classes": 4, "resampled": [],
        "hub_id": None, "dataset": str(parent.root / "data"),
    }  # fmt: skip
    assert results["init"] == parent_config["structinit"] and results["label_names"] == ["x", "y", "z"]


def test_the_same_labels_keep_the_head(parent, tmp_path, monkeypatch):
    heads = []
    monkeypatch.setattr(loop, "train_one_epoch", lambda run_, epoch: heads.append(run_.model.head.weight.clone()))
    with pytest.raises(TypeError):  # the patched epoch returns nothing: the run stops after the first call
        run(synthetic_args(parent.root / "data", tmp_path / "C", "--model", str(parent.final)))
    torch.testing.assert_close(heads[0], weights(parent.final)["head.weight"], rtol=0, atol=0)


def test_another_input_size_resamples_the_position_embedding(parent, tmp_path):
    results = _fine_tune(parent, tmp_path / "D", "--model-kwargs", "img_size=32")
    assert results["fine_tuned_from"]["resampled"] == ["img_size 16 -> 32 (position embedding resampled as timm does)"]
    config = json.loads((tmp_path / "D" / "final" / "config.json").read_text())
    assert config["pretrained_cfg"]["input_size"] == [3, 32, 32]
    assert weights(tmp_path / "D" / "final")["pos_embed"].shape == (1, 64, 48)  # 8 x 8 patches of 4 px


def test_stock_timm_and_transformers_swap_the_head_of_a_run_folder(parent):
    model = timm.create_model(f"local-dir:{parent.final}", pretrained=True, num_classes=3)
    assert model.num_classes == 3
    torch.testing.assert_close(model.blocks[0].attn.qkv.weight, weights(parent.final)["blocks.0.attn.qkv.weight"])
    wrapped = AutoModelForImageClassification.from_pretrained(parent.final, num_labels=3, ignore_mismatched_sizes=True)
    assert wrapped.timm_model.head.weight.shape == (3, 48)


def test_a_folder_without_a_classifier_entry_still_fine_tunes(parent, tmp_path):
    """Checkpoints of 0.2 recorded only the data keys in pretrained_cfg: the classifier is taken from timm's own cfg."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "model.safetensors").write_bytes((parent.final / "model.safetensors").read_bytes())
    config = json.loads((parent.final / "config.json").read_text())
    config["pretrained_cfg"] = {k: config["pretrained_cfg"][k] for k in ("input_size", "mean", "std", "crop_pct")}
    (old / "config.json").write_text(json.dumps(config))
    results = _fine_tune(SimpleNamespace(final=old, images=parent.images), tmp_path / "E")
    assert results["fine_tuned_from"]["head"] == "re-initialized" and results["num_classes"] == 3


def test_a_fine_tuned_run_publishes_with_its_parent_named(parent, tmp_path, script_in_process):
    _fine_tune(parent, tmp_path / "F")
    argv = ["--run-dir", str(tmp_path / "F"), "--repo-id", "me/tiny-ft", "--dataset-id", "me/images", "--dry-run"]
    done = script_in_process("push_to_hub", argv)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "fine-tuned from a local checkpoint `A` trained on `data` (classifier re-initialized), a model that started"
        in done.stdout
    )
    assert "commit would be 'Upload run F: fine-tuned from A, top-1" in done.stdout
    assert str(parent.root) not in done.stdout  # no path of this machine in the card or the commit message
    assert "with **structured (impulse 3x3) initialization**" in done.stdout
    assert "Registered as" not in done.stdout


def _as_from_a_shell() -> None:
    """Start the child with SIGINT deliverable and at its default, as a shell starts a command, whatever this test
    process inherited or changed (an ignored or blocked SIGINT is passed on to children and would never arrive)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stopped_by_ctrl_c(argv: list[str], paused: Path, second_after: float | None = None) -> tuple[int, str]:
    """Start ``train`` as a shell does, paused inside its first step; press Ctrl-C (and again ``second_after`` seconds
    later); return its exit status and its last stderr line."""
    env = script_env(
        KILL_AT="pause-in-step", PAUSED_FILE=str(paused), TRAIN_SCRIPT=str(REPO / "scripts" / "train.py"),
        WAIT_AFTER_SIGNAL="0" if second_after is None else "60",
    )  # fmt: skip
    from tiny_runs import KILLING_TRAIN

    process = subprocess.Popen(
        [sys.executable, "-c", KILLING_TRAIN, *argv], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
        preexec_fn=_as_from_a_shell,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while not paused.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    if second_after is not None:
        time.sleep(second_after)
        process.send_signal(signal.SIGINT)
    stderr = process.communicate(timeout=120)[1].decode()
    assert "Traceback" not in stderr, stderr[-3000:]
    return process.returncode, stderr.strip().splitlines()[-1]


def test_ctrl_c_saves_a_checkpoint_in_one_line_that_says_how_to_resume_and_twice_stops_at_once(parent, tmp_path):
    """Ctrl-C inside the first step: the step finishes and is saved, one line names the checkpoint and the exact
    command that resumes, exit status 75; that command, stopped by Ctrl-C twice, stops at once (130) and names the
    checkpoint it would resume from."""
    out = tmp_path / "G"
    argv = synthetic_args(parent.root / "data", out)
    status, last = _stopped_by_ctrl_c(argv, tmp_path / "paused")
    checkpoint = out / "checkpoints" / "epoch_0000_step_00000001"
    resume = ["--output-dir", str(out), "--resume", "latest"]  # the flags not given: those the checkpoint recorded
    assert status == 75
    assert last == (
        f"stopped by SIGINT in epoch 1 after step 1: saved {checkpoint}; resume with: "
        + shlex.join(["python", str(REPO / "scripts" / "train.py"), *resume])
    )
    status, last = _stopped_by_ctrl_c(resume, tmp_path / "paused-again", second_after=1.5)
    assert status == 130 and last.startswith(
        f"interrupted: training stopped in epoch 1; the last checkpoint is {checkpoint}: rerun the same command"
    ), last
