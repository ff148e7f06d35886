"""Atomic writes: a failed write leaves the previous version, a finished one is an ordinary file or folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from structinit_hf.atomic import replace_folder, write_file, write_json, write_text


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
