"""Settings in, a record out: ``structinit_hf.train.run`` as a notebook calls it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_runs import synthetic_dataset

from structinit_hf.train import RunRecord, TrainingSettings, run
from structinit_hf.train.args import settings_from_args, training_parser


def test_with_flags_changes_only_what_it_names_and_refuses_a_name_that_is_no_flag():
    settings = TrainingSettings().with_flags(epochs=1, scale=[0.5, 1.0], output_dir="runs/x", dataset="cifar10-sample")
    assert settings.recipe.epochs == 1 and settings.recipe.scale == (0.5, 1.0)  # lists become tuples: frozen
    assert settings.run.output_dir == Path("runs/x") and settings.data.dataset == TrainingSettings().data.dataset
    assert settings.recipe.lr == TrainingSettings().recipe.lr
    argv = ["--epochs", "1", "--scale", "0.5", "1", "--output-dir", "runs/x"]
    assert settings == settings_from_args(training_parser().parse_args(argv))  # the same run as the command line's
    with pytest.raises(TypeError, match="not training flags: epoch; allowed: model, "):
        TrainingSettings().with_flags(epoch=1)


def test_run_trains_from_settings_and_returns_its_record(tmp_path):
    """Catches the library call drifting from the command: the record is the run folder's own results.json."""
    settings = TrainingSettings().with_flags(
        model_kwargs={"depth": 1, "img_size": 16, "patch_size": 4, "embed_dim": 48},
        dataset=str(synthetic_dataset(tmp_path / "data")),
        output_dir=tmp_path / "run",
        val_split=0.0,
        batch_size=8,
        epochs=1,
        warmup_epochs=0.0,
    )
    record = run(settings)
    assert isinstance(record, RunRecord) and record.output_dir == tmp_path / "run"
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record.results == saved and record.top1 == saved["top1"] and record.top5 == saved["top5"]
    assert saved["args"]["epochs"] == 1 and saved["args"]["model_kwargs"]["depth"] == 1
