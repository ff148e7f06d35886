"""Publish a trained run on the Hugging Face Hub with its model card.

    python scripts/push_to_hub.py --run-dir runs/c10 --repo-id my-org/vit_tiny_impulse3.cifar10 [--private] [--dry-run]

Authentication and endpoint come from HF_TOKEN (or `hf auth login`) and HF_ENDPOINT. --dry-run builds the exact repo
folder and prints its files and card without any network call. The same as ``structinit-hf push-to-hub``.
"""

import sys

from structinit_hf.train.cli.commands import run_script, script_imports

with script_imports():
    from structinit_hf.train.publish.hub import push_parser, run_push


def main(argv: list[str] | None = None) -> int:
    return run_script(push_parser(), run_push, argv)


if __name__ == "__main__":
    sys.exit(main())
