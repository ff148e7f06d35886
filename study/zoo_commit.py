"""Put what a zoo loan brought back (``study/zoo_loan.sh``) into the repository as one model's folder.

    python study/zoo_commit.py /work/.device/<n> zoo/vit_tiny_impulse3.cifar10

The folder is laid out as the Hub repo it publishes (``structinit-hf push-to-hub --run-dir zoo/<name> ...`` uploads
it as it is, the card rendered again for the repo named): the weights in bf16 (``model.safetensors``, checked against
the fp32 weights the loan also brought back), the checkpoint's ``config.json`` (stock timm and stock transformers load
the folder; ``dtype`` float32 added, so that transformers computes in fp32 as timm does), the run's ``results.json``,
``metrics.jsonl``, ``train.log`` (progress bars dropped) and the loan's ``loan.log``, and the model card
(``README.md``). It is written next to its place and swapped in once whole. The CPU's re-scores are added after:

    structinit-hf evaluate --model zoo/<name> --dataset ../shared/data/cifar10 --output zoo/<name>/cifar10_test_cpu.json
    structinit-hf evaluate --model zoo/<name> --dataset cifar10-sample --output zoo/<name>/sample_test.json
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load, save_file

from structinit_hf.atomic import replace_folder
from structinit_hf.train._internal import stage_repo_folder

WEIGHTS_FILE, CONFIG_FILE, RESULTS_FILE = "model.safetensors", "config.json", "results.json"  # a run's final/ files

NAMESPACE = "structinit-hf"  # the Hub organisation the zoo's cards name
DATASET_ID = "uoft-cs/cifar10"  # the Hub dataset the loan's data/cifar10 copies
RUN_FILES = (CONFIG_FILE, RESULTS_FILE, "metrics.jsonl", "loan.log")
# one frame of a tqdm bar ("epoch 3:  42%|####      | 20480/48640 [00:40<00:08, 3299.57img/s, loss=...]")
_BAR = re.compile(r"[^\r\n|]*\d+%\|[^|]*\|[^\]\n]*\]")


def drop_progress_bars(log: str) -> str:
    """``train.log`` without its progress bars' frames; what the run printed between them stays, one per line."""
    kept = (piece.strip() for piece in _BAR.sub("\r", log).replace("\r", "\n").split("\n"))
    return "\n".join(line for line in kept if line) + "\n"


def read_loan(files_at: Path, unpacked: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """The bf16 weights (checked: every tensor is the fp32 weights' rounded to bf16) and the folder of the run's
    files, from what the loan brought back."""
    with tarfile.open(files_at / "zoo.tgz") as archive:
        archive.extractall(unpacked, filter="data")
    run = unpacked / "zoo-loan"
    missing = [name for name in (*RUN_FILES, "train.log") if not (run / name).is_file()]
    parts = sorted(files_at.glob("fp32-model.safetensors.part-*"))
    if missing or not parts or not (files_at / WEIGHTS_FILE).is_file():
        sys.exit(f"{files_at} is not a finished zoo loan's files: missing {', '.join(missing) or 'the weights'}")
    fp32 = load(b"".join(part.read_bytes() for part in parts))
    with safe_open(files_at / WEIGHTS_FILE, "pt") as weights:
        bf16 = {name: weights.get_tensor(name) for name in weights.keys()}
    if fp32.keys() != bf16.keys():
        sys.exit(f"{files_at}: {WEIGHTS_FILE} and the fp32 weights hold different tensors")
    for name, tensor in fp32.items():
        if not torch.equal(bf16[name], tensor.to(bf16[name].dtype)):
            sys.exit(f"{files_at}: {WEIGHTS_FILE}'s {name} is not the fp32 weights' rounded to bf16")
    return bf16, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("files_at", type=Path, help="the folder a zoo loan's files came back to")
    parser.add_argument("zoo_dir", type=Path, help="the model's folder, e.g. zoo/vit_tiny_impulse3.cifar10")
    parser.add_argument("--repo-id", help=f"the Hub repo the card names (default: {NAMESPACE}/<folder name>)")
    parser.add_argument(
        "--dataset-id", default=DATASET_ID, help=f"the Hub dataset the run's data copies; '' for none ({DATASET_ID})"
    )
    args = parser.parse_args(argv)
    repo_id = args.repo_id or f"{NAMESPACE}/{args.zoo_dir.name}"
    with tempfile.TemporaryDirectory() as tmp:
        weights, run = read_loan(args.files_at, Path(tmp) / "loan")
        files = Path(tmp) / "files"  # the folder without its card, which push-to-hub's staging renders
        files.mkdir()
        with safe_open(args.files_at / WEIGHTS_FILE, "pt") as brought:
            save_file(weights, files / WEIGHTS_FILE, brought.metadata())
        for name in RUN_FILES:
            (files / name).write_bytes((run / name).read_bytes())
        config = json.loads((files / CONFIG_FILE).read_text(encoding="utf-8"))
        # stored in bf16, computed in fp32: transformers' from_pretrained takes the config's dtype (without one, the
        # weights' bf16); timm's loaders always build fp32
        (files / CONFIG_FILE).write_text(json.dumps({**config, "dtype": "float32"}, indent=2) + "\n")
        log = (run / "train.log").read_text(encoding="utf-8", errors="replace")
        (files / "train.log").write_text(drop_progress_bars(log), encoding="utf-8")
        repo = stage_repo_folder(files, repo_id, Path(tmp) / "repo", dataset_id=args.dataset_id or None)
        replace_folder(args.zoo_dir, lambda folder: shutil.copytree(repo, folder, dirs_exist_ok=True))
    print(f"{args.zoo_dir}: {', '.join(sorted(p.name for p in args.zoo_dir.iterdir()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
