"""timm's own model tests, run over every name this package registers.

The sdist of the installed timm is fetched with pip (cached under ``.pytest_cache`` per version) and its
``tests/test_models.py`` runs in a subprocess with ``timm_suite_plugin`` loaded: that plugin imports the package,
adds its module to timm's forward-intermediates filter and keeps only our names (see its docstring). Nothing may
fail; a test may only be skipped because it needs the Hub (network) or a GPU.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
import timm
from timm_suite_plugin import RUN_ONCE_FILTERS, RUN_ONCE_TEST, model_of, registered_models, runs_once

TESTS = Path(__file__).resolve().parent
PLUGIN = "timm_suite_plugin"
SUITE_FILE = "tests/test_models.py"
# 83 tests: 63 min measured on 2 cores at load 7-10 (a benchmark beside it); a readable failure before CI's 90 min
SUITE_TIMEOUT_S = 75 * 60
ALLOWED_SKIP = re.compile(r"\b(hub|network|offline|internet|cuda|gpu)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Result:
    test: str  # test function, e.g. test_model_backward
    model: str  # registered name, tag kept (vit_tiny_impulse3.cifar10)
    outcome: str  # passed | failed | error | skipped
    message: str  # first line of the error or the skip reason
    seconds: float


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def sdist_tests(package: str, version: str, cache: Path, marker: str = SUITE_FILE) -> Path:
    """Unpack ``tests/`` and ``pyproject.toml`` of the ``package==version`` sdist under ``cache``; return its root.

    Downloads with pip once per cache folder. Without a package index the test is skipped, except under
    ``CI=true``, where that is a failure.
    """
    root = cache / f"{package}-{version}"
    if (root / marker).is_file():
        return root
    download = [
        *(sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"),
        *("--disable-pip-version-check", "--retries", "2", "--timeout", "30"),
        *(f"{package}=={version}", "-d", str(cache)),
    ]
    proc = subprocess.run(download, capture_output=True, text=True)
    sdists = sorted(cache.glob("*.tar.gz"))
    if proc.returncode != 0 or not sdists:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        message = f"pip could not download the {package}=={version} sdist from the package index: {last}"
        if in_ci():
            pytest.fail(f"{message}\n{proc.stdout}\n{proc.stderr}")
        pytest.skip(message)
    with tarfile.open(sdists[-1]) as tar, tempfile.TemporaryDirectory(dir=cache) as unpacked:
        prefix = tar.getnames()[0].split("/")[0]
        wanted = [
            m for m in tar.getmembers() if m.name.startswith(f"{prefix}/tests/") or m.name == f"{prefix}/pyproject.toml"
        ]
        tar.extractall(unpacked, members=wanted, filter="data")
        os.replace(Path(unpacked) / prefix, root)  # whole or not at all: an interrupted unpack is not reused
    return root


def read_junit(path: Path, names: list[str]) -> list[Result]:
    outcomes = {"failure": "failed", "error": "error", "skipped": "skipped"}
    results = []
    for case in ET.parse(path).iter("testcase"):
        test_id = case.get("name", "")
        outcome, message = "passed", ""
        for child in case:
            if child.tag in outcomes and outcome in ("passed", "skipped"):
                outcome = outcomes[child.tag]
                message = ((child.get("message") or child.text or "").strip().splitlines() or [""])[0]
        model = model_of(test_id, names) or "?"
        results.append(Result(test_id.partition("[")[0], model, outcome, message, float(case.get("time", 0))))
    return results


def summary(results: list[Result], names: list[str], seconds: float) -> str:
    counts = Counter(r.outcome for r in results)
    lines = [
        f"timm {timm.__version__} {SUITE_FILE} over {len(names)} names in {seconds:.0f} s: "
        + ", ".join(f"{counts[o]} {o}" for o in ("passed", "failed", "error", "skipped") if counts[o]),
        f"run once ({RUN_ONCE_TEST} only): {', '.join(n for n in names if runs_once(n)) or 'none'} "
        f"(filters {RUN_ONCE_FILTERS})",
    ]
    by_model: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        by_model[result.model].append(result)
    for model in sorted(by_model):
        group = by_model[model]
        passed = sum(r.outcome == "passed" for r in group)
        lines.append(f"  {model}: {passed}/{len(group)} passed, {sum(r.seconds for r in group):.0f} s")
        lines += [f"    {r.outcome.upper()} {r.test}: {r.message}" for r in group if r.outcome != "passed"]
    return "\n".join(lines)


@pytest.mark.slow
def test_timm_model_suite(
    pytestconfig: pytest.Config,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if importlib.util.find_spec("pytest_timeout") is None:
        pytest.fail("pytest-timeout (in the test extra) is needed: timm's tests set per-test time limits with it")
    cache_name = f"timm-{timm.__version__}-sdist"
    cache = pytestconfig.cache.mkdir(cache_name) if hasattr(pytestconfig, "cache") else tmp_path_factory.mktemp("sdist")
    root = sdist_tests("timm", timm.__version__, cache)
    names = registered_models()
    junit, log = tmp_path / "timm-suite.xml", tmp_path / "timm-suite.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p))
    command = [
        *(sys.executable, "-m", "pytest", SUITE_FILE, "-p", PLUGIN, "-p", "no:cacheprovider"),
        *("-c", "pyproject.toml", "--rootdir", ".", f"--junitxml={junit}", "-q", "-rfEs"),
    ]
    start = time.monotonic()
    with log.open("w") as out:
        try:
            proc = subprocess.run(
                command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=SUITE_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"timm's suite ran past {SUITE_TIMEOUT_S} s; its output:\n{log.read_text()[-6000:]}")
    seconds = time.monotonic() - start
    output = log.read_text()
    if proc.returncode not in (0, 1) or not junit.is_file():
        pytest.fail(f"timm's suite did not run (pytest exit {proc.returncode}):\n{output[-6000:]}")

    results = read_junit(junit, names)
    report = summary(results, names, seconds)
    with capsys.disabled():
        print(f"\n{report}")

    missing = sorted(set(names) - {r.model.split(".")[0] for r in results})
    failed = [r for r in results if r.outcome in ("failed", "error")]
    bad_skips = [r for r in results if r.outcome == "skipped" and not ALLOWED_SKIP.search(r.message)]
    problems = [
        *([f"{len(failed)} of timm's tests fail on our models"] if failed else []),
        *([f"{len(bad_skips)} skipped for a reason that is neither the network nor a GPU"] if bad_skips else []),
        *([f"no timm test ran for {missing}"] if missing else []),
    ]
    assert not problems, "; ".join(problems) + f"\n{report}"
