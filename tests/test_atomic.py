"""Atomic writes: a failed write leaves the previous version, a finished one is an ordinary file or folder."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from structinit_hf.atomic import (
    aside_path,
    delete_folder,
    recover_folder,
    replace_folder,
    swap_in_folder,
    write_file,
    write_json,
    write_text,
)


def ordinary(mode: int) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def test_failed_file_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = write_json(tmp_path / "results.json", {"top1": 50.0})
    assert path.stat().st_mode & 0o777 == ordinary(0o666)

    def crash(temporary: Path) -> None:
        temporary.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_file(path, crash)
    assert path.read_text() == '{\n  "top1": 50.0\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_write_the_disk_refuses_names_the_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    """Catches a full disk reported as a bare '[Errno 28] No space left on device' (a failed write() names no file:
    compare's records, a model card) and a half-written file left beside, or in place of, the good one."""
    path = write_text(tmp_path / "compare.md", "the table")

    def full(temporary: Path) -> None:
        temporary.write_text("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError, match=rf"^\[Errno 28\] No space left on device: '{path}'$"):
        write_file(path, full)
    assert path.read_text() == "the table" and [p.name for p in tmp_path.iterdir()] == ["compare.md"]


def test_folder_is_swapped_in_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "final"
    replace_folder(target, lambda folder: write_text(folder / "weights", "v1"))
    assert target.stat().st_mode & 0o777 == ordinary(0o777)

    def crash(folder: Path) -> None:
        (folder / "weights").write_text("half of v2")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_folder(target, crash)
    assert (target / "weights").read_text() == "v1"
    replace_folder(target, lambda folder: write_text(folder / "weights", "v2"))
    assert (target / "weights").read_text() == "v2"
    assert [p.name for p in tmp_path.iterdir()] == ["final"]


def test_kill_between_the_two_renames_is_recovered(tmp_path: Path) -> None:
    """Catches a swap that a kill can leave with no folder at all: the previous version must come back.

    The state is the one a SIGKILL between "move the old folder aside" and "rename the new one in" leaves.
    """
    target = tmp_path / "epoch_0002"
    aside = aside_path(target)
    aside.mkdir()
    (aside / "weights").write_text("v1")
    new = tmp_path / ".epoch_0002.tmp"
    new.mkdir()
    (new / "weights").write_text("v2")
    assert (recover_folder(target) / "weights").read_text() == "v1"
    assert not aside.exists()
    swap_in_folder(new, target)
    assert (target / "weights").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch_0002"]


def test_kill_after_the_swap_keeps_the_new_folder(tmp_path: Path) -> None:
    """Catches recovery that puts an old folder back over a finished swap (the kill hit the final delete)."""
    target = tmp_path / "final"
    replace_folder(target, lambda folder: write_text(folder / "weights", "v2"))
    aside = aside_path(target)
    aside.mkdir()
    (aside / "weights").write_text("half-deleted v1")
    replace_folder(target, lambda folder: write_text(folder / "weights", "v3"))
    assert (target / "weights").read_text() == "v3"
    assert [p.name for p in tmp_path.iterdir()] == ["final"]


def test_leftovers_of_a_killed_write_are_removed(tmp_path: Path) -> None:
    """Catches staging folders of killed writes piling up beside the target forever."""
    (tmp_path / ".final.partial-abc123").mkdir()
    replace_folder(tmp_path / "final", lambda folder: write_text(folder / "weights", "v1"))
    assert [p.name for p in tmp_path.iterdir()] == ["final"]


def test_delete_folder_cleans_up_after_a_killed_delete(tmp_path: Path) -> None:
    """Catches what a kill during an earlier delete left (the renamed-away folder) staying forever."""
    folder = tmp_path / "epoch_0001"
    folder.mkdir()
    (folder / "weights").write_text("v1")
    (tmp_path / ".epoch_0001.deleted-xyz").mkdir()  # what a kill during an earlier delete left
    delete_folder(folder)
    assert list(tmp_path.iterdir()) == []
    delete_folder(folder)  # deleting what is gone is not an error
