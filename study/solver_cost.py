"""Solver speed, create_model cost and init health, side by side in one process.

1. The solvers on the CIFAR ViT-Tiny setting (16 x 16 grid, dim 192, 3 heads, k = 3 and 5): the paper's
   ``"adam"`` recipe (v1), the authors' v2 ``"pinv"`` closed form, the 0.1 ``"svd"`` closed form and the default
   ``"shift"`` construction: seconds, hit rate and target mass on the pseudo input.
2. Build time of every registered size against the same network without the init (stock timm for the 224 px
   sizes, the registered control ``vit_tiny_patch2_32`` at 32 px), interleaved in one process: best seconds, their
   difference and ratio, the impulse init's self-check alone, and the machine's load average.
3. One solve on a 1,024-token grid (32 x 32: 32 px at patch 1), ViT-Tiny's width, every block's heads at once:
   seconds and peak memory growth, each in a fresh process.
4. Init health on real CIFAR-10 test images at the paper's architecture (32 px, patch 2, depth 12), for each
   benchmark arm named by ``--arms``: per block the spectral norm of W_q, the attention entropy as a share of
   uniform and, for impulse arms, the share of rows peaking on the impulse target
   (:func:`structinit_hf.benchmark.attention.init_health`).

    python study/benchmark_solver.py --out study/records/solver   # --data: docs/benchmarks.md names the committed run's
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import resource
import statistics
import threading
import time
from pathlib import Path

import datasets
import timm
import torch

from structinit_hf import __version__
from structinit_hf.benchmark.arms import ALL_ARMS
from structinit_hf.benchmark.attention import init_health
from structinit_hf.init import impulse, solvers
from structinit_hf.init.apply import impulse_block_targets
from structinit_hf.init.check import block_patterns
from structinit_hf.init.layouts import vit_layout
from structinit_hf.train import UsageError
from structinit_hf.train._internal import dataset_source, rgb_image

__all__ = ["run", "solver_parser"]

HEALTH_ARMS = ("default", "mimetic", "impulse3", "impulse5", "impulse3-svd", "impulse5-svd", "v1", "v2")


def solver_rows(repeats: int) -> list[dict]:
    """Each solver on each pseudo input it is used with: the sin-cos code (svd, adam) and, for v2's pinv, both the
    learned-style code it solves on and the sin-cos code (rank about 60 at this size: the pinv fit reads nothing)."""
    inputs = {name: impulse.pseudo_input(16, 192, name) for name in ("sincos", "learned")}
    cases = (("adam", "sincos"), ("pinv", "learned"), ("pinv", "sincos"), ("svd", "sincos"), ("shift", "sincos"))
    rows = []
    for kernel_size in (3, 5):
        shifts = impulse.impulse_shifts(3, kernel_size, seed=0, grid_size=16)
        targets = impulse.impulse_targets(16, shifts)
        for method, code in cases:
            x, times = inputs[code], []
            for _ in range(1 if method == "adam" else repeats):
                start = time.perf_counter()
                q, k = solvers.solve_qk(x, shifts, 16, 64, method, qk_frobenius=7.0 if method == "pinv" else 0.0)
                times.append(time.perf_counter() - start)
            fidelity = impulse.target_fidelity(impulse.attention_maps(x, q, k), targets)
            seconds = statistics.median(times)
            rows.append(dict(kernel_size=kernel_size, method=method, pseudo_input=code, seconds=seconds, **fidelity))
    return rows


# registered name -> (the same network without the init, its timm.create_model keywords)
_STOCK = dict(class_token=False, global_pool="avg")
BUILD_PAIRS = {
    "vit_tiny_impulse3": ("vit_tiny_patch2_32", {}),
    "vit_tiny_impulse5": ("vit_tiny_patch2_32", {}),
    "vit_tiny_mimetic": ("vit_tiny_patch2_32", {}),
    "vit_tiny_impulse3_patch16_224": ("vit_tiny_patch16_224", _STOCK),
    "vit_small_impulse3_patch16_224": ("vit_small_patch16_224", _STOCK),
    "vit_base_impulse3_patch16_224": ("vit_base_patch16_224", _STOCK),
}


def _check_seconds(model: torch.nn.Module) -> float:
    """Seconds of the impulse init's self-check on ``model`` as the init runs it: its pseudo input (the defaults'
    sin-cos code) fed to every block, after the class and register tokens where it has them."""
    layout = vit_layout(model)
    tokens = impulse.pseudo_input(layout.grid_size, layout.dim, "sincos", 0)
    prefix = torch.stack(layout.prefix_tokens) if layout.prefix_tokens else tokens[:0]
    start = time.perf_counter()
    block_patterns(model, model.structinit_shifts, layout.grid_size, tokens, prefix)
    return time.perf_counter() - start


def build_time_rows(repeats: int) -> dict:
    """Best seconds of ``repeats`` builds with ``timm.create_model``, with the init and of the same network without it,
    interleaved so both see the same machine load, and of the impulse init's self-check alone in the same loop; the
    load average (1 minute) before and after: on a shared machine the extra and its self-check share are the
    measure."""
    rows, load = [], os.getloadavg()[0]
    for name, (stock, kwargs) in BUILD_PAIRS.items():
        seconds = {name: [], stock: [], "check": []}
        for _ in range(repeats):
            for model, extra in ((stock, kwargs), (name, {})):
                start = time.perf_counter()
                built = timm.create_model(model, **extra)
                seconds[model].append(time.perf_counter() - start)
            if getattr(built, "structinit_check", None) is not None:
                seconds["check"].append(_check_seconds(built))
        init, plain = min(seconds[name]), min(seconds[stock])
        check = min(seconds["check"]) if seconds["check"] else None
        rows.append(dict(name=name, stock=stock, seconds=init, stock_seconds=plain, extra=init - plain,
                         ratio=init / plain, check_seconds=check))  # fmt: skip
    return dict(rows=rows, repeats=repeats, load=[load, os.getloadavg()[0]], cpus=os.cpu_count())


LARGE_GRID = dict(grid=(32, 32), dim=192, heads=36, head_dim=64)  # 1,024 tokens; 12 blocks x 3 heads of ViT-Tiny


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _peak_memory_growth(solve):
    """``solve()`` and the peak growth of the resident set while it ran, sampled every millisecond by a thread (torch
    releases the GIL in its kernels); Linux only."""
    before, peak, done = _resident_bytes(), [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.001):
            peak[0] = max(peak[0], _resident_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = solve()
    finally:
        done.set()
        sampler.join()
    return result, max(peak[0], _resident_bytes()) - before


def _large_grid_solve(method: str, kind: str, queue) -> None:
    """In a fresh process: one solve of every block's heads on the 1,024-token grid; seconds and peak RSS growth."""
    torch.set_num_threads(1)
    grid, dim, heads, head_dim = (LARGE_GRID[key] for key in ("grid", "dim", "heads", "head_dim"))
    x = impulse.pseudo_input(grid, dim, kind)
    shifts = torch.cat([impulse.impulse_shifts(3, 3, seed, grid) for seed in range(heads // 3)])
    start = time.perf_counter()
    (q, k), peak = _peak_memory_growth(lambda: solvers.solve_qk(x, shifts, grid, head_dim, method))
    seconds = time.perf_counter() - start
    targets = impulse.impulse_targets(grid, shifts[:3])
    fidelity = impulse.target_fidelity(impulse.attention_maps(x, q[:3], k[:3]), targets)
    queue.put(dict(method=method, pseudo_input=kind, seconds=seconds, peak_mib=peak / 2**20, **fidelity))


# each solver on the pseudo input it is used with
LARGE_GRID_CASES = (("shift", "sincos"), ("svd", "sincos"), ("pinv", "learned"))


def large_grid_rows(cases: tuple[tuple[str, str], ...] = LARGE_GRID_CASES) -> list[dict]:
    """The 1,024-token solve per solver, each in its own process so its peak memory is its own. Beside it, the size
    of one float32 N x N map per head (``heads x N^2 x 4`` bytes), what a solve that builds the maps holds."""
    context = multiprocessing.get_context("spawn")
    rows = []
    for method, kind in cases:
        queue = context.Queue()
        process = context.Process(target=_large_grid_solve, args=(method, kind, queue))
        process.start()
        rows.append(queue.get())
        process.join()
    tokens = LARGE_GRID["grid"][0] * LARGE_GRID["grid"][1]
    for row in rows:
        row["dense_maps_mib"] = LARGE_GRID["heads"] * tokens**2 * 4 / 2**20
    return rows


# block means of the 224 px models' init health on the pseudo input, from the exact SVD of every head's target (the
# solver before the partial factorisation: commit e63d09d), to show where the partial factorisation moves them
EXACT_SVD_WIDE_HEALTH = {
    "vit_small_impulse3_patch16_224": dict(q_norm=2.284, entropy_ratio=0.805, hit_rate=0.346, target_mass=0.0531),
    "vit_base_impulse3_patch16_224": dict(q_norm=2.461, entropy_ratio=0.788, hit_rate=0.328, target_mass=0.0561),
}


def wide_health_rows() -> dict:
    """Block means, on the pseudo input (LayerNorm of the sin-cos code), of the 224 px models whose heads keep under
    a quarter of the width: spectral norm of W_q, attention entropy / uniform, rows on target, mass on target."""
    rows = {}
    for name in EXACT_SVD_WIDE_HEALTH:
        model = timm.create_model(name)
        x = impulse.pseudo_input(model.patch_embed.grid_size, model.embed_dim)
        blocks = []
        for block, targets in zip(model.blocks, impulse_block_targets(model), strict=True):
            attn, dim = block.attn, model.embed_dim
            width = attn.num_heads * attn.head_dim
            q, k = (attn.qkv.weight[i * width : (i + 1) * width].detach() for i in (0, 1))
            heads = (w.reshape(attn.num_heads, attn.head_dim, dim).transpose(1, 2) for w in (q, k))
            maps = impulse.attention_maps(x, *heads)
            entropy = -(maps * maps.clamp_min(1e-30).log()).sum(-1).mean().item() / math.log(maps.shape[-1])
            fidelity = impulse.target_fidelity(maps, targets)
            blocks.append(dict(q_norm=torch.linalg.matrix_norm(q, 2).item(), entropy_ratio=entropy, **fidelity))
        rows[name] = {key: statistics.mean(b[key] for b in blocks) for key in blocks[0]}
    return rows


def health_rows(data: Path, num_images: int, arms: list[str]) -> dict:
    """Per arm (at the paper's architecture, seed 0): the init-health rows of every block on real images."""
    test = datasets.load_dataset(str(data), split="test").select(range(num_images))
    rows = {}
    for name in arms:
        arm = ALL_ARMS[name]
        torch.manual_seed(0)
        model = timm.create_model(arm.model, **arm.model_kwargs).eval()
        transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))
        images = torch.stack([transform(rgb_image(image)) for image in test["img"]])
        impulse_init = model.structinit_settings["attention_init"] == "impulse"
        targets = impulse_block_targets(model) if impulse_init else None  # the shifts this build recorded
        rows[name] = init_health(model, images, targets)
    return rows


def to_markdown(result: dict) -> str:
    lines = ["# Solver benchmark", "", f"Command: `{result['command']}`", "", f"Machine: {result['machine']}", ""]
    for section in (_solver_lines, _build_time_lines, _large_grid_lines, _wide_health_lines, _init_health_lines):
        lines += section(result)
    return "\n".join(lines) + "\n"


def _solver_lines(result: dict) -> list[str]:
    """Each solver on the 16 x 16 pseudo input: seconds, hit rate, target mass; then svd's speed-up over adam."""
    lines = ["## Solver on the pseudo input (16x16 grid, dim 192, 3 heads)", ""]
    lines += ["| k | method | pseudo input | seconds | hit rate | target mass |", "|---|---|---|---|---|---|"]
    for row in result["solver"]:
        numbers = (f"{row[key]:.3f}" for key in ("seconds", "hit_rate", "target_mass"))
        cells = (row["kernel_size"], row["method"], row["pseudo_input"], *numbers)
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += [
        "",
        "Speed-up of svd over adam: " + ", ".join(f"k={k}: {v:.0f}x" for k, v in result["speedup"].items()),
        "",
    ]
    return lines


def _build_time_lines(result: dict) -> list[str]:
    """create_model with the init against the same network without it: best seconds, the extra, the self-check."""
    build = result["build_time"]
    lines = [
        "## Build time: timm.create_model with the init against the same network without it",
        "",
        f"Best of {build['repeats']} interleaved builds in one process; the self-check is the impulse init's own, "
        f"timed alone on the built model in the same loop. Load average (1 minute) {build['load'][0]:.1f} before, "
        f"{build['load'][1]:.1f} after, on {build['cpus']} cores: on a shared machine compare within a row.",
        "",
        "| model | stock | seconds | stock seconds | extra | ratio | self-check seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in build["rows"]:
        check = "–" if row["check_seconds"] is None else f"{row['check_seconds']:.3f}"
        numbers = f"{row['seconds']:.3f} | {row['stock_seconds']:.3f} | {row['extra']:+.3f} | {row['ratio']:.2f}"
        lines.append(f"| {row['name']} | {row['stock']} | {numbers} | {check} |")
    return [*lines, ""]


def _large_grid_lines(result: dict) -> list[str]:
    """One solve on the 1,024-token grid: seconds, peak memory growth and fidelity, beside the dense maps' size."""
    grid = LARGE_GRID
    lines = [
        f"## One solve on a 1,024-token grid ({grid['grid'][0]}x{grid['grid'][1]}, dim {grid['dim']}, "
        f"{grid['heads']} heads of width {grid['head_dim']}: every block of a ViT-Tiny at 32 px, patch 1)",
        "",
        "Peak memory is the largest growth of the resident set during the solve (sampled every millisecond), in a "
        "fresh process. The pre-refactor "
        "solver first built one float32 N x N map per head: the last column.",
        "",
        "| method | pseudo input | seconds | peak MiB | hit rate (block 1) | target mass | N x N maps MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    formats = (("seconds", 2), ("peak_mib", 0), ("hit_rate", 3), ("target_mass", 3), ("dense_maps_mib", 0))
    for row in result["large_grid"]:
        numbers = " | ".join(f"{row[key]:.{digits}f}" for key, digits in formats)
        lines.append(f"| {row['method']} | {row['pseudo_input']} | {numbers} |")
    return [*lines, ""]


def _wide_health_lines(result: dict) -> list[str]:
    """Init health of the 224 px models (partial factorisation) beside the full SVD's."""
    lines = [
        "## Init health of the 224 px models on the pseudo input (block means)",
        "",
        "Their heads keep 64 of 384 or 768 channels, so their Q/K factors come from the partial factorisation; "
        "`exact` is the full SVD's (before it, `EXACT_SVD_WIDE_HEALTH`).",
        "",
        "| model | W_q spectral norm | exact | entropy / uniform | exact | rows on target | exact | mass on target "
        "| exact |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in result["wide_health"].items():
        exact = EXACT_SVD_WIDE_HEALTH[name]
        cells = (f"{row[key]:.3f} | {exact[key]:.3f}" for key in ("q_norm", "entropy_ratio", "hit_rate", "target_mass"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _init_health_lines(result: dict) -> list[str]:
    """Init health on real CIFAR-10 images, one table per metric, one column per block."""
    health = result["init_health"]
    depth = len(next(iter(health.values())))
    header = ["| init | " + " | ".join(f"b{i + 1}" for i in range(depth)) + " |", "|---" * (depth + 1) + "|"]
    metrics = (
        ("q_norm", "spectral norm of W_q", "{:.2f}"),
        ("entropy_ratio", "attention entropy / uniform", "{:.2f}"),
        ("bf16_shift", "mean total-variation shift of an attention row under bf16 autocast", "{:.3f}"),
        ("hit_rate", "rows peaking on the impulse target", "{:.2f}"),
    )
    lines = []
    for key, what, fmt in metrics:
        lines += [f"## Init health, {what} ({result['num_images']} CIFAR-10 test images, per block)", "", *header]
        for label, blocks in health.items():
            if key in blocks[0]:
                lines.append(f"| {label} | " + " | ".join(fmt.format(b[key]) for b in blocks) + " |")
        lines.append("")
    return lines


def solver_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data",
        type=dataset_source,
        default="cifar10-sample",
        help="a dataset folder with a test split (default: cifar10-sample, the CIFAR-10 sample in the package)",
    )
    parser.add_argument("--num-images", type=int, default=64)
    parser.add_argument("--arms", nargs="+", default=list(HEALTH_ARMS), choices=tuple(ALL_ARMS))
    parser.add_argument("--repeats", type=int, default=5, help="runs of each solver (the median is reported)")
    parser.add_argument("--build-repeats", type=int, default=5, help="builds of each model (the best is reported)")
    parser.add_argument("--out", type=Path, default=None, help="folder for results.json and results.md")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps timings steady on a busy CPU)")
    return parser


def run(args: argparse.Namespace) -> None:
    if not Path(args.data).is_dir():
        raise UsageError(f"--data {args.data!r} is not a dataset folder; pass a local copy of CIFAR-10")
    torch.set_num_threads(args.threads)
    result = {
        "command": "python study/benchmark_solver.py "
        + " ".join(
            f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in vars(args).items()
            if v is not None
        ),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"timm {timm.__version__}, structinit_hf {__version__}",
        "solver": solver_rows(args.repeats),
        "build_time": build_time_rows(args.build_repeats),
        "large_grid": large_grid_rows(),
        "wide_health": wide_health_rows(),
        "num_images": args.num_images,
        "init_health": health_rows(Path(args.data), args.num_images, args.arms),
    }
    by = {(r["kernel_size"], r["method"]): r for r in result["solver"] if r["pseudo_input"] == "sincos"}
    result["speedup"] = {k: by[(k, "adam")]["seconds"] / by[(k, "svd")]["seconds"] for k in (3, 5)}
    text = to_markdown(result)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "results.md").write_text(text)
