"""Why do the mimetic-form inits stall at width 192? Attention and gradients at build and over the first steps.

    python study/width/diagnose_stall.py --out study/records/width/diagnosis.json            # ~25 min, 1 thread

For each width (48 / 96 / 192, always 3 heads, so head dimension 16 / 32 / 64) and each init variant, on the
embedded CIFAR-10 sample at 16 px (patch 2, depth 12, the compare/campaign proxy):

* at build, on one batch of 256 training images: attention entropy (fraction of uniform's), the mean largest
  attention weight, the spread (std over keys) of the attention logits, the identity part of each head's
  ``Q_h K_h^T`` (``trace / D``, the coefficient ``c`` of the best ``c I`` fit) and its Frobenius norm, and the
  gradient norm of every block's parameters;
* the first ``--steps`` optimizer steps of the proxy's recipe (AdamW, weight decay 0.05, eps 1e-8, label smoothing
  0.1, gradient clipping at 3, a linear warm-up from 1e-6 over ``--warmup-steps`` and cosine to 1e-5 over
  ``--total-steps``), per learning rate: the training loss each step, and the attention statistics after training.

No augmentation: the probe follows the same 256-image batches in the same order for every variant, so variants
differ only by their init. This is a diagnostic of the start of training, not an accuracy figure.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import statistics
import time
from pathlib import Path

import datasets
import numpy as np
import timm
import torch
import torch.nn.functional as F
from PIL import Image

import structinit_hf
from structinit_hf.init.apply import _apply_mimetic_vo
from structinit_hf.init.layouts import vit_layout
from structinit_hf.init.mimetic import mimetic_qk

SAMPLE = Path(structinit_hf.__file__).parent / "samples" / "cifar10"
MEAN, STD = torch.tensor([0.4914, 0.4822, 0.4465]), torch.tensor([0.2470, 0.2435, 0.2616])


def architecture(width: int) -> dict:
    return dict(img_size=16, patch_size=2, depth=12, embed_dim=width, num_heads=3, num_classes=10)


def _mimetic_part(part: str, beta_scale: float | None = 1.0):
    """Mimetic init's query/key part, value/output part or both on timm's default ViT; ``beta_scale=None`` scales the
    identity coefficient by ``sqrt(16 / head_dim)``, so that its logit bias is width 48's at every width."""

    def build(width: int) -> torch.nn.Module:
        model = timm.create_model("vit_tiny_patch2_32", **architecture(width))
        layout = vit_layout(model)
        if part in ("qk", "both"):
            for index, slot in enumerate(layout.attentions):
                scale = (16 / slot.head_dim) ** 0.5 if beta_scale is None else beta_scale
                q, k = mimetic_qk(layout.dim, slot.num_heads, slot.head_dim, beta=0.7 * scale, seed=1000 * index)
                slot.write_qk(q, k)
        if part in ("vo", "both"):
            _apply_mimetic_vo(layout, 0)
        return model

    return build


def _registered(name: str, **kwargs):
    return lambda width: timm.create_model(name, **architecture(width), **kwargs)


VARIANTS = {
    "default": _registered("vit_tiny_patch2_32"),
    "mimetic": _registered("vit_tiny_mimetic"),
    "shift": _registered("vit_tiny_impulse3"),
    "v2": _registered("vit_tiny_impulse3", preset="v2"),
    "mimetic-beta-by-head-dim": _mimetic_part("both", beta_scale=None),  # beta 0.7 * sqrt(16 / head_dim)
    "mimetic-qk-only": _mimetic_part("qk"),
    "mimetic-vo-only": _mimetic_part("vo"),
    "shift-vo-default": _registered("vit_tiny_impulse3", value_init="default"),
}


