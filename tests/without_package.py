"""Run a snippet the way a user without structinit-hf would: a fresh Python, its own Hub cache, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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
