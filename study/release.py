"""Publishing the study's best runs: each arm's attention at init drawn into its run folder, the run staged for the Hub
and its rendered model card kept (``study/benchmark_small_data.py --release-cards``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from structinit_hf.atomic import replace_folder
from structinit_hf.benchmark.plots import plot_attention_figure
from structinit_hf.benchmark.runs import RUN_RESULTS
from structinit_hf.benchmark.summary import has_vit_attention
from structinit_hf.train._internal import ATTENTION_IMAGE, CARD_FILE, load_images, load_model, stage_repo_folder

__all__ = ["draw_run_attention", "release_repo_id", "write_release_cards"]


def draw_run_attention(run_dir: Path, num_images: int = 16) -> Path | None:
    """``run_dir/attention_init.png``: the run's model rebuilt as it started (same name, kwargs and seed), on
    images of the split it was scored on; the model card of a published run shows it. ``None`` (nothing drawn) for
    a model without ViT attention maps (Swin, MLP-Mixer)."""
    results = json.loads((Path(run_dir) / RUN_RESULTS).read_text())
    torch.manual_seed(results["args"]["seed"])
    model, *_ = load_model(results["model"], num_classes=results["num_classes"], model_kwargs=results["model_kwargs"])
    if not has_vit_attention(model):
        return None
    images = load_images(results["dataset"], [model], num_images, split=results["split"])
    return plot_attention_figure(
        {results["model"]: model},
        images,
        Path(run_dir) / ATTENTION_IMAGE,
        title=f"attention at initialization (head 0, mean over {len(images[0])} {results['split']} images)",
    )


def release_repo_id(record: dict[str, Any], arm: str, namespace: str) -> str:
    """The Hub repo an arm's best run is published as: its size, init and data in the name, e.g.
    ``structinit-hf/vit_tiny_p4d6_impulse3.cifar10-small`` (never the tag of the paper-size CIFAR-10 model)."""
    architecture = record["architecture"]
    size = f"p{architecture.get('patch_size', 2)}d{architecture.get('depth', 12)}"
    return f"{namespace}/vit_tiny_{size}_{arm}.{Path(record['dataset']).name}"


def write_release_cards(record: dict[str, Any], cards_dir: Path, stage_dir: Path, namespace: str) -> dict[str, Path]:
    """Stage every arm's best run for the Hub and keep its rendered card.

    ``stage_dir/<repo name>/`` is the exact folder ``scripts/push_to_hub.py`` uploads (weights included, so keep it
    out of git); ``cards_dir/<repo name>/`` holds its ``README.md`` and the picture the card shows, for git. Both
    are replaced whole, so a rerun never leaves a mix of old and new files. Returns the card paths by arm.
    """
    cards = {}
    for name, arm in record["arms"].items():
        repo_id = release_repo_id(record, name, namespace)
        repo_name = repo_id.split("/")[1]
        folder = replace_folder(
            Path(stage_dir) / repo_name,
            lambda tmp, run=arm["best_run"], repo=repo_id: stage_repo_folder(
                run, repo, tmp, dataset_id=record["dataset_hub_id"]
            ),
        )

        def copy_card(tmp: Path, folder: Path = folder) -> None:
            for file in (CARD_FILE, ATTENTION_IMAGE):
                if (folder / file).is_file():
                    shutil.copy2(folder / file, tmp / file)

        cards[name] = replace_folder(Path(cards_dir) / repo_name, copy_card) / CARD_FILE
    return cards
