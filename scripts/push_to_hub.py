"""Publish a trained run on the Hugging Face Hub with its model card.

    python scripts/push_to_hub.py --run-dir runs/c10 --repo-id my-org/vit_tiny_impulse3.cifar10 [--private] [--dry-run]

Authentication and endpoint come from HF_TOKEN (or `hf auth login`) and HF_ENDPOINT. --dry-run builds the exact repo
folder and prints its files and card without any network call.
"""

from __future__ import annotations

import argparse
import sys

from structinit_hf.cli import run_script, script_imports

with script_imports():
    from structinit_hf.hub import push_to_hub


def push_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="output folder of scripts/train.py (final/ + results.json)")
    parser.add_argument("--repo-id", required=True, help="model repo to create or update, 'namespace/name'")
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--revision", default=None, help="branch to commit to (created if missing); default main")
    parser.add_argument("--dataset-id", default=None, help="Hub id of the dataset when the run read a local copy")
    parser.add_argument("--license", default="apache-2.0", help="license id declared in the card")
    parser.add_argument("--dry-run", action="store_true", help="print files and card; no network call")
    return parser


def publish(args: argparse.Namespace) -> None:
    result = push_to_hub(
        args.run_dir,
        args.repo_id,
        private=args.private,
        revision=args.revision,
        dry_run=args.dry_run,
        dataset_id=args.dataset_id,
        license=args.license,
    )
    for path, size in result.files.items():
        print(f"{size:>12,d}  {path}")
    if result.commit_url is None:
        print(f"\ndry run: nothing uploaded; commit would be {result.commit_message!r}\n")
        print(result.card)
    else:
        print(f"\n{result.commit_message}\n{result.commit_url}")


def main(argv: list[str] | None = None) -> int:
    return run_script(push_parser(), publish, argv)


if __name__ == "__main__":
    sys.exit(main())
