"""The plugin loads without the application: what `import structinit_hf` pulls in, and the missing-extra message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import script_path
from without_package import package_not_installed

from structinit_hf.train.cli import commands
from structinit_hf.train.cli import settings_checks as checks

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_importing_the_plugin_loads_neither_transformers_nor_the_training_stack():
    script = (
        "import sys, timm, structinit_hf; timm.create_model('vit_tiny_impulse3', img_size=16, depth=1); "
        "print(sorted(m for m in ('transformers', 'accelerate', 'datasets', 'matplotlib', 'jinja2') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


# a script, the module it needs from an extra, and that extra: each run with the module hidden
MISSING = {
    "train-accelerate": ("train", "accelerate", "train"),
    "evaluate-datasets": ("evaluate", "datasets", "train"),
    "push-jinja2": ("push_to_hub", "jinja2", "train"),
    "benchmark-datasets": ("study/benchmark_small_data", "datasets", "train"),
    # drawn after training: checked before it
    "benchmark-matplotlib": ("study/benchmark_small_data", "matplotlib", "bench"),
    "report-matplotlib": ("study/campaign_report", "matplotlib", "bench"),
}


def _argv(script: str, out: Path) -> list[str]:
    """--help stops at the imports; the report imports matplotlib only when it draws."""
    return ["--out-dir", str(out / "report")] if script.endswith("campaign_report") else ["--help"]


def _check_names_the_extra(case: str, done: subprocess.CompletedProcess) -> None:
    script, module, extra = MISSING[case]
    script_file = script_path(script)
    line = f"error: {script_file} needs {module} (the {extra!r} extra): pip install 'structinit-hf[{extra}]'"
    assert (done.returncode, done.stderr.strip().splitlines()) == (2, [line])


@pytest.mark.parametrize("case", MISSING)
def test_a_script_without_its_extra_says_which_to_install_in_one_line(case, tmp_path, script_in_process):
    """In this process, with the module's imports failing as a missing package's do and the application's modules
    imported afresh, so the script's own imports meet it as a user's would."""
    script, module, _ = MISSING[case]
    with package_not_installed(module):
        _check_names_the_extra(case, script_in_process(script, _argv(script, tmp_path)))


@pytest.mark.slow  # a fresh Python per case
@pytest.mark.parametrize("case", ["train-accelerate", "report-matplotlib"])
def test_a_script_without_its_extra_in_a_fresh_process_says_which_to_install(tmp_path, case):
    """Stands in for an install without the extra: a package of that name on PYTHONPATH whose import fails as a
    missing one does, so the script's own imports (and transformers' availability checks) meet it as a user would."""
    script, module, _ = MISSING[case]
    (tmp_path / module).mkdir()
    message = f"No module named {module!r}"
    (tmp_path / module / "__init__.py").write_text(f"raise ModuleNotFoundError({message!r}, name={module!r})")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(script_path(script)), *_argv(script, tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    _check_names_the_extra(case, done)


def test_only_modules_of_an_extra_count_as_a_missing_extra():
    assert commands.extra_for("matplotlib.pyplot") == "bench" and commands.extra_for("PIL.Image") == "train"
    assert commands.missing_extra_message(ModuleNotFoundError(name="structinit_hf.typo"), "x.py") is None
    assert commands.missing_extra_message(ModuleNotFoundError(name=None), "x.py") is None
    assert commands.missing_extra_message(ModuleNotFoundError(name="matplotlib"), "x.py") == (
        "x.py needs matplotlib (the 'bench' extra): pip install 'structinit-hf[bench]'"
    )
    # torchvision is installed, one of its modules is not: an old version, not a missing extra (keeps its traceback)
    assert commands.missing_extra_message(ModuleNotFoundError(name="torchvision.no_such_part"), "x.py") is None


def test_report_to_tensorboard_without_it_is_refused_not_dropped(monkeypatch, capsys):
    """accelerate drops a tracker whose package is missing with a debug log: the run would write no logs, silently."""
    from structinit_hf.train.cli.args import settings_from_args, training_parser
    from structinit_hf.train.cli.commands import run_script

    monkeypatch.setattr(checks, "find_spec", lambda name: None if name == "tensorboard" else object())
    monkeypatch.setattr(sys, "argv", ["scripts/train.py"])
    argv = ["--model", "vit_tiny_impulse3", "--dataset", "unused", "--report-to", "tensorboard"]
    with pytest.raises(SystemExit) as stop:
        run_script(training_parser(), lambda args: checks.check_run_args(settings_from_args(args), 1), argv)
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: scripts/train.py needs tensorboard (the 'tensorboard' extra): pip install 'structinit-hf[tensorboard]'"
    )
