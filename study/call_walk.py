"""How far a tiny ``train`` and a tiny ``compare`` walk through the package: distinct structinit_hf files entered,
and how often a call crosses from ``benchmark/`` into ``train/`` (re-entries), counted with ``sys.setprofile``.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python study/call_walk.py
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import threading
from pathlib import Path

import structinit_hf

PACKAGE = Path(structinit_hf.__file__).resolve().parent
TINY_MODEL = ["--model-kwargs", "depth=1"]
TINY_DATA = ["--epochs", "1", "--max-train-samples", "64", "--batch-size", "32"]


def _part(filename: str) -> str | None:
    """``train/loop.py`` for a package file, else None."""
    try:
        return str(Path(filename).resolve().relative_to(PACKAGE))
    except ValueError:
        return None


def walk(command: list[str]) -> tuple[dict[str, int], list[str]]:
    """Run ``structinit-hf <command>`` under a profiler; count the package files entered and the calls from a
    ``benchmark/`` frame into a ``train/`` file; list the ``train/`` files those calls enter."""
    from structinit_hf.__main__ import main

    files: set[str] = set()
    entered: set[str] = set()  # the train/ files a benchmark/ frame calls into
    crossings = 0
    cache: dict[str, str | None] = {}

    def profile(frame, event, arg):
        nonlocal crossings
        if event != "call":
            return
        name = frame.f_code.co_filename
        part = cache[name] if name in cache else cache.setdefault(name, _part(name))
        if part is None:
            return
        files.add(part)
        caller = frame.f_back
        if caller is not None and part.startswith("train/"):
            back = caller.f_code.co_filename
            origin = cache[back] if back in cache else cache.setdefault(back, _part(back))
            if origin is not None and origin.startswith("benchmark/"):
                crossings += 1
                entered.add(part)

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            status = main(command)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    if status != 0:
        raise SystemExit(f"structinit-hf {' '.join(command)}: exit status {status}")
    return {
        "files": len(files),
        "train_files": sum(part.startswith("train/") for part in files),
        "benchmark_files": sum(part.startswith("benchmark/") for part in files),
        "benchmark_to_train_calls": crossings,
        "train_files_called_from_benchmark": len(entered),
    }, sorted(entered)


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        train = walk(["train", *TINY_MODEL, *TINY_DATA, "--max-eval-samples", "32", "--output-dir", f"{scratch}/t"])
        compare = walk(["compare", "--arms", "default", *TINY_MODEL, *TINY_DATA, "--output-dir", f"{scratch}/c"])
    for name, (counts, entered) in (("train", train), ("compare", compare)):
        print(name, "  ".join(f"{key} {value}" for key, value in counts.items()))
        if entered:
            print("  train/ files called from benchmark/:", " ".join(entered))


if __name__ == "__main__":
    main()
