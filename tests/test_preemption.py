"""A preempted run loses minutes, not epochs: checkpoints inside an epoch, a signal that ends in a checkpoint, and the
resume that continues from either to the uninterrupted run's weights, bit for bit."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tiny_runs import TIMINGS, run, run_killed_at, synthetic_args, synthetic_dataset, weights

from structinit_hf.__main__ import main
from structinit_hf.train import TrainingSettings
from structinit_hf.train.cli.args import settings_from_args, training_parser
from structinit_hf.train.cli.errors import UsageError
from structinit_hf.train.data.dataloaders import EpochShuffleSampler
from structinit_hf.train.training import stopping
from structinit_hf.train.training.run_folder import LOCK_FILE, ResumePoint, with_recorded_flags
from structinit_hf.train.training.step import TrainingStep
from structinit_hf.train.training.stopping import TrainingStopped, resume_command


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Path]:
    """The dataset and an uninterrupted run of :func:`_command` (no checkpoint inside an epoch)."""
    root = tmp_path_factory.mktemp("preemption")
    dataset = synthetic_dataset(root / "data")
    run(_command(dataset, root / "reference"))
    return dataset, root / "reference"


def _command(dataset: Path, output_dir: Path, *extra: str) -> list[str]:
    """The epoch-level resume test's run: loader workers, mixup and drop-path, 3 epochs of 4 steps."""
    argv = synthetic_args(dataset, output_dir, "--workers", "2", "--mixup", "0.8", "--resume", "auto", *extra)
    argv[argv.index("depth=1")] = "depth=2"  # drop-path 0 and 0.1 (timm's rates rise from 0 over the blocks)
    return [*argv[:7], "drop_path_rate=0.1", *argv[7:]]


def _same_run(reference: Path, out: Path) -> None:
    expected, got = weights(reference / "final"), weights(out / "final")
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    per_epoch = [
        [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in lines]
        for lines in ((folder / "metrics.jsonl").read_text().splitlines() for folder in (reference, out))
    ]
    assert per_epoch[0] == per_epoch[1] and [line["epoch"] for line in per_epoch[1]] == [1, 2, 3]


def _signal_at_step(monkeypatch, *signals: int, at: int) -> None:
    """Send ``signals`` to this process during the ``at``-th micro-batch (before its backward ends)."""
    real, calls = TrainingStep.__call__, []

    def step(self, inputs, targets):
        calls.append(1)
        if len(calls) == at:
            for number in signals:
                os.kill(os.getpid(), number)
        return real(self, inputs, targets)

    monkeypatch.setattr(TrainingStep, "__call__", step)


@pytest.mark.slow
def test_a_kill_inside_an_epoch_resumes_from_its_step_checkpoint_to_the_same_weights(reference, tmp_path, monkeypatch):
    """Catches a step checkpoint that a resume cannot continue from bit for bit: batches of the epoch trained twice or
    skipped, mixup or drop-path drawn afresh instead of from the restored random state, the epoch's loss and images
    counted from the resume only; and step checkpoints named so that they sort out of training order (the resume
    must pick the newest, the prune keep it)."""
    dataset, reference_dir = reference
    passes = []
    one_pass = EpochShuffleSampler.__iter__
    monkeypatch.setattr(EpochShuffleSampler, "__iter__", lambda self: passes.append(self.epoch) or one_pass(self))
    out = tmp_path / "killed"
    command = _command(dataset, out, "--checkpoint-steps", "3")
    run_killed_at("after-checkpoint-3", command)  # steps 3 (epoch 1), epoch 1's end, step 6 (epoch 2): then killed
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch_0001", "epoch_0001_step_00000006"]
    state = json.loads((out / "checkpoints" / "epoch_0001_step_00000006" / "trainer_state.json").read_text())
    assert (state["epoch"], state["step"], state["epoch_step"]) == (1, 6, 2)
    assert main(["train", "--output-dir", str(out), "--resume", "latest"]) == 0  # the flags its checkpoint recorded
    assert passes == [1]  # the resumed pass starts in epoch 2 (the killed child's passes are its own)
    _same_run(reference_dir, out)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch_0003"]  # --keep-checkpoints 1


