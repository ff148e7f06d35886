"""The package's own imports, read with ``ast`` once per file: what the layout and import-graph tests check."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "structinit_hf"
MODULE_FILES = sorted(PACKAGE.rglob("*.py"))
STUDY_FILES = sorted((PACKAGE.parent / "study").rglob("*.py"))  # the repository's own study: not in the wheel
TREE_FILES = [*MODULE_FILES, *STUDY_FILES]
TREE = ("structinit_hf", "study")  # the top-level names whose imports are read


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
    """``(line, name)`` for every module of :data:`TREE` the code of ``module`` imports, at any depth (a function's
    lazy import and a ``TYPE_CHECKING`` one count): ``from .x import y`` names ``x``, and ``x.y`` too when ``y`` is a
    module."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            anchor = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*anchor, *([node.module] if node.module else [])])
            if target.partition(".")[0] in TREE:
                found.append((node.lineno, target))
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names if is_module(f"{target}.{a.name}")]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.partition(".")[0] in TREE]
    return found


@functools.cache
def package_imports(path: Path) -> tuple[tuple[int, str], ...]:
    """:func:`imports_in` of a file of the package."""
    return tuple(imports_in(syntax_tree(path), module_name(path), path.name == "__init__.py"))


def import_graph(files: list[Path] = MODULE_FILES) -> dict[str, set[str]]:
    """Each module of ``files`` (by default the package's) -> the modules of :data:`TREE` it imports (itself left
    out)."""
    graph = {}
    for path in files:
        name = module_name(path)
        graph[name] = {target for _, target in package_imports(path) if target != name and is_module(target)}
    return graph
