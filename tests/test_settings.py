"""Settings in, a record out: ``structinit_hf.train.run`` as a notebook calls it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_runs import synthetic_dataset

from structinit_hf.train import Recipe, RunRecord, RunSettings, TrainingSettings, run
from structinit_hf.train.cli.args import settings_from_args, training_parser


def test_with_flags_changes_only_what_it_names_and_refuses_a_name_that_is_no_flag():
    settings = TrainingSettings().with_flags(epochs=1, scale=[0.5, 1.0], output_dir="runs/x", dataset="cifar10-sample")
    assert settings.recipe.epochs == 1 and settings.recipe.scale == (0.5, 1.0)  # lists become tuples: frozen
    assert settings.run.output_dir == Path("runs/x") and settings.data.dataset == TrainingSettings().data.dataset
    assert settings.recipe.lr == TrainingSettings().recipe.lr
    argv = ["--epochs", "1", "--scale", "0.5", "1", "--output-dir", "runs/x"]
    assert settings == settings_from_args(training_parser().parse_args(argv))  # the same run as the command line's
    with pytest.raises(TypeError, match="not training flags: epoch; allowed: model, "):
        TrainingSettings().with_flags(epoch=1)


# (flags, what the one error must say: the setting, its flag, the value and what is allowed)
WRONG_TYPES = {
    "bool-for-int": (dict(epochs=True), "epochs=True (--epochs): not allowed (a bool); allowed: int"),
    "str-for-int": (dict(epochs="two"), "epochs='two' (--epochs): not allowed (a str); allowed: int"),
    "float-for-int": (dict(epochs=1.5), "epochs=1.5 (--epochs): not allowed (a float); allowed: int"),
    "str-for-float": (dict(lr="1e-3"), "lr='1e-3' (--lr): not allowed (a str); allowed: float"),
    "bool-for-float": (dict(hflip=False), "hflip=False (--hflip): not allowed (a bool); allowed: float"),
    "bool-for-optional-int": (dict(grad_accum=True), "grad_accum=True (--grad-accum): not allowed (a bool); allowed: "),
    "list-for-dict": (
        dict(model_kwargs=["depth=1"]),
        "model_kwargs=['depth=1'] (--model-kwargs): not allowed (a list); allowed: a dict with str keys",
    ),
    "int-keys": (dict(model_kwargs={1: 2}), "model_kwargs={1: 2} (--model-kwargs): not allowed (a dict)"),
    "short-pair": (dict(scale=(0.5,)), "scale=(0.5,) (--scale): not allowed (a tuple); allowed: (float, float)"),
    "str-in-pair": (dict(ratio=(1, "2")), "ratio=(1, '2') (--ratio): not allowed (a tuple)"),
    "int-for-bool": (dict(model_ema=1), "model_ema=1 (--model-ema): not allowed (an int); allowed: bool"),
    "int-for-optional-bool": (dict(compile=0), "compile=0 (--compile): not allowed (an int); allowed: bool or None"),
    "int-for-str": (dict(resume=1), "resume=1 (--resume): not allowed (an int); allowed: str or None"),
    "int-for-path": (dict(output_dir=3), "output_dir=3 (--output-dir): not allowed (an int); allowed: a path"),
    "float-for-seed": (dict(seed=0.0), "seed=0.0 (--seed): not allowed (a float); allowed: int"),
    "int-for-dataset": (dict(dataset=10), "dataset=10 (--dataset): not allowed (an int); allowed: str"),
}


@pytest.mark.parametrize("case", list(WRONG_TYPES))
def test_a_setting_of_the_wrong_type_is_one_error_naming_it(case):
    """Catches a wrong type accepted (epochs=True trains one epoch and records true) or failing later and deep
    (epochs="two" in a comparison, epochs=1.5 in the loop after the data is read, lr="1e-3" in the optimizer,
    model_kwargs as a list in .items()) with no word of the setting."""
    flags, message = WRONG_TYPES[case]
    with pytest.raises(TypeError) as info:
        TrainingSettings().with_flags(**flags)
    assert str(info.value).startswith(message), str(info.value)
    assert isinstance(info.value, ValueError)  # the commands report it as a user error: one line, exit status 2


def test_the_constructors_check_their_types_too_and_freeze_lists():
    """Catches the check living only in with_flags (a group made directly takes anything), and a list kept as a
    list (the settings would no longer be frozen, nor equal to the command line's)."""
    with pytest.raises(TypeError, match=r"^epochs=True \(--epochs\): not allowed"):
        Recipe(epochs=True)
    with pytest.raises(TypeError, match=r"^recipe=\{'epochs': 1\}: not allowed \(a dict\); allowed: Recipe$"):
        TrainingSettings(recipe={"epochs": 1})
    assert Recipe(scale=[0.5, 1], warmup_epochs=0).scale == (0.5, 1)  # an int is a float; a list a pair
    assert RunSettings(output_dir="runs/x").output_dir == Path("runs/x")


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


def test_a_refused_rerun_names_the_setting_a_notebook_passes(tmp_path):
    """Catches a message that tells a notebook user only the command line's way on ("pass --resume latest")."""
    (tmp_path / "checkpoints" / "epoch_0001").mkdir(parents=True)
    (tmp_path / "checkpoints" / "epoch_0001" / "trainer_state.json").write_text('{"epoch": 1}')
    with pytest.raises(ValueError, match=r'already holds checkpoints; pass --resume latest \(resume="latest"\)'):
        run(TrainingSettings().with_flags(output_dir=tmp_path, epochs=1, model_kwargs={"depth": 1}))
