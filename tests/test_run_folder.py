"""A run folder survives a SIGKILL at any instant, and a resumed run keeps the settings it was started with."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from tiny_runs import REPO, TIMINGS, run, synthetic_args, synthetic_dataset, weights

# Run scripts/train.py with one function patched to SIGKILL the process at a precise instant.
KILLING_TRAIN = """
import os, runpy, shutil, signal, sys
from pathlib import Path
import accelerate

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

if point == "checkpoint-write":  # the model is in the temporary folder, the trainer state not yet
    kill_when(accelerate.Accelerator, "save_state", nth_call(1), after=True)
elif point == "checkpoint-delete":  # an old checkpoint renamed away, not yet removed
    kill_when(shutil, "rmtree", lambda path, *a, **k: ".deleted-" in str(path))
elif point == "final-swap-in":  # final/ staged, not yet renamed into place
    kill_when(os, "replace", lambda src, dst: Path(dst).name == "final")
elif point == "final-swap-aside":  # between the renames: the old final/ moved aside, the new one not yet in
    kill_when(os, "replace", lambda src, dst: Path(src).name == "final", after=True)
sys.argv = [os.environ["TRAIN_SCRIPT"], *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_killed_at(point: str, argv: list[str]) -> None:
    env = {
        **os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(torch.get_num_threads()), "KILL_AT": point,
        "TRAIN_SCRIPT": str(REPO / "scripts" / "train.py"),
    }  # fmt: skip
    done = subprocess.run([sys.executable, "-c", KILLING_TRAIN, *argv], env=env, capture_output=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, f"{point}: not killed: {done.stderr.decode()[-3000:]}"


def test_a_kill_at_any_instant_then_the_same_command_continues_to_the_same_weights(tmp_path) -> None:
    """Catches a run folder that a SIGKILL leaves unrecoverable (a half-written checkpoint, a half-done swap or
    deletion of a checkpoint or of final/) or that resumes wrongly: the same command with --resume latest must
    continue (or start clean) after each kill, reach the uninterrupted run's weights bit for bit, and log
    each epoch once in metrics.jsonl."""
    dataset = synthetic_dataset(tmp_path / "data")
    reference = tmp_path / "reference"
    run(synthetic_args(dataset, reference))

    out = tmp_path / "killed"
    command = synthetic_args(dataset, out, "--resume", "latest")
    run_killed_at("checkpoint-write", command)  # before the first checkpoint: epoch 1 logged, its save half done
    assert [p.name for p in (out / "checkpoints").iterdir()] == [".epoch_0001.tmp"]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
    run_killed_at("checkpoint-delete", command)  # starts clean; killed removing epoch 1 after saving epoch 2
    assert (out / "checkpoints" / "epoch_0002" / "trainer_state.json").is_file()
    assert any(p.name.startswith(".epoch_0001.deleted-") for p in (out / "checkpoints").iterdir())
    run_killed_at("final-swap-in", command)  # resumes at epoch 2; killed putting final/ in place
    assert not (out / "final").exists() and not (out / "results.json").exists()
    run(command)
    run_killed_at("final-swap-aside", command)  # the finished run again: killed with final/ moved aside
    assert not (out / "final").exists() and (out / ".final.old").exists()
    record = run(command)

    expected, got = weights(reference / "final"), weights(out / "final")
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    assert record["epochs"] == 3 and record["images_seen"] == 3 * 32
    per_epoch = [
        [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in lines]
        for lines in ((folder / "metrics.jsonl").read_text().splitlines() for folder in (reference, out))
    ]
    assert per_epoch[0] == per_epoch[1] and [line["epoch"] for line in per_epoch[1]] == [1, 2, 3]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch_0003"]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_resume_refuses_changed_settings_and_accepts_harmless_ones(tmp_path) -> None:
    """Catches a resume that silently runs with another epochs / batch / lr (the schedule no longer fits, and
    results.json would record flags the run never used), a message that does not name each difference, and a
    refusal of flags that cannot change the result (workers, logging, evaluation batch, compile)."""
    dataset = synthetic_dataset(tmp_path / "data")
    out = tmp_path / "run"
    run(synthetic_args(dataset, out, "--epochs", "1"))
    changed = synthetic_args(dataset, out, "--resume", "latest", "--epochs", "3", "--batch-size", "16", "--lr", "0.01")
    with pytest.raises(ValueError, match="started with") as refused:
        run(changed)
    message = str(refused.value)
    assert (
        "--batch-size 8 (now 16)" in message and "--epochs 1 (now 3)" in message and "--lr 0.001 (now 0.01)" in message
    )
    assert "another --output-dir" in message and "model" not in message.split("started with")[1].split(";")[0]
    harmless = ("--resume", "latest", "--epochs", "1", "--workers", "1", "--report-to", "tensorboard")
    record = run(synthetic_args(dataset, out, *harmless, "--eval-batch-size", "3", "--no-compile"))
    assert record["epochs"] == 1


def test_resume_refuses_a_checkpoint_whose_weights_do_not_fit_the_model(tmp_path, monkeypatch) -> None:
    """Catches a resume after the model code changed (same flags, other parameters) failing inside the optimizer
    load with torch's 'parameter group doesn't match' instead of a message naming the parameters and what to do."""
    from structinit_hf import run_setup

    dataset = synthetic_dataset(tmp_path / "data")
    out = tmp_path / "run"
    run(synthetic_args(dataset, out, "--epochs", "1"))
    real = run_setup.load_model

    def wider(*args, model_kwargs=None, **kwargs):  # what a change to the model code looks like to a resume
        return real(*args, model_kwargs={**model_kwargs, "mlp_ratio": 2.0}, **kwargs)

    monkeypatch.setattr(run_setup, "load_model", wider)
    with pytest.raises(ValueError, match=r"do not fit the model built now .*mlp\.fc1\.bias \(192,\) -> \(96,\)"):
        run(synthetic_args(dataset, out, "--epochs", "1", "--resume", "latest"))
