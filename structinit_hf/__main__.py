"""``structinit-hf <command>`` (or ``python -m structinit_hf <command>``): the commands a pip install brings.

    structinit-hf compare                      # which init for this data: default, mimetic, impulse side by side
    structinit-hf train --model vit_tiny_impulse3 --dataset my_images/
    structinit-hf evaluate --model runs/x/final --dataset my_images/
    structinit-hf push-to-hub --run-dir runs/x --repo-id me/my-model
    accelerate launch -m structinit_hf train ...   # several processes, GPUs or machines
    structinit-hf --version                    # this package's version, and torch's, timm's and transformers'

Each command is the same code as the repository's ``scripts/<command>.py``; a user error ends as one line and exit
status 2, a command whose extra is not installed names it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from .train.cli.commands import run_script, script_imports

# command -> (parser factory, function), each "module:name", imported only when the command runs
COMMANDS: dict[str, tuple[str, str]] = {
    "compare": ("benchmark.compare_inits:compare_parser", "benchmark.compare_inits:compare_command"),
    "train": ("train.cli.args:training_parser", "train.training.loop:run_command"),
    "evaluate": ("train.cli.args:evaluation_parser", "train.models.evaluation:run_evaluation"),
    "push-to-hub": ("train.publish.hub:push_parser", "train.publish.hub:run_push"),
}


def _load(target: str) -> Callable:
    module, _, name = target.partition(":")
    return getattr(import_module(f".{module}", __package__), name)


def _usage() -> str:
    return (
        f"usage: structinit-hf {{{','.join(COMMANDS)}}} [options]  (structinit-hf <command> --help for each; "
        "structinit-hf --version)"
    )


def versions() -> str:
    """``structinit-hf 0.3.0 (torch 2.x, timm 1.x, transformers 4.x)``: what ``--version`` prints."""
    from . import __version__

    def installed(name: str) -> str:
        try:
            return import_module(name).__version__
        except ImportError:
            return "not installed"

    libraries = ", ".join(f"{name} {installed(name)}" for name in ("torch", "timm", "transformers"))
    return f"structinit-hf {__version__} ({libraries})"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (default: the command line); return its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"{_usage()}\n\n{__doc__}")
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(versions())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"{_usage()}\nerror: unknown command {command!r}", file=sys.stderr)
        return 2
    with script_imports():  # a missing extra is one line naming it
        make_parser, function = (_load(target) for target in COMMANDS[command])
    parser = make_parser()
    parser.prog = f"structinit-hf {command}"
    return run_script(parser, function, rest)


if __name__ == "__main__":
    sys.exit(main())
