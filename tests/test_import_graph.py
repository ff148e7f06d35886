"""The import graph of the package, read with ``ast``: ``benchmark/`` and the study's scripts reach training through
its faces only, and the modules of ``train/`` import one another without a circle."""

from __future__ import annotations

import ast

from package_imports import MODULE_FILES, PACKAGE, import_graph, imports_in, syntax_tree

# what benchmark/ and the study may import from the application: its faces, the package's public names and what
# compare and the study need beyond the user's API (train/_internal.py)
TRAIN_ENTRY = {"structinit_hf.train", "structinit_hf.train._internal"}
STUDY_FILES = sorted((PACKAGE.parent / "study").rglob("*.py"))


def private_train_imports(targets) -> list[str]:
    """The modules of ``train/`` among ``targets`` that are not one of its faces."""
    return sorted(
        target for target in targets if target.startswith("structinit_hf.train") and target not in TRAIN_ENTRY
    )


def test_benchmark_reaches_training_only_through_its_public_entry():
    """Catches compare or the benchmark importing a private module of train/ (its loop, its data, its run folder)
    instead of ``structinit_hf.train``'s public names and ``structinit_hf.train._internal``."""
    graph = import_graph()
    private = {
        module: private_train_imports(targets)
        for module, targets in graph.items()
        if module.startswith("structinit_hf.benchmark")
    }
    assert {module: targets for module, targets in private.items() if targets} == {}


def test_the_study_reaches_training_only_through_its_faces():
    """Catches a study script (``study/*.py``, ``study/campaign/``) importing a module of train/ by its path (a
    subpackage's loop, data or hub) instead of ``structinit_hf.train`` and ``structinit_hf.train._internal``, whose
    names do not move when train/'s folders do."""
    assert len(STUDY_FILES) > 10
    private = {
        str(path.relative_to(PACKAGE.parent)): private_train_imports(
            target for _, target in imports_in(syntax_tree(path), "study." + path.stem)
        )
        for path in STUDY_FILES
    }
    assert {path: targets for path, targets in private.items() if targets} == {}


def test_the_faces_check_sees_a_private_import():
    """The two checks above are not vacuous: a script importing a module of train/'s folders, or one through a
    submodule of the package, is caught; the faces pass."""
    probe = ast.parse(
        "from structinit_hf.train import run\n"
        "from structinit_hf.train._internal import load_model\n"
        "def f():\n"
        "    from structinit_hf.train.training.loop import run_command\n"
        "    from structinit_hf.train.models import loading\n"
    )
    found = private_train_imports(target for _, target in imports_in(probe, "study.probe"))
    assert found == [
        "structinit_hf.train.models",
        "structinit_hf.train.models.loading",
        "structinit_hf.train.training.loop",
    ]


def test_the_modules_of_train_import_one_another_without_a_circle():
    """Catches an import circle among train/'s modules (held together by a TYPE_CHECKING import, say); the package's
    ``__init__`` re-exports lazily, so it is not a node of the circle check."""
    graph = {
        module: {target for target in targets if target.startswith("structinit_hf.train.")}
        for module, targets in import_graph().items()
        if module.startswith("structinit_hf.train.")
    }
    assert graph, "no train modules found"
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError(f"import circle: {' -> '.join([*path[path.index(module) :], module])}")
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_the_graph_reader_sees_lazy_and_relative_imports(tmp_path):
    """The checks above are only as good as the reader: a relative import inside a function is an edge."""
    graph = import_graph()
    assert (
        "structinit_hf.train.training.loop" in graph["structinit_hf.train.cli.args"]
        or "structinit_hf.train.settings" in graph["structinit_hf.train.cli.args"]
    )
    assert "structinit_hf.train.settings" in graph["structinit_hf.train.training.loop"]
    assert "structinit_hf.train.training.loop" in graph["structinit_hf.train"]  # TYPE_CHECKING imports are read too
    assert "structinit_hf.train.training.run_folder" in graph["structinit_hf.train._internal"]


def test_no_package_module_imports_the_study_or_names_its_paths():
    """Catches the installed package reaching into the repository's own study (``study/``: not in the wheel)."""
    offenders = []
    for path in MODULE_FILES:
        imports = {
            alias.name if isinstance(node, ast.Import) else node.module or ""
            for node in ast.walk(syntax_tree(path))
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0)
            for alias in node.names
        }
        if any(name == "study" or name.startswith("study.") for name in imports) or "study/" in path.read_text():
            offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []
