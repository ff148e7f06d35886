"""Every command a typed call: ``compare``, ``evaluate`` and ``push_to_hub`` take settings and return a record, as
``train``'s :func:`structinit_hf.train.run` does; ``structinit_hf.train`` exports the user's API and nothing else."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
from tiny_runs import synthetic_args, synthetic_dataset

import structinit_hf.train
from structinit_hf.benchmark import CompareResult, CompareSettings, compare
from structinit_hf.benchmark.arms import arm_label
from structinit_hf.benchmark.compare_inits import compare_parser, render_table
from structinit_hf.train import EvaluationRecord, EvaluationSettings, PushSettings, evaluate, run
from structinit_hf.train.cli.args import evaluation_parser, settings_from_args, training_parser
from structinit_hf.train.publish.hub import push_parser

# what a notebook user imports from structinit_hf.train: the calls, their settings and records, the user error
USER_API = [
    "DataSettings",
    "EvaluationRecord",
    "EvaluationSettings",
    "ModelSettings",
    "PushResult",
    "PushSettings",
    "Recipe",
    "RunRecord",
    "RunSettings",
    "Speed",
    "TrainingSettings",
    "TrainingStopped",
    "UsageError",
    "evaluate",
    "push_to_hub",
    "run",
]


def test_the_training_package_exports_exactly_the_users_api():
    """Catches compare's needs (the run-folder lock, the dataset digest, the column finder, the stratified split)
    exported as the user's API again: they live in structinit_hf.train._internal, and every name there resolves."""
    from structinit_hf.train import _internal

    assert sorted(structinit_hf.train.__all__) == sorted(USER_API)
    assert all(getattr(structinit_hf.train, name) is not None for name in USER_API)
    for name in ("LOCK_FILE", "acquire_run_lock", "dataset_files_digest", "find_columns", "stratified_split"):
        assert not hasattr(structinit_hf.train, name), name
        assert name in _internal.__all__
    assert all(getattr(_internal, name) is not None for name in _internal.__all__)


@pytest.mark.parametrize(
    ("parser", "settings", "required"),
    [
        (compare_parser, CompareSettings, {}),
        (evaluation_parser, EvaluationSettings, {"model": "runs/x/final"}),
        (push_parser, PushSettings, {"run_dir": "runs/x", "repo_id": "me/x"}),
    ],
)
def test_each_flag_is_a_field_of_the_settings_with_the_same_default(parser, settings, required):
    """Catches a flag the call cannot take, a setting the command line cannot set, or a default the command line and
    the settings disagree on: the command line given only what it requires is the settings given only that."""
    dests = {action.dest for action in parser()._actions} - {"help"}
    assert dests == {item.name for item in fields(settings)} - {"endpoint"}  # the Hub URL: HF_ENDPOINT's, or a test's
    argv = [word for name, value in required.items() for word in ("--" + name.replace("_", "-"), value)]
    assert settings(**vars(parser().parse_args(argv))) == settings(**required)


# (settings class, the fields it needs, a wrong value, what its one error must say)
WRONG_TYPES = {
    "compare-bool-for-int": (CompareSettings, {}, dict(epochs=True), "epochs=True (--epochs): not allowed (a bool)"),
    "compare-str-seeds": (CompareSettings, {}, dict(seeds="0 1"), "seeds='0 1' (--seeds): not allowed (a str)"),
    "compare-float-seed": (CompareSettings, {}, dict(seeds=(0, 1.5)), "seeds=(0, 1.5) (--seeds): not allowed"),
    "compare-str-lr": (CompareSettings, {}, dict(lr="1e-3"), "lr='1e-3' (--lr): not allowed (a str); allowed: float"),
    "compare-list-kwargs": (
        CompareSettings,
        {},
        dict(model_kwargs=["depth=1"]),
        "model_kwargs=['depth=1'] (--model-kwargs): not allowed (a list); allowed: a dict with str keys",
    ),
    "compare-str-arms": (CompareSettings, {}, dict(arms="mimetic"), "arms='mimetic' (--arms): not allowed (a str)"),
    "evaluate-bool-batch": (
        EvaluationSettings,
        {"model": "runs/x/final"},
        dict(batch_size=True),
        "batch_size=True (--batch-size): not allowed (a bool); allowed: int",
    ),
    "evaluate-str-split": (
        EvaluationSettings,
        {"model": "runs/x/final"},
        dict(val_split="0.1"),
        "val_split='0.1' (--val-split): not allowed (a str); allowed: float or None",
    ),
    "evaluate-no-model-name": (EvaluationSettings, {"model": 3}, {}, "model=3 (--model): not allowed (an int)"),
    "push-str-private": (
        PushSettings,
        {"run_dir": "runs/x", "repo_id": "me/x"},
        dict(private="yes"),
        "private='yes' (--private): not allowed (a str); allowed: bool",
    ),
    "push-int-repo": (PushSettings, {"run_dir": "runs/x", "repo_id": 7}, {}, "repo_id=7 (--repo-id): not allowed"),
}


