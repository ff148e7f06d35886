"""The package's layers: the init algorithms at the bottom, the plugin above them, the application and the benchmark
on top. Each layer imports only the ones below it."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from package_imports import MODULE_FILES, PACKAGE, imports_in, is_module, module_name, package_imports, syntax_tree

# layer -> the package's subpackages it may import (itself included); modules at the top level belong to "plugin"
MAY_IMPORT = {
    "init": {"init"},
    "plugin": {"init", "plugin"},
    "train": {"init", "plugin", "train"},
    "benchmark": {"init", "plugin", "train", "benchmark"},
}
LAYER_OF = {"init": "init", "models": "plugin", "train": "train", "benchmark": "benchmark"}
MAX_MODULE_LINES = 450  # the project's guide: a module longer than this is split by what it does
# train/'s own top level: its faces (the user's API, what compare and the study use beyond it, the settings); every
# other module sits in a folder named for its role
TRAIN_TOP = {"__init__.py", "_internal.py", "settings.py"}
TRAIN_FOLDERS = {"cli", "data", "models", "publish", "training"}


def layer(module: str) -> str:
    """``structinit_hf.train.training.loop`` -> ``train``; the package and its top-level modules
    (``structinit_hf.atomic``) are the plugin's."""
    parts = module.split(".")
    return LAYER_OF.get(parts[1], "plugin") if len(parts) > 1 else "plugin"


def wrong_imports(module: str, imports: list[tuple[int, str]] | tuple[tuple[int, str], ...]) -> list[str]:
    """The imports of ``module`` from a layer above its own."""
    own = layer(module)
    return [
        f"line {line}: {target} ({layer(target)})"
        for line, target in imports
        if target != "structinit_hf" and layer(target) not in MAY_IMPORT[own]
    ]


@pytest.mark.parametrize("path", MODULE_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_imports_only_its_own_layer_and_those_below(path):
    if path.name == "__main__.py":  # the command dispatcher: it runs the application by name, on demand
        return
    module = module_name(path)
    wrong = wrong_imports(module, package_imports(path))
    assert not wrong, f"{path.relative_to(PACKAGE)} ({layer(module)}) imports {wrong}"


def test_the_algorithms_import_neither_timm_nor_transformers():
    for path in sorted((PACKAGE / "init").glob("*.py")):
        tops = {
            (node.module or "").partition(".")[0] if isinstance(node, ast.ImportFrom) else alias.name.partition(".")[0]
            for node in ast.walk(syntax_tree(path))
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0)
            for alias in node.names
        }
        assert not tops & {"timm", "transformers"}, f"{path.name} imports {sorted(tops & {'timm', 'transformers'})}"


def test_the_layer_check_sees_a_wrong_import():
    """The check above is not vacuous: a plugin module that imports the application is caught."""
    probe = ast.parse("def f():\n    from ..train.training.loop import train\n")
    wrong = wrong_imports("structinit_hf.models.probe", imports_in(probe, "structinit_hf.models.probe"))
    assert wrong == ["line 2: structinit_hf.train.training.loop (train)"]


@pytest.mark.slow  # a fresh Python: what the plugin imports, with nothing imported before it
def test_using_the_plugin_loads_no_application_module():
    code = (
        "import sys, timm, structinit_hf\n"
        "from transformers import AutoModelForImageClassification\n"
        "m = timm.create_model('vit_tiny_impulse3', depth=1)\n"
        "hf = AutoModelForImageClassification.from_config(structinit_hf.StructInitViTConfig(model_args={'depth': 1}))\n"
        "print(sorted(n for n in sys.modules if n.startswith(('structinit_hf.train', 'structinit_hf.benchmark'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "[]"


def test_compare_does_not_load_the_campaign():
    """Catches the user-facing ``compare`` importing the repository's own study (``benchmark/campaign/``), at any
    depth: the modules it imports, theirs, and the packages around them."""
    seen, todo = set(), ["structinit_hf.benchmark.compare_inits"]
    while todo:
        module = todo.pop()
        parts = module.split(".")
        parents = [".".join(parts[:i]) for i in range(1, len(parts))]
        if module in seen or not is_module(module):
            continue
        seen.add(module)
        path = PACKAGE.parent.joinpath(*parts)
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        todo += parents + [target for _, target in package_imports(path)]
    assert "structinit_hf.benchmark.stats" in seen
    assert [name for name in seen if ".campaign" in name] == []


def test_the_structure_map_in_the_docs_names_every_module():
    """Catches a module added, moved or removed without docs/development.md's tree following."""
    text = (PACKAGE.parent / "docs" / "development.md").read_text()
    tree = text.split("## Layout", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    listed, folders = set(), []  # the folders open at indent 2, 4, ...: a line is indented 2 past its folder's
    for line in tree.strip("\n").splitlines()[1:]:  # after the package's own line
        name = line.split()[0] if line.strip() else ""
        depth, odd = divmod(len(line) - len(line.lstrip()), 2)
        if name and depth == 0:  # the package's tree ends where the repository's folders start
            break
        if not name or odd or depth > len(folders) + 1:  # a description's continuation line
            continue
        del folders[depth - 1 :]
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        else:
            listed.add("/".join([*folders, name]))
    modules = {str(p.relative_to(PACKAGE)) for p in MODULE_FILES if p.name != "__init__.py" or p.parent == PACKAGE}
    assert listed == modules, (
        f"only in the docs: {sorted(listed - modules)}; only in the code: {sorted(modules - listed)}"
    )


@pytest.mark.parametrize("path", MODULE_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_module_is_under_the_line_limit(path):
    """Catches a module grown past the guide's limit (``train/data.py`` once reached 595 lines)."""
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines < MAX_MODULE_LINES, f"{path.relative_to(PACKAGE)}: {lines} lines; split it by what it does"


def test_train_keeps_only_its_faces_at_the_top_and_the_rest_in_role_folders():
    """Catches a module of the application added beside its faces instead of in the folder of its role (the command
    line, training, models, data, publishing), and a role folder without its ``__init__.py``."""
    train = PACKAGE / "train"
    top = {path.name for path in train.iterdir() if path.suffix == ".py"}
    folders = {path.name for path in train.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert top == TRAIN_TOP
    assert folders == TRAIN_FOLDERS
    assert all((train / folder / "__init__.py").is_file() for folder in folders)
    assert (train / "publish" / "card_templates" / "timm.md.j2").is_file()  # the cards' templates, with their reader