@pytest.mark.slow
def test_sigterm_finishes_the_step_saves_releases_the_lock_and_the_run_resumes(
    reference, tmp_path, monkeypatch, capsys
):
    """Catches a signal that kills the run (nothing saved since the last epoch, run.lock left), one obeyed in the
    middle of a step (a checkpoint of half-applied gradients), a stop whose checkpoint does not resume to the
    uninterrupted weights, and a stop line whose short resume command (--output-dir and --resume latest) trains with
    the defaults instead of the flags the run was started with."""
    dataset, reference_dir = reference
    out = tmp_path / "stopped"
    _signal_at_step(monkeypatch, signal.SIGTERM, at=6)
    monkeypatch.setattr(sys, "argv", ["/x/bin/structinit-hf", "train"])
    capsys.readouterr()
    assert main(["train", *_command(dataset, out)]) == stopping.STOPPED_EXIT_STATUS
    checkpoint = out / "checkpoints" / "epoch_0001_step_00000006"
    resume = f"structinit-hf train --output-dir {out} --resume latest"
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"stopped by SIGTERM in epoch 2 after step 6: saved {checkpoint}; resume with: {resume}"
    )
    assert not (out / LOCK_FILE).exists() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    monkeypatch.undo()
    assert main(shlex.split(resume)[1:]) == 0
    _same_run(reference_dir, out)


@pytest.mark.slow
def test_a_second_signal_stops_at_once_and_a_signal_before_any_step_saves_nothing(tmp_path, monkeypatch):
    """Catches a second signal that waits for the step (a user pressing Ctrl-C twice wants out now), a stop that
    writes a checkpoint of the step cut short, and a stop before the first step that writes a checkpoint of nothing."""
    dataset = synthetic_dataset(tmp_path / "data")
    monkeypatch.setattr(stopping, "SAME_REQUEST_S", -1.0)  # the second signal counts however soon it comes
    _signal_at_step(monkeypatch, signal.SIGUSR1, signal.SIGUSR1, at=2)
    out = tmp_path / "twice"
    with pytest.raises(KeyboardInterrupt) as interrupted:
        run(synthetic_args(dataset, out, "--epochs", "1", "--checkpoint-steps", "1"))
    assert not isinstance(interrupted.value, TrainingStopped)
    first = out / "checkpoints" / "epoch_0000_step_00000001"
    assert str(interrupted.value).startswith(f"training stopped in epoch 1; the last checkpoint is {first}: ")
    assert [p.name for p in (out / "checkpoints").iterdir() if not p.name.startswith(".")] == [first.name]
    assert not (out / LOCK_FILE).exists()

    monkeypatch.undo()
    from structinit_hf.train.training import prepare

    real_setup = prepare.setup_run

    def signalled_setup(settings):  # the signal arrives while the run is being set up
        os.kill(os.getpid(), signal.SIGINT)
        return real_setup(settings)

    monkeypatch.setattr("structinit_hf.train.training.loop.setup_run", signalled_setup)
    with pytest.raises(TrainingStopped, match="^stopped by SIGINT in epoch 1 at step 0: nothing trained yet, so"):
        run(synthetic_args(dataset, tmp_path / "early", "--epochs", "1"))
    assert not (tmp_path / "early" / "checkpoints").exists()


