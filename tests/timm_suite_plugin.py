"""pytest plugin that runs timm's own ``tests/test_models.py`` over the models structinit_hf registers.

Loaded with ``-p timm_suite_plugin`` in the run that ``test_timm_suite.py`` starts on the file from the timm
sdist; the file itself is not edited. The plugin

- imports ``structinit_hf``, so its names are in timm's registry when ``test_models.py`` builds its lists;
- adds the registry module of those names to ``FEAT_INTER_FILTERS``, the modules timm runs its
  ``forward_intermediates`` / ``features_only`` getter tests on, while ``test_models.py`` is collected;
- narrows every ``list_models(...)`` of that collection to our names, so timm's own include/exclude filters and
  size limits still decide which tests each name gets; tests not parametrized by one of our names are deselected;
- runs the names matching :data:`RUN_ONCE_FILTERS` in :data:`RUN_ONCE_TEST` only (they cost the most to build);
- turns a failure that only says the Hub could not be reached into a skip that says so.
"""

from __future__ import annotations

import fnmatch
import sys
from typing import Any

import pytest
import timm
import timm.models
from timm.models import model_entrypoint, split_model_name_tag

import structinit_hf

PACKAGE = structinit_hf.__name__
# built once, in RUN_ONCE_TEST, not in every test: the 224 px models (ViT, Swin, Mixer), which cost the most to build,
# and the twins whose class and code path a fully tested name already covers (an alias, another kernel size, another
# init of the same Swin or Mixer class); each model class runs the whole suite under at least one name
RUN_ONCE_FILTERS = [
    "*_224",
    "vit_mimetic",
    "vit_tiny_impulse5",
    "swin_tiny_mimetic_*",
    "swin_tiny_patch2_*",
    "mixer_s4_32",
]
RUN_ONCE_TEST = "test_model_forward"
FEATURE_FILTER_LIST = "FEAT_INTER_FILTERS"  # test_models.py's list of modules with forward_intermediates()


def registered_models() -> list[str]:
    """The timm names whose entrypoints live in this package (untagged)."""
    return [name for name in timm.list_models() if model_entrypoint(name).__module__.split(".")[0] == PACKAGE]


def registered_modules() -> list[str]:
    """timm's module keys (the last part of the module path) under which this package's names are registered."""
    return sorted({model_entrypoint(name).__module__.rsplit(".", 1)[-1] for name in registered_models()})


def runs_once(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in RUN_ONCE_FILTERS)


def model_of(test_id: str, names: list[str]) -> str | None:
    """The registered name (tag kept) among the parameters of a test id such as ``test_x[1-vit_tiny_impulse3]``."""
    params = test_id.partition("[")[2].rstrip("]")
    return next((p for p in params.split("-") if split_model_name_tag(p)[0] in names), None)


def network_reason(exc: BaseException) -> str | None:
    """Why ``exc`` means "the Hub (network) could not be reached", or None when it is any other error."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    network_errors: tuple[type[BaseException], ...] = (LocalEntryNotFoundError, OfflineModeIsEnabled, ConnectionError)
    try:
        import httpx

        network_errors += (httpx.ConnectError, httpx.ConnectTimeout)
    except ImportError:
        pass
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, network_errors):
            first_line = (str(exc).splitlines() or [""])[0]
            return f"needs the Hugging Face Hub (network): {type(exc).__name__}: {first_line}"
        exc = exc.__cause__ or exc.__context__
    return None


class _SuiteSelection:
    """Wraps ``timm.list_models`` while ``test_models.py`` is collected."""

    def __init__(self) -> None:
        self.names = registered_models()
        self.modules = registered_modules()
        self.feature_filters_patched = False
        self.collecting = False
        self._list_models = timm.list_models

    def list_models(self, *args: Any, **kwargs: Any) -> list[str]:
        if not self.collecting:  # test_models.py keeps this function as its `list_models`; bodies get timm's
            return self._list_models(*args, **kwargs)
        module = kwargs["module"] if "module" in kwargs else (args[1] if len(args) > 1 else "")
        caller_globals = sys._getframe(1).f_globals
        if isinstance(module, list) and module is caller_globals.get(FEATURE_FILTER_LIST):
            module.extend(m for m in self.modules if m not in module)
            self.feature_filters_patched = True
        return [name for name in self._list_models(*args, **kwargs) if split_model_name_tag(name)[0] in self.names]

    def install(self) -> None:
        self.collecting = True
        timm.list_models = timm.models.list_models = self.list_models

    def uninstall(self) -> None:
        self.collecting = False
        timm.list_models = timm.models.list_models = self._list_models


_selection: _SuiteSelection | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _selection
    _selection = _SuiteSelection()
    if not _selection.names:
        raise pytest.UsageError(f"no timm names are registered by {PACKAGE}")
    _selection.install()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    assert _selection is not None
    _selection.uninstall()
    if not _selection.feature_filters_patched:
        raise pytest.UsageError(
            f"test_models.py never called list_models(module={FEATURE_FILTER_LIST}): "
            f"update {__name__} for this timm version"
        )
    selected, deselected = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        name = split_model_name_tag(str(params.get("model_name", "")))[0]
        ours = name in _selection.names
        if ours and (not runs_once(name) or getattr(item, "originalname", item.name) == RUN_ONCE_TEST):
            selected.append(item)
        else:
            deselected.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = selected


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    try:
        return (yield)
    except Exception as exc:
        reason = network_reason(exc)
        if reason is None:
            raise
        pytest.skip(reason)
