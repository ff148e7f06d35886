"""The built wheel: the plugin and the application, never the repository's study or its records."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # builds the wheel (about 10 s, offline: no build isolation)
def test_the_wheel_holds_the_package_and_none_of_the_study(tmp_path):
    source = tmp_path / "source"  # a copy: setuptools builds in the tree, and an old build/ would leak into the wheel
    # left out: what the other test worker may be writing meanwhile (pytest's cache, where the external suites'
    # sdists unpack), and the git-ignored folders of runs and downloaded data
    ignore = (".git", "build", "dist", "*.egg-info", "runs", "data", ".pytest_cache", "__pycache__")
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*ignore))
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)]
    subprocess.run([*command, str(source)], check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("structinit_hf-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"structinit_hf", next(top for top in tops if top.endswith(".dist-info"))}, sorted(tops)
    assert not [name for name in names if "campaign" in name or "records" in name or name.startswith("study")]
    for module in (
        "train/settings.py",
        "train/training/loop.py",
        "benchmark/compare_inits.py",
        "benchmark/profiles.py",
    ):
        assert f"structinit_hf/{module}" in names
    assert "structinit_hf/train/publish/card_templates/README.md.j2" in names or any(
        name.startswith("structinit_hf/train/publish/card_templates/") for name in names
    )
    assert any(name.startswith("structinit_hf/samples/cifar10/") and name.endswith(".parquet") for name in names)
