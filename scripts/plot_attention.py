"""Draw attention like the paper's Figure 3, and ConViT's non-locality, at initialization and after training.

    python scripts/plot_attention.py                              # writes under runs/attention
    python scripts/plot_attention.py --out-dir benchmarks/small_data  # the README's pictures
    python scripts/plot_attention.py --model vit_tiny_impulse3 vit_tiny_mimetic vit_tiny_patch2_32 \
        --model-kwargs patch_size=4 depth=6 --convit-kwargs patch_size=4 depth=6 local_up_to_layer=5 \
        --checkpoint runs/small_data-cpu-cifar10-small/{impulse3,mimetic,default}-seed0 \
        --convit-checkpoint runs/small_data-cpu-cifar10-small/convit-seed0 --out-dir benchmarks/small_data/cpu

Writes attention_init.png, attention_trained.png (with --checkpoint) and nonlocality.png.
"""

import argparse
import sys
from pathlib import Path

from structinit_hf.train.args import KeyValueAction
from structinit_hf.train.commands import run_script, script_imports
from structinit_hf.train.errors import UsageError

with script_imports():
    from structinit_hf.benchmark.plots import draw_attention_pictures


def attention_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    parser.add_argument("--dataset", default="../shared/data/cifar10-small", help="images are its test split")
    parser.add_argument("--num-images", type=int, default=16)
    parser.add_argument("--blocks", nargs="+", type=int, default=None, help="1-based (default: first, middle, last)")
    parser.add_argument("--head", type=int, default=0)
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path("runs/attention"),
        help="where the pictures go (the committed ones are under benchmarks/: name it to redraw them)",
    )
    return parser


def draw(args: argparse.Namespace) -> None:
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


if __name__ == "__main__":
    sys.exit(run_script(attention_parser(), draw))
