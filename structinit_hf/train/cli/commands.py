"""How every script runs: a user error ends as one line on stderr and exit status 2, no traceback.

Each script imports the application inside :func:`script_imports` (a package of an extra that is not installed
is one line naming the extra), builds its parser, names the function that does the work, and hands both to
:func:`run_script`, which adds ``--debug``, parses the command line and runs the function::

    from structinit_hf.train.cli.commands import run_script, script_imports

    with script_imports():
        from structinit_hf.train.cli.args import training_parser
        from structinit_hf.train.training.loop import run_command

    if __name__ == "__main__":
        sys.exit(run_script(training_parser(), run_command))

The function takes the parsed ``argparse.Namespace``; it returns ``None`` or an exit status. A user error (any of
:data:`~structinit_hf.train.cli.errors.USER_ERRORS`) ends as one line; with ``--debug`` it keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from importlib.util import find_spec

from ..training.stopping import STOPPED_EXIT_STATUS, TrainingStopped
from .errors import INTERRUPTED_EXIT_STATUS, USAGE_EXIT_STATUS, USER_ERRORS, did_you_mean

__all__ = ["EXTRAS", "extra_for", "missing_extra_message", "run_script", "script_imports"]


@contextmanager
def script_imports() -> Iterator[None]:
    """Run a script's imports (or any code): a module of an extra that is not installed ends the script with one
    line naming the extra and exit status :data:`USAGE_EXIT_STATUS`; any other import error keeps its traceback."""
    try:
        yield
    except ModuleNotFoundError as error:
        script = sys.argv[0] if sys.argv[0].endswith(".py") else "this command"
        message = missing_extra_message(error, script)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(USAGE_EXIT_STATUS) from None


def run_script(
    parser: argparse.ArgumentParser,
    function: Callable[[argparse.Namespace], int | None | object],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse ``argv`` (default: the command line) with ``parser`` plus ``--debug`` and call ``function``.

    ``function`` gets the namespace without ``debug``; a flag the parser does not know is one line naming the nearest
    one.  Returns the exit status: ``function``'s own when
    it returns an int, else 0; a user error prints ``error: <message>`` on stderr and returns
    :data:`USAGE_EXIT_STATUS`; training stopped at a checkpoint by a signal prints what was saved and how to resume
    and returns :data:`~.stopping.STOPPED_EXIT_STATUS`; a ``KeyboardInterrupt`` (Ctrl-C outside training, a second
    signal inside it) prints ``interrupted`` (with its message, if any) and returns :data:`INTERRUPTED_EXIT_STATUS`
    (``--debug`` re-raises each).
    """
    parser.add_argument("--debug", action="store_true", help="show the full traceback of a user error")
    args, extras = parser.parse_known_args(argv)
    if extras:
        return _unknown_flag(parser, extras)
    debug = vars(args).pop("debug")  # not the function's flag: results and resume checks never see it
    try:
        with nullcontext() if debug else script_imports():  # an extra's module may be imported late (plots)
            status = function(args)
    except USER_ERRORS as error:
        if debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        return USAGE_EXIT_STATUS
    except TrainingStopped as stopped:  # a signal: the run saved a checkpoint and says how to resume
        if debug:
            raise
        print(stopped, file=sys.stderr)
        return STOPPED_EXIT_STATUS
    except KeyboardInterrupt as interrupt:  # Ctrl-C: one line (the function may say how to go on), the shell's 130
        if debug:
            raise
        print(f"interrupted{f': {interrupt}' if str(interrupt) else ''}", file=sys.stderr)
        return INTERRUPTED_EXIT_STATUS
    return status if isinstance(status, int) and not isinstance(status, bool) else 0


def _unknown_flag(parser: argparse.ArgumentParser, extras: list[str]) -> int:
    """A mistyped flag (``--epoch``) is one line naming the nearest flag, as a mistyped model keyword is; words that
    are no flag get argparse's own error."""
    flag = next((word.partition("=")[0] for word in extras if word.startswith("-")), None)
    if flag is None:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    flags = [option for action in parser._actions for option in action.option_strings]  # argparse has no public list
    print(
        f"error: unrecognized argument {flag}{did_you_mean(flag, flags)}; {parser.prog} --help lists them",
        file=sys.stderr,
    )
    return USAGE_EXIT_STATUS


# extra -> the importable modules it installs (setup.cfg's [options.extras_require] lists their distributions)
EXTRAS = {
    "train": ("transformers", "accelerate", "datasets", "torchvision", "PIL", "jinja2", "numpy", "tqdm"),
    "bench": ("matplotlib",),
    "tensorboard": ("tensorboard",),
}


def extra_for(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name such as ``"accelerate.utils"``), or ``None``."""
    top = (module or "").partition(".")[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


def missing_extra_message(error: ModuleNotFoundError, user: str) -> str | None:
    """``"<user> needs <module> (the 'train' extra): pip install 'structinit-hf[train]'"`` for a module of an extra
    that is not installed; ``None`` when ``error`` is about any other module (a bug, not a missing extra)."""
    top = (error.name or "").partition(".")[0]
    extra = extra_for(top)
    if extra is None or (top != error.name and find_spec(top) is not None):
        return None  # a part of an installed package is missing: a version to fix, not an extra to install
    return f"{user} needs {top} (the {extra!r} extra): pip install 'structinit-hf[{extra}]'"
