"""study/gpu_loan.sh, the one script a lent GPU runs, with a stand-in python3 (the real one needs all of CIFAR-10)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

STAND_IN_PYTHON = """#!/bin/sh
echo "$* (compile cache: ${STRUCTINIT_COMPILE_CACHE:-none})" >> "$CALLS"
case "$1" in study/benchmark_small_data.py) echo compiled > "$STRUCTINIT_COMPILE_CACHE/torch-made-here.bin";; esac
echo ok
"""


def test_a_second_command_keeps_the_runs_the_first_left_and_a_new_compile_cache_comes_back(tmp_path) -> None:
    """Catches the paper step clearing runs/gpu/paper as it starts: the second command of a loan on the warm machine
    must find the step checkpoints the first command's runs saved when its budget cut them, and resume them. The
    benchmark is called with that folder and the compile cache's folder set; a cache file the runs wrote comes back
    beside loan.tgz, the one carried in does not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(STAND_IN_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    checkpoint = tmp_path / "runs/gpu/paper/default-seed0/checkpoints/step_00000190/trainer_state.json"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_text('{"epoch": 2}')
    carried = tmp_path / "data/compile-cache/torch-carried-in.bin"
    carried.parent.mkdir(parents=True)
    carried.write_bytes(b"compiled on an earlier loan")
    os.utime(carried, (1e9, 1e9))
    env = {
        **os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls"),
        "SHARING": "file_system", "STEPS": "paper", "SEEDS": "0", "EPOCHS": "50", "BUDGET": "60",
        "OUT": str(tmp_path / "out"),
    }  # fmt: skip
    done = subprocess.run(
        ["bash", str(REPO / "study/gpu_loan.sh")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert checkpoint.is_file()
    benchmark = next(line for line in (tmp_path / "calls").read_text().splitlines() if "benchmark_small_data" in line)
    assert "--runs-dir runs/gpu/paper" in benchmark and "--epochs 50" in benchmark and "--seeds 0" in benchmark
    assert f"(compile cache: {tmp_path}/data/compile-cache)" in benchmark
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["loan.tgz", "torch-made-here.bin"]
