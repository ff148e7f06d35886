"""A run folder survives a SIGKILL at any instant, and a resumed run keeps the settings it was started with."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tiny_runs import (
    KILLING_TRAIN,
    REPO,
    TIMINGS,
    run,
    run_forked,
    run_killed_at,
    script_env,
    synthetic_args,
    synthetic_dataset,
    weights,
)

from structinit_hf.train.cli.errors import UsageError
from structinit_hf.train.data.dataloaders import EpochShuffleSampler
from structinit_hf.train.training.run_folder import LOCK_FILE, acquire_run_lock

pytestmark = pytest.mark.slow  # every test here trains, some in forked or fresh processes


def test_a_kill_at_any_instant_then_the_same_command_continues_to_the_same_weights(tmp_path) -> None:
    """Catches a run folder that a SIGKILL leaves unrecoverable (a half-written checkpoint, a half-done swap or
    deletion of a checkpoint or of final/) or that resumes wrongly: the same command with --resume latest must
    continue (or start clean) after each kill, reach the uninterrupted run's weights bit for bit, and log
    each epoch once in metrics.jsonl."""
    dataset = synthetic_dataset(tmp_path / "data")
    reference = tmp_path / "reference"
    run(synthetic_args(dataset, reference))

    out = tmp_path / "killed"
    command = synthetic_args(dataset, out, "--resume", "auto")
    run_killed_at("checkpoint-write", command)  # before the first checkpoint: epoch 1 logged, its save half done
    assert [p.name for p in (out / "checkpoints").iterdir()] == [".epoch_0001.tmp"]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
    assert (out / LOCK_FILE).is_file()  # the killed run's lock stays behind, and does not block the next run
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
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")] and not (out / LOCK_FILE).exists()


def test_a_run_with_loader_workers_and_mixup_resumes_to_the_same_weights(tmp_path, monkeypatch) -> None:
    """Catches a training loader that starts a pass per epoch (its workers then sit idle at every epoch's start while
    the accelerator waits for the first batch: a third of a short epoch on a GPU) and a pass that, started once,
    draws from the global random state: mixup and drop-path of a resumed run would then differ from the
    uninterrupted run's."""
    passes = []
    one_pass = EpochShuffleSampler.__iter__
    monkeypatch.setattr(EpochShuffleSampler, "__iter__", lambda self: passes.append(self.epoch) or one_pass(self))
    dataset = synthetic_dataset(tmp_path / "data")

    def command(output_dir: Path) -> list[str]:
        argv = synthetic_args(dataset, output_dir, "--workers", "2", "--mixup", "0.8", "--resume", "auto")
        argv[argv.index("depth=1")] = "depth=2"  # drop-path 0 and 0.1 (timm's rates rise from 0 over the blocks)
        return [*argv[:7], "drop_path_rate=0.1", *argv[7:]]  # the tiny model's kwargs and drop-path

    reference = tmp_path / "reference"
    run(command(reference))
    assert passes == [0]  # one pass over the three epochs

    out = tmp_path / "killed"
    run_killed_at("checkpoint-delete", command(out))  # epoch 2 saved: the rerun resumes at epoch 3
    run(command(out))
    assert passes == [0, 2]
    expected, got = weights(reference / "final"), weights(out / "final")
    for name in expected:
        assert torch.equal(expected[name], got[name]), name


def test_resume_refuses_changed_settings_and_accepts_harmless_ones(tmp_path) -> None:
    """Catches a resume that silently runs with another epochs / batch / lr (the schedule no longer fits, and
    results.json would record flags the run never used), a message that does not name each difference, and a
    refusal of flags that cannot change the result (workers, logging, evaluation batch, compile)."""
    dataset = synthetic_dataset(tmp_path / "data")
    out = tmp_path / "run"
    run(synthetic_args(dataset, out, "--epochs", "1"))
    changed = synthetic_args(dataset, out, "--resume", "auto", "--epochs", "3", "--batch-size", "16", "--lr", "0.01")
    with pytest.raises(ValueError, match="started with") as refused:
        run(changed)
    message = str(refused.value)
    assert (
        "--batch-size 8 (now 16)" in message and "--epochs 1 (now 3)" in message and "--lr 0.001 (now 0.01)" in message
    )
    assert "another --output-dir" in message and "model" not in message.split("started with")[1].split(";")[0]
    harmless = ("--resume", "auto", "--epochs", "1", "--workers", "1", "--report-to", "tensorboard")
    record = run(synthetic_args(dataset, out, *harmless, "--eval-batch-size", "3", "--no-compile"))
    assert record["epochs"] == 1


def test_resume_refuses_a_checkpoint_whose_weights_do_not_fit_the_model(tmp_path, monkeypatch) -> None:
    """Catches a resume after the model code changed (same flags, other parameters) failing inside the optimizer
    load with torch's 'parameter group doesn't match' instead of a message naming the parameters and what to do."""
    from structinit_hf.train.training import prepare as run_setup

    dataset = synthetic_dataset(tmp_path / "data")
    out = tmp_path / "run"
    run(synthetic_args(dataset, out, "--epochs", "1"))
    real = run_setup.load_model

    def wider(*args, model_kwargs=None, **kwargs):  # what a change to the model code looks like to a resume
        return real(*args, model_kwargs={**model_kwargs, "mlp_ratio": 2.0}, **kwargs)

    monkeypatch.setattr(run_setup, "load_model", wider)
    with pytest.raises(ValueError, match=r"do not fit the model built now .*mlp\.fc1\.bias \(192,\) -> \(96,\)"):
        run(synthetic_args(dataset, out, "--epochs", "1", "--resume", "auto"))