@pytest.mark.parametrize("case", list(WRONG_TYPES))
def test_a_setting_of_the_wrong_type_is_refused_in_one_error_naming_it(case):
    """Catches a wrong type that the call accepts, or that fails later, deep, with no word of the setting."""
    kind, needed, wrong, message = WRONG_TYPES[case]
    with pytest.raises(TypeError) as info:
        kind(**needed, **wrong)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value) and isinstance(info.value, ValueError)  # a user error: one line, status 2


def test_the_settings_are_frozen_and_read_as_the_command_line_reads_them():
    settings = CompareSettings(seeds=[0, 1], arms=["default", "mimetic"], output_dir="cmp", dataset="cifar10-sample")
    assert settings.seeds == (0, 1) and settings.arms == ("default", "mimetic") and settings.output_dir == Path("cmp")
    argv = ["--seeds", "0", "1", "--arms", "default", "mimetic", "--output-dir", "cmp"]
    assert settings == CompareSettings(**vars(compare_parser().parse_args(argv)))
    assert EvaluationSettings("m", output="e.json").output == Path("e.json")
    assert PushSettings("runs/x", "me/x").run_dir == Path("runs/x")


def test_compare_refuses_a_family_it_has_not_in_one_line():
    """Catches a notebook's family="vitt" (the command line's choices refuse it) reaching a KeyError."""
    with pytest.raises(ValueError, match=r"^--family vitt \(family='vitt'\): allowed: vit, swin, mixer$"):
        compare(CompareSettings(family="vitt"))


@pytest.mark.slow  # two tiny runs: about 20 s
def test_compare_returns_the_figures_its_table_shows(tmp_path, capsys):
    """Catches the call's record drifting from what the command prints and writes: the per-arm, per-seed top-1 are
    the runs' own, the table is compare.md, and each verdict is the table's."""
    out = tmp_path / "cmp"
    settings = CompareSettings(
        arms=("default", "impulse3"), epochs=1, max_train_samples=64, batch_size=32, model_kwargs={"depth": 1},
        output_dir=out,
    )  # fmt: skip
    result = compare(settings)
    printed = capsys.readouterr().out
    assert isinstance(result, CompareResult) and result.output_dir == out
    assert result.table == (out / "compare.md").read_text() and result.table in printed
    assert result.table == render_table(result.record)
    for arm in ("default", "impulse3"):
        run_record = json.loads((out / f"{arm}-seed0" / "results.json").read_text())
        assert result.top1[arm] == {0: run_record["top1"]}
        row = next(line for line in result.table.splitlines() if line.startswith(f"| {arm_label(arm)} |"))
        assert row.startswith(f"| {arm_label(arm)} | {run_record['top1']:.2f} | {run_record['top1']:.2f} |"), row
    written = json.loads((out / "results.json").read_text())
    assert json.loads(json.dumps(result.vs_default)) == written["vs_default"]  # the file's seeds are strings
    assert set(result.vs_default) == {"impulse3"} and result.vs_default["impulse3"]["per_seed"] == {
        0: pytest.approx(result.top1["impulse3"][0] - result.top1["default"][0], abs=1e-4)
    }
    assert result.verdicts == {"impulse3": "one seed: no verdict"}
    row = next(line for line in result.table.splitlines() if line.startswith("| impulse 3x3"))
    assert row.endswith(f"| {result.verdicts['impulse3']} |")


@pytest.mark.slow  # one tiny run, then its scoring: about 10 s
def test_evaluate_returns_the_scores_of_a_trained_run(tmp_path, capsys):
    """Catches the call's scores differing from the record it writes or from the run's own score of the same images
    (the run scored its test split at the end; evaluate scores the same split with the final weights)."""
    dataset = synthetic_dataset(tmp_path / "data")
    trained = run(settings_from_args(training_parser().parse_args(synthetic_args(dataset, tmp_path / "run"))))
    scores = evaluate(EvaluationSettings(model=str(tmp_path / "run" / "final"), dataset=str(dataset)))
    assert isinstance(scores, EvaluationRecord) and scores.output == tmp_path / "run" / "evaluation.json"
    assert scores.results == json.loads(scores.output.read_text())
    assert (scores.top1, scores.top5, scores.num_samples) == (trained.top1, trained.top5, 8)
    assert scores.results["untrained"] is False and scores.results["args"]["model"] == str(tmp_path / "run" / "final")
    assert f"top-1 {scores.top1:.2f}%" in capsys.readouterr().out
