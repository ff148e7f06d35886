"""Shared test settings: no network, small thread count, the shared CIFAR-10 sample."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)  # test tensors are tiny: threads cost more than they give

CIFAR10_SMALL = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10-small"


@pytest.fixture(scope="session")
def cifar10_small() -> Path:
    """Path of ../shared/data/cifar10-small (real CIFAR-10 images in the Hub's img/label schema)."""
    if not (CIFAR10_SMALL / "test-00000-of-00001.parquet").exists():
        pytest.fail(f"the shared CIFAR-10 sample is missing at {CIFAR10_SMALL}")
    return CIFAR10_SMALL
