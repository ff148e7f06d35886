"""How every script runs: a user error ends as one line on stderr and exit status 2, no traceback.

Each script imports the application inside :func:`script_imports` (a package of an extra that is not installed
is one line naming the extra), builds its parser, names the function that does the work, and hands both to
:func:`run_script`, which adds ``--debug``, parses the command line and runs the function::

    from structinit_hf.cli import run_script, script_imports

    with script_imports():
        from structinit_hf.training import train, training_parser

    if __name__ == "__main__":
        sys.exit(run_script(training_parser(), train))

The function takes the parsed ``argparse.Namespace``; it returns ``None`` or an exit status.
A user error is any of :data:`USER_ERRORS`: raise :class:`UsageError` (or ``ValueError``) with a message
that names the bad value and what is allowed; missing files and unreadable data are ``OSError``s, a
non-finite loss is ``FloatingPointError``.  Everything else (``TypeError``, ``KeyError``, ...) is a bug and
keeps its traceback.  With ``--debug`` user errors keep theirs too.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from .extras import missing_extra_message

__all__ = [
    "USAGE_EXIT_STATUS",
    "USER_ERRORS",
    "KeyValueAction",
    "UsageError",
    "check_kwarg_types",
    "did_you_mean",
    "run_script",
    "script_imports",
]

USAGE_EXIT_STATUS = 2  # argparse's own status for a bad command line
INTERRUPTED_EXIT_STATUS = 130  # a shell's status for a command stopped by SIGINT


class UsageError(ValueError):
    """A value the user gave (flag, keyword, file) that cannot work; the message says what is allowed."""


USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, FloatingPointError)


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'kernel_size'?)"`` for the choice nearest to ``value``, or ``""`` when none is close."""
    nearest = difflib.get_close_matches(value, list(choices), n=1)
    return f" (did you mean {nearest[0]!r}?)" if nearest else ""


class KeyValueAction(argparse.Action):
    """``--model-kwargs depth=3 pseudo_input=learned`` as a dict: values read as Python literals, else strings.

    timm's ``ParseKwargs`` does the same but ends a word without ``=`` in a ``ValueError`` traceback from
    inside ``parse_args``; here it is argparse's own one-line usage error (exit status 2).
    """

    def __call__(self, parser, namespace, values, option_string=None):
        kwargs = {}
        for word in values:
            key, sep, text = word.partition("=")
            if not sep or not key:
                parser.error(f"{option_string}: {word!r} is not key=value (for example depth=3 kernel_size=5)")
            try:
                kwargs[key] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                kwargs[key] = text  # a bare word such as pseudo_input=learned
        setattr(namespace, self.dest, kwargs)


def _accepts(value: Any, hint: Any) -> bool:
    """Whether a value read from the command line fits the annotation ``hint``; kinds it cannot judge pass."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(value, arm) for arm in args)
    if origin is typing.Literal:
        return value in args
    if origin in (tuple, list):
        if not isinstance(value, (tuple, list)):
            return False
        if origin is list or (len(args) == 2 and args[1] is Ellipsis):  # any length, one item type
            return not args or all(_accepts(item, args[0]) for item in value)
        return not args or (len(args) == len(value) and all(map(_accepts, value, args)))
    if hint is type(None):
        return value is None
    if hint in (int, float) and isinstance(value, bool):
        return False
    if hint in (bool, int, str):
        return isinstance(value, hint)
    if hint is float:
        return isinstance(value, (int, float))
    return True  # a callable, a class, a tensor ...: not something a command line spells


def _describe(hint: Any) -> str:
    """``int``, ``int or (int, int)``, ``one of 'avg', 'token'``: how a type reads in a message."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arm) for arm in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return f"a list of {_describe(args[0])}" if args else "a list"
    if origin is tuple:
        return "(" + ", ".join(_describe(arg) for arg in args) + ")"
    return "None" if hint is type(None) else getattr(hint, "__name__", str(hint))


def check_kwarg_types(kwargs: Mapping[str, Any], hints: Mapping[str, Any], flag: str) -> None:
    """Raise :class:`UsageError` naming ``flag``, the keyword and its allowed types for the first value of ``kwargs``
    that does not fit its annotation in ``hints`` (``typing.get_type_hints`` of the function that takes them)."""
    for name, value in kwargs.items():
        if name not in hints:
            continue
        hint = hints[name]
        if name.endswith("_size"):  # timm converts sizes with to_2tuple: an int and (h, w) are both taken
            hint = hint | int | tuple[int, int]
        if not _accepts(value, hint):
            raise UsageError(f"{flag} {name}={value!r}: {name} takes {_describe(hints[name])}")


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

    ``function`` gets the namespace without ``debug``.  Returns the exit status: ``function``'s own when
    it returns an int, else 0; a user error prints ``error: <message>`` on stderr and returns
    :data:`USAGE_EXIT_STATUS`, Ctrl-C prints ``interrupted`` (with the ``KeyboardInterrupt``'s message, if any) and
    returns :data:`INTERRUPTED_EXIT_STATUS` (``--debug`` re-raises either).
    """
    parser.add_argument("--debug", action="store_true", help="show the full traceback of a user error")
    args = parser.parse_args(argv)
    debug = vars(args).pop("debug")  # not the function's flag: results and resume checks never see it
    try:
        with nullcontext() if debug else script_imports():  # an extra's module may be imported late (plots)
            status = function(args)
    except USER_ERRORS as error:
        if debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        return USAGE_EXIT_STATUS
    except KeyboardInterrupt as interrupt:  # Ctrl-C: one line (the function may say how to go on), the shell's 130
        if debug:
            raise
        print(f"interrupted{f': {interrupt}' if str(interrupt) else ''}", file=sys.stderr)
        return INTERRUPTED_EXIT_STATUS
    return status if isinstance(status, int) and not isinstance(status, bool) else 0
