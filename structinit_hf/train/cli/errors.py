"""User errors: what the commands report as one line and exit status 2, and the helpers that word them.

A user error is any of :data:`USER_ERRORS`: raise :class:`UsageError` (or ``ValueError``) with a message that names
the bad value and what is allowed; missing files and unreadable data are ``OSError``s, a non-finite loss is
``FloatingPointError``. Everything else (``TypeError``, ``KeyError``, ...) is a bug and keeps its traceback.
:func:`did_you_mean` suggests the nearest name; :func:`check_kwarg_types` checks keywords read from a command line
against the annotations of the function that takes them. How a command turns these into its exit status:
:mod:`structinit_hf.train.cli.commands`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePath
from typing import Any

__all__ = [
    "INTERRUPTED_EXIT_STATUS",
    "USAGE_EXIT_STATUS",
    "USER_ERRORS",
    "SettingTypeError",
    "UsageError",
    "check_field_types",
    "check_kwarg_types",
    "did_you_mean",
]

USAGE_EXIT_STATUS = 2  # argparse's own status for a bad command line


INTERRUPTED_EXIT_STATUS = 130  # a shell's status for a command stopped by SIGINT


class UsageError(ValueError):
    """A value the user gave (flag, keyword, file) that cannot work; the message says what is allowed."""


class SettingTypeError(UsageError, TypeError):
    """A setting of the wrong type (``epochs=True``, ``lr="1e-3"``): a ``TypeError`` to Python, a user error to the
    commands."""


USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, FloatingPointError)


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'kernel_size'?)"`` for the choice nearest to ``value``, or ``""`` when none is close."""
    nearest = difflib.get_close_matches(value, list(choices), n=1)
    return f" (did you mean {nearest[0]!r}?)" if nearest else ""


def _accepts(value: Any, hint: Any) -> bool:
    """Whether a value read from the command line fits the annotation ``hint``; kinds it cannot judge pass."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(value, arm) for arm in args)
    if origin is typing.Literal:
        return value in args
    if origin is dict or hint is dict:
        return isinstance(value, Mapping) and (not args or all(_accepts(key, args[0]) for key in value))
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
    if isinstance(hint, type) and issubclass(hint, PurePath):
        return isinstance(value, (str, os.PathLike))
    if dataclasses.is_dataclass(hint):
        return isinstance(value, hint)
    return True  # a callable, a class, a tensor ...: not something a command line spells


def _describe(hint: Any) -> str:
    """``int``, ``int or (int, int)``, ``one of 'avg', 'token'``: how a type reads in a message."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arm) for arm in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin is dict or hint is dict:
        return f"a dict with {_describe(args[0])} keys" if args else "a dict"
    if isinstance(hint, type) and issubclass(hint, PurePath):
        return "a path (str or Path)"
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


def check_field_types(settings: Any, flag: Callable[[str], str | None] = lambda name: None) -> None:
    """Raise :class:`SettingTypeError` for the first field of the dataclass ``settings`` whose value does not fit its
    annotation, naming the field, its command-line flag (``flag(name)``, where it has one), the value and what is
    allowed: a bool is no number, a str no number, a float no int, a list no dict."""
    hints = typing.get_type_hints(type(settings))
    for item in dataclasses.fields(settings):
        value = getattr(settings, item.name)
        if not _accepts(value, hints[item.name]):
            where = f" ({flag(item.name)})" if flag(item.name) else ""
            kind = type(value).__name__
            raise SettingTypeError(
                f"{item.name}={value!r}{where}: not allowed ({'an' if kind[0] in 'aeiou' else 'a'} {kind}); "
                f"allowed: {_describe(hints[item.name])}"
            )