def test_the_resume_command_is_the_output_dir_once_a_checkpoint_holds_the_flags(monkeypatch) -> None:
    """Catches a resume line that keeps the old --resume value, drops the user's flags before the first checkpoint
    (nothing recorded them yet), lists them all once one did, or names another program or command."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    argv = ["/x/bin/structinit-hf", "train", "--output-dir", "my runs/a", "--epochs", "3", "--resume", "runs/a/c/e"]
    assert resume_command(Path("my runs/a/checkpoints/epoch_0001"), argv) == (
        "structinit-hf train --output-dir 'my runs/a' --resume latest"
    )
    assert resume_command(None, argv) == "structinit-hf train --output-dir 'my runs/a' --epochs 3 --resume latest"
    assert resume_command(None, ["scripts/train.py", "--resume=latest", "--epochs", "3"]) == (
        "python scripts/train.py --epochs 3 --resume latest"
    )
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert resume_command(Path("runs/a/checkpoints/epoch_0001"), ["/site/structinit_hf/__main__.py", "train"]) == (
        "accelerate launch <your launch flags> -m structinit_hf train --output-dir runs/a --resume latest"
    )


def test_a_resume_takes_the_flags_not_given_from_its_checkpoint_and_checks_those_given(tmp_path) -> None:
    """Catches `--output-dir X --resume latest` alone training with the defaults (the first check to trip was the
    memory plan's, for --batch-size 512) or dropping the run's checkpoint clock, and a flag given on the command line
    that is replaced by the recorded one (even one given at its default value) instead of being refused when it
    differs."""
    started = TrainingSettings().with_flags(
        batch_size=16, epochs=3, model_kwargs={"depth": 1}, grad_accum=2, checkpoint_minutes=10.0, keep_checkpoints=1
    )
    checkpoint = tmp_path / "run" / "checkpoints" / "epoch_0001"
    checkpoint.mkdir(parents=True)
    state = {"epoch": 1, "step": 2, "images_seen": 32, "wall_time_s": 1.0, "settings": started.flags()}
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))

    def resumed(*flags: str) -> TrainingSettings:
        args = training_parser().parse_args(["--output-dir", str(tmp_path / "run"), "--resume", "latest", *flags])
        return with_recorded_flags(settings_from_args(args), args.flags_given)

    alone = resumed()
    assert alone.recipe == replace(started.recipe, grad_accum=None)  # the run's accumulation: open_run_folder's
    assert (alone.model, alone.data, alone.speed) == (started.model, started.data, started.speed)
    assert alone.run == replace(started.run, output_dir=tmp_path / "run", resume="latest")
    ResumePoint(checkpoint, state).check_same_flags(alone.flags(grad_accum=2))
    assert resumed("--keep-checkpoints", "3").run.keep_checkpoints == 3  # a flag given is taken as given
    for flags, refused in (
        (["--batch-size", "512"], "--batch-size 16 (now 512)"),
        (["--epochs", "4"], "--epochs 3 (now 4)"),
    ):
        with pytest.raises(UsageError, match=re.escape(f"the run was started with {refused};")):
            ResumePoint(checkpoint, state).check_same_flags(resumed(*flags).flags(grad_accum=2))
    fresh = training_parser().parse_args(["--output-dir", str(tmp_path / "new"), "--resume", "auto"])
    assert with_recorded_flags(settings_from_args(fresh), fresh.flags_given) == settings_from_args(fresh)
    typo = training_parser().parse_args(["--output-dir", str(tmp_path / "new"), "--resume", "latest"])
    with pytest.raises(
        UsageError, match="holds no checkpoint to resume from; check --output-dir, or pass --resume auto"
    ):
        with_recorded_flags(settings_from_args(typo), typo.flags_given)


@pytest.mark.slow
def test_compare_stopped_by_a_signal_says_how_to_resume_and_its_rerun_resumes_the_run(tmp_path, monkeypatch, capsys):
    """Catches a comparison that a signal kills (its lock left, the run's steps lost), a line that names train's
    command instead of compare's, and a rerun that trains the stopped run afresh instead of resuming it."""
    tiny = ["--epochs", "1", "--max-train-samples", "64", "--batch-size", "32", "--model-kwargs", "depth=1"]
    command = ["compare", "--arms", "default", "mimetic", *tiny]
    assert main([*command, "--output-dir", str(tmp_path / "clean")]) == 0
    out = tmp_path / "stopped"
    _signal_at_step(monkeypatch, signal.SIGTERM, at=3)  # the first step of the second run (2 steps each)
    capsys.readouterr()
    assert main([*command, "--output-dir", str(out)]) == 75
    last = capsys.readouterr().err.strip().splitlines()[-1]
    checkpoint = out / "mimetic-seed0" / "checkpoints" / "epoch_0000_step_00000001"
    assert last.startswith(f"stopped by SIGTERM in epoch 1 after step 1: saved {checkpoint}; resume with: ")
    assert last.split("resume with: ")[1].startswith("structinit-hf compare ") and f"--output-dir {out}" in last
    assert not (out / LOCK_FILE).exists() and not (out / "mimetic-seed0" / LOCK_FILE).exists()
    monkeypatch.undo()
    assert main([*command, "--output-dir", str(out)]) == 0
    assert f"resumed from {checkpoint}" in (out / "mimetic-seed0" / "train.log").read_text()
    scores = [json.loads((folder / "results.json").read_text())["top1"] for folder in (tmp_path / "clean", out)]
    assert scores[0] == scores[1]


# scripts/train.py in each process of `accelerate launch`: the process of rank SIGNAL_RANK signals itself during its
# SIGNAL_AT-th micro-batch (the other receives nothing)
SIGNALLING_TRAIN = """
import os, runpy, signal, sys
import structinit_hf.train.training.step as step_module
real, calls = step_module.TrainingStep.__call__, []
def step(self, inputs, targets):
    calls.append(1)
    if os.environ["RANK"] == os.environ["SIGNAL_RANK"] and len(calls) == int(os.environ["SIGNAL_AT"]):
        os.kill(os.getpid(), signal.SIGUSR1)
    return real(self, inputs, targets)
step_module.TrainingStep.__call__ = step
sys.argv = [os.environ["TRAIN_SCRIPT"], *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_under_accelerate_launch_a_signal_to_one_process_stops_both_after_the_same_step(tmp_path):
    """Catches processes that disagree on the step to stop at (the one signalled stops, the other waits for it in the
    next collective until a timeout), and a checkpoint written by one process only."""
    import subprocess

    from tiny_runs import REPO, script_env

    dataset = synthetic_dataset(tmp_path / "data")
    out, wrapper = tmp_path / "run", tmp_path / "signalling_train.py"
    wrapper.write_text(SIGNALLING_TRAIN)
    launch = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
        "1", "--mixed_precision", "no", "--dynamo_backend", "no", str(wrapper), *synthetic_args(dataset, out),
    ]  # fmt: skip
    env = script_env(
        ACCELERATE_USE_CPU="1", SIGNAL_RANK="1", SIGNAL_AT="3", TRAIN_SCRIPT=str(REPO / "scripts" / "train.py")
    )
    done = subprocess.run(launch, env=env, capture_output=True, text=True, timeout=300)
    lines = sorted(
        "stopped by" + line.split("stopped by", 1)[1] for line in done.stderr.splitlines() if "stopped by" in line
    )
    checkpoint = out / "checkpoints" / "epoch_0000_step_00000003"
    resume = shlex.join([str(REPO / "scripts" / "train.py"), "--output-dir", str(out), "--resume", "latest"])
    assert lines == [
        f"stopped by {name} in epoch 1 after step 3: saved {checkpoint}; resume with: accelerate launch <your launch "
        f"flags> {resume}"
        for name in ("SIGUSR1", "a signal on another process")
    ], done.stderr[-3000:]
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert (state["step"], state["epoch_step"]) == (3, 3) and sorted(os.listdir(out / "checkpoints")) == [
        checkpoint.name
    ]
    assert {path.name for path in checkpoint.glob("random_states_*.pkl")} == {
        "random_states_0.pkl",
        "random_states_1.pkl",
    }
    assert not (out / LOCK_FILE).exists()


def test_the_checkpoint_clock_counts_steps_and_minutes_since_the_last_checkpoint(monkeypatch) -> None:
    """Catches a minute clock that counts from the run's start instead of the last checkpoint (a checkpoint at every
    step once M minutes have passed), step checkpoints at an epoch's last step (the epoch's own checkpoint follows),
    and a stop that saves again what the newest checkpoint already holds."""
    from types import SimpleNamespace

    now = [1000.0]
    monkeypatch.setattr(stopping.time, "monotonic", lambda: now[0])
    one = SimpleNamespace(num_processes=1)
    clock = stopping.Checkpointing(steps=None, minutes=0.5)
    assert clock.after_step(one, 1, last_of_epoch=False) == (False, False)
    now[0] += 30
    assert clock.after_step(one, 2, last_of_epoch=True) == (False, False)
    assert clock.after_step(one, 3, last_of_epoch=False) == (True, False)
    clock.saved(3)
    now[0] += 29
    assert clock.after_step(one, 4, last_of_epoch=False) == (False, False)
    steps = stopping.Checkpointing(steps=4, minutes=None, saved_step=4)
    assert [steps.after_step(one, step, last_of_epoch=False)[0] for step in range(5, 13)] == [0, 0, 0, 1, 0, 0, 0, 1]
    steps.signal = signal.SIGTERM
    assert steps.after_step(one, 12, last_of_epoch=False) == (True, True)
    steps.saved(12)
    assert steps.after_step(one, 12, last_of_epoch=True) == (False, True)  # nothing new since checkpoint 12
