"""Atomic writes: a file or folder is written beside its target and renamed into place when complete.

A kill at any moment leaves either the previous good version or the new complete one, never a half-written
checkpoint, results file or picture.  What is written gets the permissions of an ordinary file or folder
(``tempfile`` would make it private to its owner).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["replace_folder", "write_file", "write_json", "write_text"]


def _ordinary_mode(is_folder: bool) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if is_folder else 0o666) & ~umask


def write_file(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call ``write`` on a temporary path beside ``path``, then rename it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, _ordinary_mode(is_folder=False))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    return write_file(path, lambda temporary: temporary.write_text(text))


def write_json(path: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write ``record`` as indented JSON to ``path`` atomically."""
    return write_text(path, json.dumps(record, indent=2) + "\n")


def replace_folder(out_dir: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call ``write`` on a new temporary folder beside ``out_dir``, then swap it in for ``out_dir``.

    An existing ``out_dir`` is moved aside first and deleted only once the new folder is in place;
    if ``write`` fails, the temporary folder is removed and ``out_dir`` is untouched.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        write(staging)
        staging.chmod(_ordinary_mode(is_folder=True))
        if out_dir.exists():
            stale = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent)) / out_dir.name
            os.replace(out_dir, stale)
            try:
                os.replace(staging, out_dir)
            except BaseException:
                os.replace(stale, out_dir)
                raise
            shutil.rmtree(stale.parent)
        else:
            os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir
