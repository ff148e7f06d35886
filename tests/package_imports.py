"""The package's own imports, read with ``ast`` once per file: what the layout and import-graph tests check."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "structinit_hf"
MODULE_FILES = sorted(PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    """``structinit_hf/train/training/loop.py`` -> ``structinit_hf.train.training.loop``; a package's ``__init__.py``
    -> the package."""
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@functools.cache
def syntax_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def imports_in(tree: ast.Module, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """``(line, name)`` for every ``structinit_hf`` module the code of ``module`` imports, at any depth (a function's
    lazy import and a ``TYPE_CHECKING`` one count): ``from .x import y`` names ``x``, and ``x.y`` too when ``y`` is a
    module."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            anchor = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*anchor, *([node.module] if node.module else [])])
            if target.startswith("structinit_hf"):
                found.append((node.lineno, target))
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names if is_module(f"{target}.{a.name}")]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("structinit_hf")]
    return found


@functools.cache
def package_imports(path: Path) -> tuple[tuple[int, str], ...]:
    """:func:`imports_in` of a file of the package."""
    return tuple(imports_in(syntax_tree(path), module_name(path), path.name == "__init__.py"))


def import_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports (itself left out)."""
    graph = {}
    for path in MODULE_FILES:
        name = module_name(path)
        graph[name] = {target for _, target in package_imports(path) if target != name and is_module(target)}
    return graph
