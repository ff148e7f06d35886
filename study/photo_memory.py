"""Peak memory of a run on a folder of large photos, beside the estimate its banner prints, for both input pipelines.

A folder of ``--images`` 12-megapixel JPEGs (4000 x 3000, two classes; a few distinct pictures, copied) trains for
one epoch at 32 px with a tiny ViT, once per ``--input-pipeline``, each run in a fresh process; the run's peak
resident set (the kernel's ``VmHWM``, polled) is set beside the banner's ``estimated peak``. The record goes to
``--output`` (JSON) and a Markdown table beside it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from structinit_hf.atomic import write_json, write_text
from structinit_hf.train import UsageError

__all__ = ["measure_photo_memory", "photo_folder", "photo_memory_parser"]

MODEL_KWARGS = ("depth=1", "img_size=32", "patch_size=4", "embed_dim=48")


def photo_folder(folder: Path, images: int, size: tuple[int, int] = (4000, 3000), distinct: int = 6) -> Path:
    """``images`` JPEGs of ``size`` in two class folders: ``distinct`` smooth pictures with noise, copied round."""
    rng = np.random.default_rng(0)
    width, height = size
    encoded = []
    for index in range(distinct):
        y, x = np.mgrid[0:height, 0:width].astype(np.float32)
        base = np.stack([x / width, y / height, (x + y) / (width + height)], axis=-1) * 200 + index * 9
        noise = rng.normal(0, 6, (height // 8, width // 8, 3)).repeat(8, 0).repeat(8, 1)
        pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
        path = folder / "encoded.jpg"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(path, quality=85)
        encoded.append(path.read_bytes())
        path.unlink()
    for index in range(images):
        target = folder / ("indoor", "outdoor")[index % 2] / f"photo_{index:04d}.jpg"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(encoded[index % distinct])
    return folder


def _high_water_kb(pid: int) -> int:
    """``VmHWM`` of process ``pid`` (kB; reset at ``exec``, unlike ``wait4``'s ``ru_maxrss``), 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _train(folder: Path, pipeline: str, run_dir: Path) -> dict[str, Any]:
    """One epoch on ``folder`` in a fresh process: its peak RSS and what its banner printed."""
    command = [sys.executable, "-m", "structinit_hf", "train", "--dataset", str(folder), "--epochs", "1"]
    command += ["--model-kwargs", *MODEL_KWARGS, "--input-pipeline", pipeline, "--output-dir", str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
    start = time.perf_counter()
    peak_kb = 0
    with open(run_dir.with_suffix(".log"), "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        while process.poll() is None:  # the kernel's high-water mark of the run's own resident set
            peak_kb = max(peak_kb, _high_water_kb(process.pid))
            time.sleep(0.02)
    text = run_dir.with_suffix(".log").read_text()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{text[-3000:]}")
    estimate = re.search(r"estimated peak ([\d.]+) GB", text)
    banner = next(line for line in text.splitlines() if " on " in line and "train /" in line)
    return {
        "pipeline": pipeline,
        "peak_rss_gb": round(peak_kb * 1024 / 1e9, 3),
        "estimated_peak_gb": float(estimate.group(1)),
        "wall_s": round(time.perf_counter() - start, 1),
        "banner": banner,
    }


def measure_photo_memory(args: argparse.Namespace) -> dict[str, Any]:
    """Train on a generated photo folder with each pipeline; write and return the record."""
    if args.images < 8:
        raise UsageError(f"--images {args.images}: out of range; allowed: an integer >= 8")
    with tempfile.TemporaryDirectory() as scratch:
        folder = photo_folder(Path(scratch) / "photos", args.images)
        runs = [_train(folder, pipeline, Path(scratch) / f"run-{pipeline}") for pipeline in args.pipelines]
    for run in runs:
        run["estimate_error"] = round(run["estimated_peak_gb"] / run["peak_rss_gb"] - 1, 3)
    record = {
        "command": "python study/benchmark_photo_memory.py " + " ".join(sys.argv[1:]),
        "images": args.images,
        "image_size": "4000x3000 JPEG",
        "model_kwargs": list(MODEL_KWARGS),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "runs": runs,
    }
    write_json(args.output, record)
    rows = [
        f"| {run['pipeline']} | {run['peak_rss_gb']:.2f} | {run['estimated_peak_gb']:.2f} | "
        f"{run['estimate_error']:+.0%} | {run['wall_s']:.0f} |"
        for run in runs
    ]
    table = "\n".join(
        [
            f"# Peak memory on {args.images} photos of 4000 x 3000 (JPEG), trained at 32 px for one epoch",
            "",
            f"`{record['command']}`, {record['date_utc']} UTC, CPU, one process, fp32, each run a fresh process.",
            "",
            "| input pipeline | measured peak RSS (GB) | banner's estimate (GB) | estimate vs measured | wall (s) |",
            "|---|---|---|---|---|",
            *rows,
            "",
            *[f"- {run['pipeline']}: `{run['banner']}`" for run in runs],
            "",
        ]
    )
    write_text(Path(args.output).with_suffix(".md"), table)
    print(table)
    return record


def photo_memory_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=300, help="12-megapixel JPEGs in the generated folder")
    parser.add_argument("--pipelines", nargs="+", choices=("tensor", "pil"), default=["tensor", "pil"])
    parser.add_argument("--output", type=Path, default=Path("study/records/memory/photos.json"))
    return parser
