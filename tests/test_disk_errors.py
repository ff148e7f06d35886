"""A write that the disk refuses (full, over quota, read-only, its folder gone) ends in one line naming the file, the
OS's reason and the last good checkpoint; nothing half-written replaces a good file, and the next run resumes."""

from __future__ import annotations

import errno
import os
import resource
import signal
from pathlib import Path

import pytest
from tiny_runs import run, synthetic_args, synthetic_dataset

from structinit_hf.atomic import write_failure

TORCH_FULL_DISK = "[enforce fail at inline_container.cc:672] . unexpected pos 639616 vs 639508"


def _refused(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def _fail_second_checkpoint(monkeypatch, error: BaseException) -> None:
    """accelerate's save_state writes part of the second checkpoint, then the disk refuses."""
    import accelerate

    real, calls = accelerate.Accelerator.save_state, []

    def save_state(self, output_dir, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            (Path(output_dir) / "model.safetensors").write_bytes(b"half a file")
            raise error
        return real(self, output_dir, *args, **kwargs)

    monkeypatch.setattr(accelerate.Accelerator, "save_state", save_state)


def _fail_final_model(monkeypatch, error: BaseException) -> None:
    from structinit_hf.train.models import export

    def write_checkpoint(model, folder, **kwargs):
        (Path(folder) / "model.safetensors").write_bytes(b"half a file")
        raise error

    monkeypatch.setattr(export, "write_checkpoint", write_checkpoint)


def _fail_results(monkeypatch, error: BaseException) -> None:
    real = Path.write_text

    def write_text(self, text, *args, **kwargs):
        if self.name.startswith(".results.json."):  # atomic.write_json's temporary
            real(self, text[: len(text) // 2])
            raise error
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)


def _fail_metrics(monkeypatch, error: BaseException) -> None:
    from structinit_hf.train.training import loop

    monkeypatch.setattr(loop, "append_metrics", lambda output_dir, record: (_ for _ in ()).throw(error))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("inject", "error", "failed", "last"),
    [
        (_fail_second_checkpoint, _refused(errno.ENOSPC), "checkpoints/epoch_0002", "epoch_0001"),
        (_fail_second_checkpoint, RuntimeError(TORCH_FULL_DISK), "checkpoints/epoch_0002", "epoch_0001"),
        (_fail_final_model, _refused(errno.EDQUOT), "final", "epoch_0002"),
        (_fail_results, _refused(errno.EROFS), "final/results.json", "epoch_0002"),
        (_fail_metrics, _refused(errno.ENOENT), "metrics.jsonl", None),  # its folder vanished, in epoch 1
    ],
    ids=["checkpoint", "checkpoint-by-torch", "final-model", "record", "metrics"],
)
def test_a_refused_write_is_one_line_leaves_no_half_file_and_the_next_run_resumes(
    inject, error, failed, last, tmp_path, monkeypatch
):
    """Catches torch's 'unexpected pos' traceback that never says the disk is full, a message that does not name the
    file or the checkpoint to resume from, a half-written checkpoint, model or record left in place of a good one,
    and leftovers that stop the next run."""
    from structinit_hf import atomic

    dataset = synthetic_dataset(tmp_path / "data")
    out = tmp_path / "run"
    command = synthetic_args(dataset, out, "--epochs", "2", "--keep-checkpoints", "2", "--resume", "auto")
    inject(monkeypatch, error)
    if isinstance(error, RuntimeError):  # the disk is full: the probe written beside the checkpoint is refused too
        monkeypatch.setattr(atomic.os, "fsync", lambda handle: (_ for _ in ()).throw(_refused(errno.ENOSPC)))
    with pytest.raises(OSError) as refused:
        run(command)
    reason = os.strerror(errno.ENOSPC if isinstance(error, RuntimeError) else error.errno)
    kept = f"the last good checkpoint is {out / 'checkpoints' / last}" if last else "no checkpoint was written yet"
    assert str(refused.value) == (
        f"could not write {out / failed}: {reason}; {kept}. Free space (or pass another --output-dir) and rerun the "
        "same command with --resume latest"
    )
    assert "\n" not in str(refused.value)
    hidden = sorted(p.relative_to(out).as_posix() for p in out.rglob(".*"))
    assert hidden == [], hidden  # no temporary, staging or probe left behind
    assert not (out / "results.json").exists() and not (out / "run.lock").exists()
    assert (out / "final").exists() == (failed == "final/results.json")  # a whole final/ or none
    assert sorted(p.name for p in (out / "checkpoints").glob("*"))[-1:] == ([last] if last else [])
    monkeypatch.undo()
    assert run(command)["epochs"] == 2  # the space is back: the same command resumes and finishes


def test_torchs_lost_reason_is_asked_of_the_os(tmp_path, monkeypatch) -> None:
    """Catches a translation that calls any RuntimeError a write failure, or that cannot tell a full disk (here a
    file-size limit the probe meets: 'File too large') from torch failing on its own."""
    assert write_failure(RuntimeError("CUDA out of memory"), tmp_path / "x") is None
    assert write_failure(_refused(errno.ENOSPC), tmp_path / "x") == "No space left on device"
    assert write_failure(RuntimeError(TORCH_FULL_DISK), tmp_path / "gone" / "x").startswith("torch's writer failed (")
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    monkeypatch.setattr(signal, "SIGXFSZ", signal.SIGXFSZ)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the OS then answers EFBIG instead of a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (2**16, limits[1]))
    try:
        reason = write_failure(RuntimeError(TORCH_FULL_DISK), tmp_path / "checkpoint" / "optimizer.bin")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    assert reason == "File too large" and list(tmp_path.iterdir()) == []
