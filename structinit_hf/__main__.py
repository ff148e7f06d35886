"""``structinit-hf <command>`` (or ``python -m structinit_hf <command>``): the commands a pip install brings.

    structinit-hf compare                      # which init for this data: default, mimetic, impulse side by side
    structinit-hf train --model vit_tiny_impulse3 --dataset my_images/
    structinit-hf evaluate --model runs/x/final --dataset my_images/
    structinit-hf push-to-hub --run-dir runs/x --repo-id me/my-model
    accelerate launch -m structinit_hf train ...   # several processes, GPUs or machines

Each command is the same code as the repository's ``scripts/<command>.py``; a user error ends as one line and exit
status 2, a command whose extra is not installed names it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from .train.commands import run_script, script_imports

# command -> (module, parser factory, function), imported only when the command runs
COMMANDS: dict[str, tuple[str, str, str]] = {
    "compare": ("structinit_hf.benchmark.compare_inits", "compare_parser", "compare_inits"),
    "train": ("structinit_hf.train.loop", "training_parser", "train"),
    "evaluate": ("structinit_hf.train.evaluation", "evaluation_parser", "run_evaluation"),
    "push-to-hub": ("structinit_hf.train.hub", "push_parser", "run_push"),
}


def _usage() -> str:
    return f"usage: structinit-hf {{{','.join(COMMANDS)}}} [options]  (structinit-hf <command> --help for each)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (default: the command line); return its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"{_usage()}\n\n{__doc__}")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"{_usage()}\nerror: unknown command {command!r}", file=sys.stderr)
        return 2
    module_name, parser_name, function_name = COMMANDS[command]
    with script_imports():  # a missing extra is one line naming it
        module = import_module(module_name)
    parser = getattr(module, parser_name)()
    parser.prog = f"structinit-hf {command}"
    function: Callable = getattr(module, function_name)
    return run_script(parser, function, rest)


if __name__ == "__main__":
    sys.exit(main())
