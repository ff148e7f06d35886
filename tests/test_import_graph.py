"""The import graph of the package, read with ``ast``: ``benchmark/`` and the study's scripts reach training through
its faces only, and no module of the package or the study is in an import circle."""

from __future__ import annotations

import ast

from package_imports import MODULE_FILES, PACKAGE, STUDY_FILES, TREE_FILES, import_graph, imports_in, syntax_tree

# what benchmark/ and the study may import from the application: its faces, the package's public names and what
# compare and the study need beyond the user's API (train/_internal.py)
TRAIN_ENTRY = {"structinit_hf.train", "structinit_hf.train._internal"}


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


def import_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """The first circle of ``graph`` (module -> the modules it imports) as the modules along it, else ``None``."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for target in sorted(graph.get(module, ())):
            if circle := visit(target, [*path, module]):
                return circle
        done.add(module)
        return None

    return next((circle for module in sorted(graph) if (circle := visit(module, []))), None)


def test_no_module_of_the_package_or_the_study_is_in_an_import_circle():
    """Catches an import circle anywhere in the tree (the package and study/), held together by a function's lazy
    import or a TYPE_CHECKING one (the campaign's record built its settings beyond the plain ViT through a lazy import
    of the module that imported the record's helpers back): it works only while nothing imports the modules in
    another order, and it ties them into one."""
    assert import_circle(import_graph(TREE_FILES)) is None


def test_the_circle_check_sees_a_circle():
    assert import_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert import_circle({"a": {"b"}, "b": set()}) is None


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
