"""Atomic writes: a file or folder is written beside its target and renamed into place when complete.

A kill at any moment leaves either the previous good version or the new complete one, never a half-written
checkpoint, results file or picture.  What is written gets the permissions of an ordinary file or folder
(``tempfile`` would make it private to its owner).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "aside_path",
    "delete_folder",
    "recover_folder",
    "replace_folder",
    "swap_in_folder",
    "write_failure",
    "write_file",
    "write_json",
    "write_text",
]


# how torch's zip writer reports a write the OS refused: it drops the OS's reason ("unexpected pos 639616 vs 639508")
_TORCH_WRITE_FAILURE = re.compile(r"unexpected pos|file write failed|PytorchStreamWriter failed")


def write_failure(error: BaseException, path: str | os.PathLike) -> str | None:
    """The reason, as the OS words it (``No space left on device``, ``Disk quota exceeded``, ``Read-only file
    system``), that writing ``path`` raised ``error``; ``None`` when ``error`` is not a failed write.

    torch's writer loses the reason: a 1 MiB probe written beside ``path`` then asks the OS for it."""
    if isinstance(error, OSError):
        return error.strerror or str(error)
    if not (isinstance(error, RuntimeError) and _TORCH_WRITE_FAILURE.search(str(error))):
        return None
    folder = Path(path).parent
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".write-probe-")
        try:
            with open(handle, "wb") as written:
                written.write(bytes(2**20))
                written.flush()
                os.fsync(handle)
        finally:
            os.unlink(probe)
    except OSError as refused:
        return refused.strerror or str(refused)
    return f"torch's writer failed ({str(error).strip().splitlines()[0][:120]})"


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
    except BaseException as error:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename is None:  # a refused write() names no file: name this one
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    return write_file(path, lambda temporary: temporary.write_text(text))


def write_json(path: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write ``record`` as indented JSON to ``path`` atomically."""
    return write_text(path, json.dumps(record, indent=2) + "\n")


def replace_folder(out_dir: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call ``write`` on a new temporary folder beside ``out_dir``, then :func:`swap_in_folder` it.

    If ``write`` fails, the temporary folder is removed and ``out_dir`` is untouched; what a kill left
    of an earlier call (its temporary folder, a half-done swap) is cleaned up first.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    recover_folder(out_dir)
    for leftover in out_dir.parent.glob(f".{glob.escape(out_dir.name)}.partial-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        write(staging)
        staging.chmod(_ordinary_mode(is_folder=True))
        return swap_in_folder(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def aside_path(target: str | os.PathLike) -> Path:
    """Where :func:`swap_in_folder` keeps the previous ``target`` until the new one is in place."""
    target = Path(target)
    return target.with_name(f".{target.name}.old")


def swap_in_folder(new: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Rename the complete folder ``new`` to ``target``; an existing ``target`` is deleted only afterwards.

    The previous ``target`` waits at :func:`aside_path` between the two renames.  A kill there leaves no
    ``target``; :func:`recover_folder` (called here first, and by readers of ``target``) puts it back.
    """
    new, target = Path(new), Path(target)
    recover_folder(target)
    aside = aside_path(target)
    if target.exists():
        os.replace(target, aside)
    try:
        os.replace(new, target)
    except BaseException:
        if aside.exists():
            os.replace(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)
    return target


def delete_folder(path: str | os.PathLike) -> None:
    """Delete the folder ``path`` so that it is never seen half-deleted: renamed away first, then removed.

    A kill during the removal leaves only a hidden ``.<name>.deleted-*`` folder, which the next call for
    the same ``path`` removes.
    """
    path = Path(path)
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.deleted-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    if path.exists():
        doomed = Path(tempfile.mkdtemp(prefix=f".{path.name}.deleted-", dir=path.parent))
        os.replace(path, doomed / path.name)
        shutil.rmtree(doomed)


def recover_folder(target: str | os.PathLike) -> Path:
    """Undo what a kill inside :func:`swap_in_folder` left beside ``target``; return ``target``.

    Without ``target``, its previous version (at :func:`aside_path`) is put back; with it, the swap had
    finished and the aside copy is deleted.
    """
    target = Path(target)
    aside = aside_path(target)
    if aside.exists():
        if target.exists():
            shutil.rmtree(aside)
        else:
            os.replace(aside, target)
    return target