def test_a_run_folder_belongs_to_one_live_run_and_a_dead_runs_lock_does_not_block(tmp_path) -> None:
    """Catches two runs writing one folder (interleaved metrics, the second's checkpoints over the first's) and a
    lock that outlives its process: a kill -9 leaves run.lock behind, and the next run must take it over."""
    dataset = synthetic_dataset(tmp_path / "data")
    out = tmp_path / "run"
    held = acquire_run_lock(out)  # a live run (this process) holds the folder
    try:
        for resume in ([], ["--resume", "auto"]):
            with pytest.raises(UsageError, match=rf"in use by a live training run, pid {os.getpid()} .*kill <pid>"):
                run(synthetic_args(dataset, out, "--epochs", "1", *resume))
    finally:
        held.release()
    assert not out.exists(), "a refused run left a folder behind"

    code = (
        "from structinit_hf.train.training.run_folder import acquire_run_lock; import os, signal; "
        f"acquire_run_lock({str(out)!r}); "
    )
    status, output = run_forked(code + "os.kill(os.getpid(), signal.SIGKILL)", [])
    assert status == -signal.SIGKILL, output[-3000:]
    dead = json.loads((out / LOCK_FILE).read_text())["pid"]
    record = run(synthetic_args(dataset, out, "--epochs", "1", "--resume", "auto"))  # the dead lock is taken over
    assert record["epochs"] == 1 and dead != os.getpid() and not (out / LOCK_FILE).exists()


def test_a_killed_runs_forked_children_do_not_keep_its_folder_locked(tmp_path) -> None:
    """Catches the lock inherited by a run's forked children (its loader workers): after a kill -9 of the run, a
    worker still alive held the flock and the resume was refused as "in use by a live training run"."""
    out, ready = tmp_path / "run", tmp_path / "worker"
    run_pid = os.fork()
    if run_pid == 0:  # the run: take the lock, fork a worker that outlives it, die by SIGKILL
        try:
            acquire_run_lock(out)
            worker = os.fork()
            if worker == 0:
                time.sleep(60)
                os._exit(0)
            ready.write_text(str(worker))
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(run_pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    worker = int(ready.read_text())
    try:
        os.kill(worker, 0)  # the worker is alive, holding whatever it inherited
        acquire_run_lock(out).release()  # raises "in use by a live training run" while the worker holds the flock
    finally:
        os.kill(worker, signal.SIGKILL)


def _wait_for_lock_release(path: Path, timeout: float = 60.0) -> None:
    """Wait until the kernel has dropped a SIGKILLed holder's flock on ``path``.

    SIGKILL is asynchronous, and a process's open files are closed only when its last thread has exited: its
    /proc entry can read zombie while torch's worker threads still hold the file table, so poll the lock itself."""
    deadline = time.monotonic() + timeout
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                assert time.monotonic() < deadline, f"{path} still locked {timeout:.0f} s after its holder was killed"
                time.sleep(0.05)
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
    finally:
        os.close(fd)


def test_a_training_child_left_by_a_killed_accelerate_launch_is_detected_not_raced(tmp_path) -> None:
    """Catches the README's recovery (kill -9 the launcher, then --resume latest) running a second training beside
    the first, whose child outlives its launcher: the resume must be refused naming the child, which is alive,
    and once the child is gone the resume must go through."""
    dataset = synthetic_dataset(tmp_path / "data")
    out, paused, wrapper = tmp_path / "run", tmp_path / "paused", tmp_path / "pausing_train.py"
    wrapper.write_text(KILLING_TRAIN)
    launch = [
        sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "1", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", str(wrapper),
        *synthetic_args(dataset, out, "--epochs", "1", "--resume", "auto"),
    ]  # fmt: skip
    env = script_env(KILL_AT="pause", PAUSED_FILE=str(paused), TRAIN_SCRIPT=str(REPO / "scripts" / "train.py"))
    launcher = subprocess.Popen(launch, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    child = None
    try:
        deadline = time.monotonic() + 240
        while not paused.is_file():  # the child writes it once set up, holding the folder, before epoch 1
            assert launcher.poll() is None, launcher.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the training child did not reach its first epoch"
            time.sleep(0.2)
        child = int(paused.read_text())
        assert child != launcher.pid and json.loads((out / LOCK_FILE).read_text())["pid"] == child
        launcher.kill()
        launcher.wait()
        os.kill(child, 0)  # the child outlived its launcher
        with pytest.raises(UsageError, match=rf"in use by a live training run, pid {child} "):
            run(synthetic_args(dataset, out, "--epochs", "1", "--resume", "auto"))
    finally:
        launcher.kill()
        if child is not None:
            os.kill(child, signal.SIGKILL)
    _wait_for_lock_release(out / LOCK_FILE)
    record = run(synthetic_args(dataset, out, "--epochs", "1", "--resume", "auto"))
    assert record["epochs"] == 1 and (out / "final" / "model.safetensors").is_file()
