"""torch's portable compile cache carried between lent GPUs: a run process loads what an earlier loan compiled on the
same card with the same torch, and saves what it compiled when there was nothing to load.

A lent machine starts bare, so every loan compiled the paper's model from scratch (tens of seconds of each run's
first epoch). ``torch.compiler.save_cache_artifacts`` writes what a process compiled (inductor's graphs, AOT
autograd's, the kernels) as bytes, and ``load_cache_artifacts`` fills a fresh machine's caches with them, so the same
graph compiles from the cache. The file is named by torch's version and the device, and only such a file is loaded.
``study/gpu_loan.sh`` sets ``STRUCTINIT_COMPILE_CACHE`` to the folder it carries in and brings back.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

import torch

__all__ = ["ENV", "cache_file", "load_compile_cache", "save_compile_cache"]

ENV = "STRUCTINIT_COMPILE_CACHE"  # the folder of cache files, set by the loan script


def cache_file(folder: Path) -> Path:
    """The file for this torch and this device in ``folder``: a cache is read only where both match."""
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu-{platform.machine()}"
    return Path(folder) / (re.sub(r"[^A-Za-z0-9.+-]+", "-", f"torch-{torch.__version__}-{device}") + ".bin")


def load_compile_cache(folder: Path) -> bool:
    """Fill this process's compile caches from ``folder``'s file for this torch and device; whether there was one."""
    path = cache_file(folder)
    if not path.is_file():
        return False
    torch.compiler.load_cache_artifacts(path.read_bytes())
    return True


def save_compile_cache(folder: Path) -> Path | None:
    """Write what this process compiled to ``folder``'s file for this torch and device (atomically: runs sharing the
    folder may save at once); ``None`` when nothing was compiled."""
    artifacts = torch.compiler.save_cache_artifacts()
    if artifacts is None:
        return None
    path = cache_file(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_bytes(artifacts[0])
    partial.replace(path)
    return path