def load_sample(count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``count`` training images of the embedded sample at 16 px (antialiased), normalised."""
    rows = datasets.load_dataset("parquet", data_files=str(SAMPLE / "train-00000-of-00001.parquet"))["train"]
    rows = rows.select(range(count))
    images = []
    for row in rows:
        image = row["img"]
        image = image if isinstance(image, Image.Image) else Image.open(io.BytesIO(image["bytes"]))
        images.append(torch.from_numpy(np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0).permute(2, 0, 1))
    pixels = F.interpolate(torch.stack(images), size=16, mode="bilinear", antialias=True, align_corners=False)
    return (pixels - MEAN[:, None, None]) / STD[:, None, None], torch.tensor(rows["label"])


def attention_stats(model: torch.nn.Module, images: torch.Tensor) -> dict:
    """Per block: entropy / log N, mean max weight, logit std over keys; per head: identity part and Frobenius norm
    of Q_h K_h^T (D x D, from the qkv weight)."""
    inputs = []
    hooks = [block.attn.register_forward_hook(lambda m, args, out: inputs.append(args[0])) for block in model.blocks]
    with torch.no_grad():
        model(images)
    for hook in hooks:
        hook.remove()
    per_block = []
    for block, x in zip(model.blocks, inputs, strict=True):
        attn = block.attn
        heads, head_dim = attn.num_heads, attn.head_dim
        dim = x.shape[-1]
        with torch.no_grad():
            q, k, _ = attn.qkv(x).reshape(x.shape[0], x.shape[1], 3, heads, head_dim).permute(2, 0, 3, 1, 4)
            q, k = attn.q_norm(q), attn.k_norm(k)
            logits = (q @ k.transpose(-1, -2)) * attn.scale
            probs = logits.softmax(-1)
            entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1).mean() / math.log(x.shape[1])
            weight = attn.qkv.weight.reshape(3, heads, head_dim, dim)
            product = weight[0].transpose(-1, -2) @ weight[1] * attn.scale  # heads x D x D, scale included
            identity = torch.diagonal(product, dim1=-2, dim2=-1).sum(-1) / dim
        per_block.append(
            dict(
                entropy=entropy.item(),
                max_weight=probs.max(-1).values.mean().item(),
                logit_std=logits.std(-1).mean().item(),
                qk_identity=identity.mean().item(),
                qk_frobenius=product.norm(dim=(-2, -1)).mean().item(),
            )
        )
    return {key: [block[key] for block in per_block] for key in per_block[0]}


def content_through_depth(model: torch.nn.Module, images: torch.Tensor) -> list[float]:
    """Each token's own content (its deviation from the mean token) after every block, relative to the patch
    embedding's: how much of what a token holds the residual stream keeps through depth at build."""
    outputs = []
    hooks = [
        module.register_forward_hook(lambda m, a, out: outputs.append(out))
        for module in (model.patch_drop, *model.blocks)
    ]
    with torch.no_grad():
        model(images)
    for hook in hooks:
        hook.remove()
    content = [(out - out.mean(1, keepdim=True)).norm(dim=-1).mean().item() for out in outputs]
    return [value / content[0] for value in content[1:]]


def block_grad_norms(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> list[float]:
    model.zero_grad()
    F.cross_entropy(model(images), labels, label_smoothing=0.1).backward()
    norms = [torch.norm(torch.stack([p.grad.norm() for p in block.parameters()])).item() for block in model.blocks]
    model.zero_grad()
    return norms


def lr_at(step: int, peak: float, warmup: int, total: int, start: float = 1e-6, floor: float = 1e-5) -> float:
    if step < warmup:
        return start + (peak - start) * step / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def probe(build, width, images, labels, *, lr, steps, warmup, total, batch, seed) -> dict:
    torch.manual_seed(seed)
    model = build(width)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05, eps=1e-8)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, lr, warmup, total)
        index = order[(step * batch) % len(order) :][:batch]
        if len(index) < batch:
            index = order[:batch]
        loss = F.cross_entropy(model(images[index]), labels[index], label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 3.0)
        optimizer.step()
        losses.append(round(loss.item(), 4))
    model.eval()
    return {"loss": losses, "after": attention_stats(model, images[:256])}


