"""Run code the way a user without a package would: a fresh Python without structinit-hf, or, in this process,
imports that meet a package of an extra as not installed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

APPLICATION = ("structinit_hf.train", "structinit_hf.benchmark", "study")  # imported afresh where a package is hidden


def run_without_package(script: str, folder: Path) -> str:
    """Run ``script`` (which blocks ``import structinit_hf`` itself) in ``folder``; return its stdout.

    ``HF_HOME`` is ``folder / "hf_home"``, so remote code lands in a fresh module cache; a failure shows stderr.
    """
    env = dict(os.environ, HF_HOME=str(folder / "hf_home"), HF_HUB_OFFLINE="1", PYTHONPATH="")
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _is_in(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(f"{package}.") for package in packages)


@contextmanager
def package_not_installed(package: str) -> Iterator[None]:
    """Inside, ``import <package>`` (or any of its modules) raises ``ModuleNotFoundError`` naming it, as on an
    install without it, and the application's modules are imported afresh, so their own imports meet it; what was
    imported here before is put back afterwards (``sys.modules`` and the package attributes that point into it)."""
    saved = dict(sys.modules)
    for name in [name for name in sys.modules if _is_in(name, (package, *APPLICATION))]:
        del sys.modules[name]
    sys.modules[package] = None  # the import system's own "not installed": ModuleNotFoundError(name=package)
    try:
        yield
    finally:
        sys.modules.clear()
        sys.modules.update(saved)
        for name, module in saved.items():
            parent, _, child = name.rpartition(".")
            if parent in saved and _is_in(name, (package, *APPLICATION)):
                setattr(saved[parent], child, module)
