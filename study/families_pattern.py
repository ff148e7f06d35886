"""The pattern of Swin's and MLP-Mixer's first block at init and after training, timm's default beside the impulse.

    python study/families_pattern.py --runs <runs folder of a family's seed 0> --out <png>

``--runs`` holds the run folders ``<arm>-seed0`` (each with ``results.json`` and ``final/``) that the campaign's
harness trains; the init is rebuilt from the model and keyword arguments the run recorded (the init is seeded, so it
is the run's own start). For Swin: each head's relative position bias over the window's offsets (dy, dx), as a
(2W-1) x (2W-1) image. For the Mixer: the token MLP's linear response (its Jacobian at LayerNormed random tokens)
for the centre token, over the input token grid: the share of its weight each token gets.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib
import timm
import torch
import torch.nn.functional as F

import structinit_hf  # noqa: F401  (registers the names the runs were trained as)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def models(run: Path) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The run's model at init (rebuilt) and after training (its ``final/``)."""
    record = json.loads((run / "results.json").read_text())
    start = timm.create_model(record["model"], num_classes=record["num_classes"], **record["model_kwargs"])
    trained = timm.create_model(f"local-dir:{run / 'final'}", pretrained=True)
    return start.eval(), trained.eval()


def swin_bias(model: torch.nn.Module) -> torch.Tensor:
    """Block 0's relative position bias per head: heads x (2W-1) x (2W-1)."""
    table = model.layers[0].blocks[0].attn.relative_position_bias_table.detach()
    side = int(round(table.shape[0] ** 0.5))
    return table.T.reshape(-1, side, side)


def mixer_response(model: torch.nn.Module, seed: int = 0) -> torch.Tensor:
    """Block 0's token MLP: the centre token's absolute Jacobian over the input tokens, normalised to sum 1."""
    block = model.blocks[0]
    tokens = block.mlp_tokens.fc1.in_features
    side = int(round(tokens**0.5))
    x = F.layer_norm(torch.randn(tokens, generator=torch.Generator().manual_seed(seed)), (tokens,))
    centre = (side // 2) * side + side // 2
    jacobian = torch.autograd.functional.jacobian(lambda v: block.mlp_tokens(v.unsqueeze(0))[0], x)
    row = jacobian[centre].abs()
    return (row / row.sum()).reshape(side, side)


def plot(runs: Path, out: Path) -> None:
    arms = sorted(p for p in runs.iterdir() if (p / "final").is_dir() and p.name.endswith("-seed0"))
    panels = []
    for run in arms:
        for when, model in zip(("init", "trained"), models(run), strict=True):
            if hasattr(model, "layers"):
                panels += [(f"{run.name[:-6]}, {when}, head {h}", m) for h, m in enumerate(swin_bias(model))]
            else:
                panels.append((f"{run.name[:-6]}, {when}", mixer_response(model)))
    per_row = 3 if any("head" in title for title, _ in panels) else 2
    rows = (len(panels) + per_row - 1) // per_row
    fig, axes = plt.subplots(rows, per_row, figsize=(3 * per_row, 3 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, (title, image) in zip(axes.flat, panels, strict=False):
        ax.imshow(image.float().numpy(), cmap="viridis")
        ax.set_title(title, fontsize=8)
    fig.suptitle(f"block 0 of {runs.parent.name}: {'bias over offsets' if per_row == 3 else 'centre token mixing'}")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    print(f"wrote {out} ({len(panels)} panels from {', '.join(run.name for run in arms)})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    plot(args.runs, args.out)
