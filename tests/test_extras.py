"""The plugin loads without the application: what `import structinit_hf` pulls in, and the missing-extra message."""

from __future__ import annotations

import subprocess
import sys

import pytest

from structinit_hf import extras


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


def test_a_missing_extra_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(extras.EXTRAS, "bench", ("matplotlib", "no_such_module_here"))
    with pytest.raises(extras.MissingExtraError) as error:
        extras.require("bench", "structinit_hf.plots")
    assert str(error.value) == (
        "structinit_hf.plots needs no_such_module_here (the 'bench' extra): pip install 'structinit-hf[bench]'"
    )
    extras.require("train", "structinit_hf.training")  # installed here: no error
