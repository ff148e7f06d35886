"""Pictures of attention: the paper's Figure 3 (maps of a few blocks per init) and ConViT's non-locality.

The maps are read on real images with :func:`~structinit_hf.benchmark.attention.patch_attention_maps`:
per block, the attention among patch tokens (prefix tokens dropped) of a timm ``VisionTransformer``
or ``ConVit`` (for ConViT's gated positional blocks, the gated mixture of content and position).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from timm.models.convit import ConVit
from torch import nn

from ..atomic import write_file
from ..train import UsageError
from ..train._internal import KeyValueAction, dataset_source, load_images, load_model
from .attention import patch_attention_maps

__all__ = [
    "attention_distance",
    "attention_parser",
    "default_blocks",
    "draw_attention",
    "draw_attention_pictures",
    "load_images",
    "nonlocality",
    "plot_attention_figure",
    "plot_nonlocality",
    "save_figure",
]


def _grid_size(model: nn.Module) -> tuple[int, int]:
    return tuple(model.patch_embed.grid_size)


def attention_distance(maps: torch.Tensor, grid_size: tuple[int, int]) -> float:
    """ConViT's non-locality: the attention-weighted distance between query and key patches, in patch units.

    ``maps`` is ``B x heads x N x N`` over the patches of a row-major ``grid_size`` grid; the
    distance is averaged over queries, heads and images (rows are renormalized to sum to one).
    """
    rows, cols = grid_size
    if maps.shape[-1] != rows * cols or maps.shape[-2] != rows * cols:
        raise ValueError(f"maps of shape {tuple(maps.shape)} do not cover a {rows} x {cols} patch grid")
    ys, xs = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    coords = torch.stack([ys.flatten(), xs.flatten()], dim=-1).to(maps.dtype)
    distances = torch.cdist(coords, coords)
    weights = maps / maps.sum(dim=-1, keepdim=True)
    return float((weights * distances).sum(dim=-1).mean())


def nonlocality(model: nn.Module, images: torch.Tensor) -> list[float]:
    """:func:`attention_distance` of every block of ``model`` on ``images``."""
    grid = _grid_size(model)
    return [attention_distance(m, grid) for m in patch_attention_maps(model, images)]


def default_blocks(depth: int) -> tuple[int, ...]:
    """The blocks the paper's Figure 3 shows, first, middle and last (1, 6 and 12 of ViT-Tiny), 1-based."""
    return tuple(sorted({1, max(1, depth // 2), depth}))


def save_figure(fig: Any, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure atomically."""
    return write_file(path, lambda temporary: fig.savefig(temporary, dpi=110))


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def plot_attention_figure(
    models: dict[str, nn.Module],
    images: Sequence[torch.Tensor],
    path: str | os.PathLike,
    *,
    blocks: Sequence[int] | None = None,
    head: int = 0,
    title: str = "",
) -> Path:
    """The paper's Figure 3: per model (row) and block, three panels of one head's attention, averaged over images.

    The full ``N x N`` map; its zoomed top-left corner (queries and keys of the first two patch rows,
    where a local filter shows as bands next to the diagonal); and the attention of the centre patch,
    as a picture on the patch grid. ``images[i]`` are the images prepared for the i-th model; blocks
    are 1-based (default :func:`default_blocks` of each model's depth).
    """
    if len(images) != len(models):
        raise ValueError(f"got {len(images)} image batches for {len(models)} models; pass one per model")
    plt = _pyplot()
    rows = []
    for (label, model), batch in zip(models.items(), images, strict=True):
        maps = patch_attention_maps(model, batch)
        chosen = tuple(blocks) if blocks is not None else default_blocks(len(maps))
        bad = [b for b in chosen if not 1 <= b <= len(maps)]
        if bad:
            raise ValueError(f"blocks {bad} do not exist in {label!r}, which has blocks 1..{len(maps)}")
        if not 0 <= head < maps[0].shape[1]:
            raise ValueError(f"head {head} does not exist in {label!r}, which has heads 0..{maps[0].shape[1] - 1}")
        rows.append((label, _grid_size(model), [(b, maps[b - 1][:, head].mean(0)) for b in chosen]))
    columns = max(len(row[2]) for row in rows) * 3
    fig, axes = plt.subplots(len(rows), columns, figsize=(2.1 * columns, 2.3 * len(rows)), squeeze=False)
    for axis in axes.flat:
        axis.set_xticks([])
        axis.set_yticks([])
        axis.set_axis_off()
    for r, (label, (grid_h, grid_w), panels) in enumerate(rows):
        corner = min(2 * grid_w, grid_h * grid_w)
        centre = (grid_h // 2) * grid_w + grid_w // 2
        for i, (block, attn) in enumerate(panels):
            pictures = (
                (attn, f"block {block}: {attn.shape[0]}x{attn.shape[1]}"),
                (attn[:corner, :corner], f"block {block}: corner {corner}x{corner}"),
                (attn[centre].reshape(grid_h, grid_w), f"block {block}: centre query"),
            )
            for j, (picture, name) in enumerate(pictures):
                axis = axes[r, 3 * i + j]
                axis.set_axis_on()
                axis.imshow(picture.numpy(), cmap="viridis", interpolation="nearest")
                axis.set_title(name, fontsize=7)
            axes[r, 3 * i].set_ylabel(label if i == 0 else "", fontsize=9)
    fig.suptitle(title or f"attention of head {head}, mean over {len(images[0])} images", fontsize=10)
    fig.tight_layout()
    saved = save_figure(fig, path)
    plt.close(fig)
    return saved


def plot_nonlocality(
    curves: dict[str, Sequence[float]],
    path: str | os.PathLike,
    *,
    boundaries: Sequence[int] = (),
    title: str = "",
) -> Path:
    """Attention-weighted query-key distance per block, one line per model (``"... (trained)"`` lines solid).

    ``boundaries`` are last GPSA blocks of ConViTs, drawn as dotted lines between GPSA and MHSA blocks.
    """
    if not curves:
        raise ValueError("no curves to plot")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, values in curves.items():
        blocks = range(1, len(values) + 1)
        trained = label.endswith("(trained)")
        ax.plot(blocks, list(values), marker="o", ms=3, linestyle="-" if trained else "--", label=label)
    depth = max(len(values) for values in curves.values())
    for last_gpsa in sorted(set(boundaries) & set(range(1, depth))):
        ax.axvline(last_gpsa + 0.5, color="grey", linestyle=":", linewidth=1)
        ax.annotate(
            "ConViT: GPSA | MHSA", (last_gpsa + 0.5, 0.02), xycoords=("data", "axes fraction"), fontsize=7, ha="center"
        )
    ax.set_xlabel("block")
    ax.set_ylabel("mean attention distance (patches)")
    ax.set_title(title or "non-locality: attention-weighted query-key distance", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    saved = save_figure(fig, path)
    plt.close(fig)
    return saved


def _init_label(name: str, init: dict[str, Any], kwargs: dict[str, Any]) -> str:
    method = init.get("attention_init")
    if method == "impulse":
        return f"impulse {init['kernel_size']}x{init['kernel_size']}"
    if method == "default":
        return "PyTorch default" if kwargs.get("weight_init") == "reset" else "timm default"
    return method or name


def _load(source: str, kwargs: dict[str, Any]) -> tuple[nn.Module, dict[str, Any]]:
    """A model name built fresh with ``kwargs``, or a trained checkpoint (a run folder or its ``final/``)."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        return load_model(str(folder / "final" if (folder / "final").is_dir() else folder))[:2]
    return load_model(source, model_kwargs=kwargs)[:2]


def draw_attention_pictures(
    out_dir: str | os.PathLike,
    *,
    dataset: str,
    models: Sequence[str],
    checkpoints: Sequence[str] | None = None,
    model_kwargs: dict[str, Any] | None = None,
    convit: str = "convit_tiny_patch2_32",
    convit_kwargs: dict[str, Any] | None = None,
    convit_checkpoint: str | None = None,
    num_images: int = 16,
    blocks: Sequence[int] | None = None,
    head: int = 0,
    seed: int = 0,
) -> dict[str, Path]:
    """Draw ``attention_init.png``, ``attention_trained.png`` (given ``checkpoints``, one per model) and
    ``nonlocality.png`` (per-block attention distance of ``convit`` and ``models``, at init and trained)."""
    if checkpoints is not None and len(checkpoints) != len(models):
        raise ValueError(f"got {len(checkpoints)} checkpoints for {len(models)} models; pass one per model")
    out_dir = Path(out_dir)
    torch.manual_seed(seed)
    built = {}
    for name in [*models, convit]:
        kwargs = dict(convit_kwargs or {}) if name == convit else dict(model_kwargs or {})
        model, init = _load(name, kwargs)
        built[f"{_init_label(name, init, kwargs)} ({name})" if name != convit else f"ConViT ({name})"] = model
    trained = {}
    for label, source in zip(list(built)[: len(models)], checkpoints or (), strict=False):
        trained[f"{label} (trained)"] = _load(source, {})[0]
    if convit_checkpoint is not None:
        trained[f"{list(built)[-1]} (trained)"] = _load(convit_checkpoint, {})[0]

    everything = {**built, **trained}
    images = dict(zip(everything, load_images(dataset, list(everything.values()), num_images), strict=True))
    vits = {label: model for label, model in everything.items() if not isinstance(model, ConVit)}
    written = {}
    for kind, chosen in (("init", [k for k in vits if k in built]), ("trained", [k for k in vits if k in trained])):
        if chosen:
            written[f"attention_{kind}"] = plot_attention_figure(
                {label: vits[label] for label in chosen},
                [images[label] for label in chosen],
                out_dir / f"attention_{kind}.png",
                blocks=blocks,
                head=head,
                title=f"attention {'at initialization' if kind == 'init' else 'after training'}: head {head}, "
                f"mean over {len(images[chosen[0]])} CIFAR-10 test images",
            )
    curves = {label: nonlocality(model, images[label]) for label, model in everything.items()}
    boundaries = [model.local_up_to_layer for model in everything.values() if isinstance(model, ConVit)]
    written["nonlocality"] = plot_nonlocality(curves, out_dir / "nonlocality.png", boundaries=boundaries)
    return written


def attention_parser() -> argparse.ArgumentParser:
    """The flags of ``scripts/plot_attention.py``."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description="Draw attention like the paper's Figure 3, and ConViT's non-locality, at initialization and after "
        "training.",
    )
    parser.add_argument(
        "--model",
        nargs="+",
        default=["vit_tiny_impulse3", "vit_tiny_mimetic", "vit_tiny_patch2_32"],
        help="timm names of the inits to compare (one row each)",
    )
    parser.add_argument(
        "--model-kwargs", nargs="*", default={}, action=KeyValueAction, help="builder overrides, key=value"
    )
    parser.add_argument("--checkpoint", nargs="+", default=None, help="trained run folders, one per --model")
    parser.add_argument("--convit", default="convit_tiny_patch2_32", help="the ConViT whose non-locality is drawn")
    parser.add_argument("--convit-kwargs", nargs="*", default={}, action=KeyValueAction, help="ConViT overrides")
    parser.add_argument("--convit-checkpoint", default=None, help="trained ConViT run folder")
    parser.add_argument(
        "--dataset",
        type=dataset_source,
        default="cifar10-sample",
        help="images are its test split (default: cifar10-sample, the CIFAR-10 sample shipped with the package)",
    )
    parser.add_argument("--num-images", type=int, default=16)
    parser.add_argument("--blocks", nargs="+", type=int, default=None, help="1-based (default: first, middle, last)")
    parser.add_argument("--head", type=int, default=0)
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path("runs/attention"),
        help="where the pictures go (name the folder of committed pictures to redraw them)",
    )
    return parser


def draw_attention(args: argparse.Namespace) -> None:
    """Check the flags, draw the pictures :func:`draw_attention_pictures` draws and print their paths."""
    if args.num_images < 1:
        raise UsageError(f"--num-images {args.num_images}: out of range; allowed: an integer >= 1")
    if args.head < 0:
        raise UsageError(f"--head {args.head}: out of range; allowed: a head index >= 0")
    if args.blocks is not None and min(args.blocks) < 1:
        raise UsageError(f"--blocks {' '.join(map(str, args.blocks))}: out of range; allowed: 1-based block numbers")
    written = draw_attention_pictures(
        args.out_dir,
        dataset=args.dataset,
        models=args.model,
        checkpoints=args.checkpoint,
        model_kwargs=args.model_kwargs,
        convit=args.convit,
        convit_kwargs=args.convit_kwargs,
        convit_checkpoint=args.convit_checkpoint,
        num_images=args.num_images,
        blocks=args.blocks,
        head=args.head,
    )
    for path in written.values():
        print(path)
