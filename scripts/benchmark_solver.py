"""Solver speed and faithfulness, side by side in one process (issue 2's benchmark).

1. The paper's ``"adam"`` recipe against the default closed-form ``"svd"`` solver on the CIFAR
   ViT-Tiny setting (16 x 16 grid, dim 192, 3 heads, k = 3 and 5): seconds, hit rate, target mass.
2. ``timm.create_model("vit_tiny_impulse3")`` against the control ``vit_tiny_patch2_32``.
3. Real images: CIFAR-10 test images through a fresh ``vit_tiny_impulse3`` (defaults) and through
   the same model built the paper's way (adam solver, no content suppression, patch embedding as
   PyTorch initializes it): per block, the share of patch-token rows that peak at the impulse target.

    python scripts/benchmark_solver.py --data ../shared/data/cifar10-small --out benchmarks/solver
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import datasets
import timm
import torch

import structinit_hf
from structinit_hf import impulse
from structinit_hf.attention_maps import block_fidelity
from structinit_hf.init import impulse_block_targets

PAPER_RECIPE = dict(solver="adam", suppress_content=False, patch_embed_scale=1.0, per_layer=False, value_init="default")
# the first release's defaults, before the small-data ablation moved them
FIRST_DEFAULTS = dict(patch_embed_scale=0.5, per_layer=False, value_init="default")


def solver_rows(repeats: int) -> list[dict]:
    x = impulse.pseudo_input(16, 192)
    rows = []
    for kernel_size in (3, 5):
        targets = impulse.impulse_targets(16, impulse.impulse_shifts(3, kernel_size, seed=0, grid_size=16))
        for method in ("adam", "svd"):
            times = []
            for _ in range(1 if method == "adam" else repeats):
                start = time.perf_counter()
                q, k = impulse.solve_qk(x, targets, 64, method)
                times.append(time.perf_counter() - start)
            fidelity = impulse.target_fidelity(impulse.attention_maps(x, q, k), targets)
            rows.append(dict(kernel_size=kernel_size, method=method, seconds=statistics.median(times), **fidelity))
    return rows


def create_model_rows(repeats: int) -> dict:
    times = {"vit_tiny_patch2_32": [], "vit_tiny_impulse3": []}
    for _ in range(repeats):  # interleaved, so both see the same machine load
        for name in times:
            start = time.perf_counter()
            timm.create_model(name)
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    return dict(medians, extra_seconds=medians["vit_tiny_impulse3"] - medians["vit_tiny_patch2_32"])


def real_image_rows(data: Path, num_images: int) -> dict:
    test = datasets.load_dataset(str(data), split="test").select(range(num_images))
    rows = {}
    inits = (
        ("default", {}),
        ("first_defaults", FIRST_DEFAULTS),
        ("mimetic_value_output", dict(value_init="mimetic")),
        ("paper_adam", PAPER_RECIPE),
    )
    for label, options in inits:
        torch.manual_seed(0)
        model = timm.create_model("vit_tiny_impulse3", **options).eval()
        transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))
        images = torch.stack([transform(image.convert("RGB")) for image in test["img"]])
        targets = impulse_block_targets(model, kernel_size=3, **options)  # the shifts this build drew
        rows[label] = block_fidelity(model, images, targets)
    return rows


def to_markdown(result: dict) -> str:
    lines = ["# Solver benchmark", "", f"Command: `{result['command']}`", "", f"Machine: {result['machine']}", ""]
    lines += ["## Solver on the pseudo input (16x16 grid, dim 192, 3 heads)", ""]
    lines += ["| k | method | seconds | hit rate | target mass |", "|---|---|---|---|---|"]
    for row in result["solver"]:
        numbers = (f"{row[key]:.3f}" for key in ("seconds", "hit_rate", "target_mass"))
        cells = (row["kernel_size"], row["method"], *numbers)
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += [
        "",
        "Speed-up of svd over adam: " + ", ".join(f"k={k}: {v:.0f}x" for k, v in result["speedup"].items()),
        "",
    ]
    c = result["create_model"]
    lines += [
        "## create_model (median seconds)",
        "",
        "| vit_tiny_patch2_32 | vit_tiny_impulse3 | extra |",
        "|---|---|---|",
    ]
    lines += [f"| {c['vit_tiny_patch2_32']:.3f} | {c['vit_tiny_impulse3']:.3f} | {c['extra_seconds']:+.3f} |", ""]
    lines += [f"## Real images ({result['num_images']} CIFAR-10 test images), per block: hit rate / target mass", ""]
    depth = len(result["real_images"]["default"])
    lines += ["| init | " + " | ".join(f"block {i + 1}" for i in range(depth)) + " |", "|---" * (depth + 1) + "|"]
    for label, blocks in result["real_images"].items():
        lines.append(
            f"| {label} | " + " | ".join(f"{b['hit_rate']:.2f} / {b['target_mass']:.2f}" for b in blocks) + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("../shared/data/cifar10-small"))
    parser.add_argument("--num-images", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="folder for results.json and results.md")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps timings steady on a busy CPU)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = {
        "command": "python scripts/benchmark_solver.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"timm {timm.__version__}, structinit_hf {structinit_hf.__version__}",
        "solver": solver_rows(args.repeats),
        "create_model": create_model_rows(args.repeats),
        "num_images": args.num_images,
        "real_images": real_image_rows(args.data, args.num_images),
    }
    by = {(r["kernel_size"], r["method"]): r for r in result["solver"]}
    result["speedup"] = {k: by[(k, "adam")]["seconds"] / by[(k, "svd")]["seconds"] for k in (3, 5)}
    text = to_markdown(result)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "results.md").write_text(text)


if __name__ == "__main__":
    main()
