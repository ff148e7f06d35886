"""Time building a new StructInitViT (runs the attention solver) against loading a saved one (does not).

python scripts/benchmark_hf_load.py                      # the default config: vit_tiny_impulse3
python scripts/benchmark_hf_load.py --model vit_tiny_impulse5 --repeats 5
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable

import torch
from transformers import AutoModelForImageClassification
from transformers.utils import logging

from structinit_hf import StructInitViTConfig
from structinit_hf.cli import UsageError, run_script


def _best_time(step: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return min(times)


def benchmark_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default="vit_tiny_impulse3", help="registered timm name, made a config with from_timm_name"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each; the best is reported")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    return parser


def benchmark(args: argparse.Namespace) -> None:
    if args.repeats < 1 or args.threads < 1:
        raise UsageError(f"--repeats and --threads must be >= 1, got {args.repeats} and {args.threads}")
    torch.set_num_threads(args.threads)
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    config = StructInitViTConfig.from_timm_name(args.model)
    with tempfile.TemporaryDirectory() as folder:
        AutoModelForImageClassification.from_config(config).save_pretrained(folder)
        build = _best_time(lambda: AutoModelForImageClassification.from_config(config), args.repeats)
        load = _best_time(lambda: AutoModelForImageClassification.from_pretrained(folder), args.repeats)
    print(
        f"{args.model} ({config.image_size} px, patch {config.patch_size}, depth {config.num_hidden_layers}, "
        f"{args.threads} threads, best of {args.repeats})"
    )
    print(f"from_config (solver)   {build:8.3f} s")
    print(f"from_pretrained        {load:8.3f} s")
    print(f"ratio                  {build / load:8.1f}x")


if __name__ == "__main__":
    sys.exit(run_script(benchmark_parser(), benchmark))
