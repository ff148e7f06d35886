"""Shared test settings: no network, small thread count, the embedded CIFAR-10 sample, the optional shared data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

from structinit_hf.train.data import SAMPLE_DATASETS

torch.set_num_threads(1)  # test tensors are tiny: threads cost more than they give

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def cifar10_sample() -> Path:
    """The CIFAR-10 sample shipped in the package (real images in the Hub's img/label schema)."""
    return SAMPLE_DATASETS["cifar10-sample"]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (the full CIFAR-10 copy), which a user's clone does not have: such a test skips, saying
    why, except under ``CI=true``, where the folder is expected and its absence fails the test."""
    if not (SHARED_DATA / "cifar10").is_dir():
        message = f"needs the shared data folder {SHARED_DATA}, which is not here"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_DATA
