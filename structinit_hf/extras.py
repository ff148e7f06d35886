"""The optional parts of the package and the extras that install them.

``import structinit_hf`` needs torch and timm only. The transformers route, the training application and the
benchmarks need more; :func:`require` turns a missing package into one line naming the extra to install.
"""

from __future__ import annotations

from importlib.util import find_spec

__all__ = ["EXTRAS", "MissingExtraError", "require"]

# extra -> the importable modules it installs (setup.cfg's [options.extras_require] lists their distributions)
EXTRAS = {
    "train": ("transformers", "accelerate", "datasets", "torchvision", "PIL", "jinja2", "numpy", "tqdm"),
    "bench": ("matplotlib",),
}


class MissingExtraError(ImportError):
    """A part of structinit_hf was used without the extra that installs what it imports."""


def require(extra: str, user: str) -> None:
    """Raise :class:`MissingExtraError` naming ``extra`` when one of its modules is not installed."""
    missing = [module for module in EXTRAS[extra] if find_spec(module) is None]
    if missing:
        raise MissingExtraError(
            f"{user} needs {', '.join(missing)} (the {extra!r} extra): pip install 'structinit-hf[{extra}]'"
        )