def report(record: dict) -> str:
    """diagnosis.md: the build statistics per width and variant, then the probes' third-epoch training loss."""
    mean = statistics.fmean
    lines = [
        "# The width-192 stall: attention at build and the first 27 steps",
        "",
        "`python study/width/diagnose_stall.py` (see its docstring); means over the 12 blocks, one batch of 256 "
        "images of the embedded sample at 16 px.",
        "",
        "## At build",
        "",
        "| width (head dim) | init | attention entropy / uniform | mean max weight | logit std | identity part "
        "of Q_h K_h^T / sqrt(d_h) | gradient norm per block | token content after block 12 / patch embedding |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, entry in record["results"].items():
        width, name = key.split("/")
        b, size = entry["build"], int(width[1:])
        lines.append(
            f"| {size} ({size // 3}) | {name} | {mean(b['entropy']):.3f} | {mean(b['max_weight']):.3f} | "
            f"{mean(b['logit_std']):.2f} | {mean(b['qk_identity']):.3f} | {mean(b['grad_norm']):.3f} | "
            f"{b['content'][-1]:.2f} |"
        )
    lines += [
        "",
        "## The first 27 steps (3 epochs of compare: 9 warm-up steps, cosine over 90)",
        "",
        "Training loss averaged over steps 19-27 (the third epoch), per seed, and the attention after step 27.",
        "",
        "| width | init | lr | loss, 3rd epoch: mean (per seed) | entropy after | logit std after |",
        "|---|---|---|---|---|---|",
    ]
    for key, entry in record["results"].items():
        width, name = key.split("/")
        probes: dict[str, list] = {}
        for run, probe in entry.items():
            if run != "build":
                probes.setdefault(run.split("-seed")[0], []).append(probe)
        for setting, runs in probes.items():
            third = [mean(probe["loss"][18:27]) for probe in runs]
            after = [probe["after"] for probe in runs]
            lines.append(
                f"| {width[1:]} | {name} | {setting.split('-')[0][2:]} | {mean(third):.3f} "
                f"({', '.join(f'{v:.3f}' for v in third)}) | {mean(mean(a['entropy']) for a in after):.3f} | "
                f"{mean(mean(a['logit_std']) for a in after):.2f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--widths", nargs="+", type=int, default=[48, 96, 192])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--lrs", nargs="+", type=float, default=[1e-3, 3e-4])
    parser.add_argument("--steps", type=int, default=27, help="optimizer steps probed (27 = 3 epochs of compare)")
    parser.add_argument("--warmup-steps", type=int, default=9, help="9 = compare's 1 warm-up epoch")
    parser.add_argument("--total-steps", type=int, default=90, help="the cosine's length (compare: 90)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--images", type=int, default=2560)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--report", action="store_true", help="only write <out>.md from the record")
    args = parser.parse_args()
    if args.report:
        args.out.with_suffix(".md").write_text(report(json.loads(args.out.read_text())))
        return
    torch.set_num_threads(args.threads)
    images, labels = load_sample(args.images)
    record = json.loads(args.out.read_text()) if args.out.is_file() else {}
    record.setdefault("settings", {k: v for k, v in vars(args).items() if k != "out"})
    results = record.setdefault("results", {})
    for width in args.widths:
        for name in args.variants:
            key = f"w{width}/{name}"
            entry = results.setdefault(key, {})
            if "build" not in entry or "content" not in entry["build"]:
                torch.manual_seed(0)
                model = VARIANTS[name](width).eval()
                entry["build"] = attention_stats(model, images[:256])
                entry["build"]["content"] = content_through_depth(model, images[:256])
                entry["build"]["grad_norm"] = block_grad_norms(model.train(), images[:256], labels[:256])
            for lr in args.lrs if args.steps else []:
                for seed in args.seeds:
                    run = f"lr{lr:g}-warm{args.warmup_steps}-seed{seed}"
                    if run in entry:
                        continue
                    start = time.perf_counter()
                    entry[run] = probe(
                        VARIANTS[name],
                        width,
                        images,
                        labels,
                        lr=lr,
                        steps=args.steps,
                        warmup=args.warmup_steps,
                        total=args.total_steps,
                        batch=args.batch_size,
                        seed=seed,
                    )
                    entry[run]["seconds"] = round(time.perf_counter() - start, 1)
                    print(
                        f"{key} {run}: loss {entry[run]['loss'][0]:.3f} -> {entry[run]['loss'][-1]:.3f} "
                        f"({entry[run]['seconds']:.0f} s)",
                        flush=True,
                    )
                    args.out.write_text(json.dumps(record, indent=1))
            args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
