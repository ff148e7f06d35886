"""A user's own small image folder (3 classes x 40 images), end to end: train with the default batch, evaluate the
images the run held out, refuse other class names, fine-tune, and compare (resumable)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from tiny_runs import REPO, image_folder, run, script_env

from structinit_hf.__main__ import main
from structinit_hf.benchmark import compare_inits
from structinit_hf.benchmark.compare_inits import PROFILE
from structinit_hf.train.cli.args import settings_from_args, training_parser
from structinit_hf.train.cli.errors import UsageError
from structinit_hf.train.data.dataloaders import fit_batch

CLASSES = ["feathered", "roadcars", "sky_things"]
TINY = ["--model-kwargs", "depth=1", "img_size=16", "patch_size=4", "embed_dim=48"]


def _recipe(**flags):
    argv = [f"--{key.replace('_', '-')}={value}" for key, value in flags.items()]
    return settings_from_args(training_parser().parse_args(argv)).recipe


@pytest.mark.parametrize(
    ("flags", "rows", "processes", "expected"),
    [
        ({}, 108, 1, 108),  # a small folder: the whole training split is one batch
        ({}, 5000, 1, 512),  # enough rows: --batch-size as given
        ({"mixup": 0.8}, 107, 1, 106),  # mixup pairs images: an even batch
        ({}, 107, 2, 106),  # two processes: whole micro-batches on each
        ({"grad_accum": 4}, 30, 1, 28),  # accumulation: whole micro-batches per step
    ],
)
def test_the_batch_is_fitted_to_a_small_training_split(flags, rows, processes, expected):
    said = []
    recipe = fit_batch(_recipe(**flags), rows, processes, said.append)
    assert recipe.batch_size == expected
    assert len(said) == (expected != 512) and (not said or f"training with batch {expected}" in said[0])


def test_a_split_too_small_for_one_batch_names_the_smallest():
    with pytest.raises(UsageError, match="the smallest training split is 4 images"):
        fit_batch(_recipe(mixup=0.8), 3, 2, print)  # two processes, each an even micro-batch


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> SimpleNamespace:
    """A run trained with the default batch (512) on 3 classes x 40 images (108 train after the 10% hold-out)."""
    root = tmp_path_factory.mktemp("small_folder")
    images = image_folder(root / "my_images", CLASSES, per_class=40)
    results = run([*TINY, "--dataset", str(images), "--epochs", "2", "--output-dir", str(root / "run")])
    return SimpleNamespace(root=root, images=images, run=root / "run", results=results)


@pytest.mark.slow
def test_train_fits_the_default_batch_to_a_small_folder_and_records_it(trained):
    results = trained.results
    assert results["args"]["batch_size"] == 512 and results["train_images"] == 108
    assert results["global_batch"] == 108
    log = (trained.run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in log] == [1, 2]  # one step an epoch


def _evaluate(*argv: str, capsys) -> tuple[int, str, str]:
    status = main(["evaluate", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.slow
def test_evaluate_scores_the_images_the_run_held_out(trained, tmp_path, capsys):
    out = tmp_path / "evaluation.json"
    status, printed, _ = _evaluate(
        "--model", str(trained.run / "final"), "--dataset", str(trained.images), "--output", str(out), capsys=capsys
    )
    record = json.loads(out.read_text())
    assert status == 0 and record["split"] == "train[held-out 0.1]" and record["num_samples"] == 12
    assert "scoring the 12 images that the model's own run held out" in printed and "--seed 0" in printed
    assert "warning" not in printed
    assert record["top1"] == trained.results["top1"]  # the run's own final score: the same 12 images


@pytest.mark.slow
def test_evaluate_warns_when_the_images_trained_the_model(trained, tmp_path, capsys):
    out = tmp_path / "evaluation.json"
    argv = ["--model", str(trained.run / "final"), "--dataset", str(trained.images), "--output", str(out)]
    status, printed, _ = _evaluate(*argv, "--split", "train", capsys=capsys)
    assert status == 0 and json.loads(out.read_text())["num_samples"] == 120
    warnings = [line for line in printed.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "were seen in training" in warnings[0]
    status, printed, _ = _evaluate(*argv, "--val-split", "0.25", "--seed", "3", capsys=capsys)  # train's flags
    assert status == 0 and json.loads(out.read_text())["num_samples"] == 30 and "(--val-split 0.25" in printed


@pytest.mark.slow
def test_other_class_names_are_refused_unless_relabelling_is_asked_for(trained, tmp_path, capsys):
    renamed = image_folder(tmp_path / "renamed", ["apple", "mango", "zebra"], per_class=4)
    argv = ["--model", str(trained.run / "final"), "--dataset", str(renamed), "--val-split", "0.25"]
    argv += ["--output", str(tmp_path / "e.json")]
    status, _, errors = _evaluate(*argv, capsys=capsys)
    lines = [line for line in errors.splitlines() if line.strip() and "examples/s" not in line]  # not datasets' bars
    assert status == 2 and len(lines) == 1, lines
    assert (
        "['apple', 'mango', 'zebra']" in lines[0] and str(CLASSES) in lines[0] and "--allow-new-label-names" in lines[0]
    )
    status, _, _ = _evaluate(*argv, "--allow-new-label-names", capsys=capsys)
    assert status == 0 and json.loads((tmp_path / "e.json").read_text())["label_names"] == ["apple", "mango", "zebra"]


@pytest.mark.slow
def test_fine_tuning_with_the_same_count_checks_the_names(trained, tmp_path, capsys):
    renamed = image_folder(tmp_path / "renamed", ["apple", "mango", "zebra"], per_class=8)
    argv = ["train", "--model", str(trained.run / "final"), "--dataset", str(renamed), "--epochs", "1"]
    assert main([*argv, "--output-dir", str(tmp_path / "A")]) == 2
    assert "not the model's" in capsys.readouterr().err and not (tmp_path / "A" / "results.json").exists()
    assert main([*argv, "--output-dir", str(tmp_path / "B"), "--allow-new-label-names"]) == 0
    record = json.loads((tmp_path / "B" / "results.json").read_text())
    assert (
        record["fine_tuned_from"]["head"] == "kept" and record["global_batch"] == 21
    )  # 3 x 8 minus one held out per class


COMPARE = ["--arms", "default", "impulse3", "--epochs", "2", "--model-kwargs", "depth=1"]


@pytest.mark.slow
def test_compare_runs_on_a_small_folder_and_refuses_changed_settings(trained, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--dataset", str(trained.images), *COMPARE, "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "108 training images" in printed and "top-1 on the 12 images of train[held-out 0.1]" in printed
    finished = {path: path.read_bytes() for path in out.glob("*-seed0/results.json")}
    assert len(finished) == 2
    assert main(["compare", "--dataset", str(trained.images), *COMPARE, "--output-dir", str(out)]) == 0  # reused
    assert "2 of 2 runs already finished" in capsys.readouterr().err
    changed = [*COMPARE[:4], "3", *COMPARE[5:]]
    assert main(["compare", "--dataset", str(trained.images), *changed, "--output-dir", str(out)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--epochs 2 (now 3)" in errors[0], errors
    assert {path: path.read_bytes() for path in out.glob("*-seed0/results.json")} == finished


@pytest.mark.slow
def test_compare_stopped_by_a_user_error_accepts_the_corrected_command(trained, tmp_path, capsys):
    out = tmp_path / "cmp"
    bad = ["--arms", "default", "--epochs", "1", "--model-kwargs", "depth=1", "embed_dim=50"]
    assert main(["compare", "--dataset", str(trained.images), *bad, "--output-dir", str(out)]) != 0
    capsys.readouterr()
    good = ["--arms", "default", "--epochs", "1", "--model-kwargs", "depth=1"]
    assert main(["compare", "--dataset", str(trained.images), *good, "--output-dir", str(out)]) == 0
    assert (out / "default-seed0" / "results.json").is_file()


def test_a_folder_that_is_not_a_comparison_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("kept")
    assert main(["compare", "--output-dir", str(tmp_path)]) == 2
    assert "not a comparison's files" in capsys.readouterr().err and (tmp_path / "notes.txt").read_text() == "kept"


@pytest.mark.slow
def test_compare_killed_mid_run_resumes_and_keeps_the_finished_runs(trained, tmp_path):
    """kill -9 while the second run has a checkpoint: the rerun reuses the first run byte for byte, resumes the
    second from its checkpoint, and scores it as an uninterrupted comparison does."""
    argv = ["--dataset", str(trained.images), "--arms", "default", "mimetic", "--epochs", "3"]
    argv += ["--model-kwargs", "depth=1", "img_size=16", "patch_size=4"]
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    command = [sys.executable, "-m", "structinit_hf", "compare", *argv]
    env = script_env()
    process = subprocess.Popen([*command, "--output-dir", str(killed)], env=env, cwd=REPO, start_new_session=True)
    checkpoint = killed / "mimetic-seed0" / "checkpoints"
    deadline = time.monotonic() + 300
    while not (checkpoint.is_dir() and any(checkpoint.glob("epoch_*"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert (killed / "default-seed0" / "results.json").is_file()
    assert not (killed / "mimetic-seed0" / "results.json").is_file()
    first = (killed / "default-seed0" / "results.json").read_bytes()
    done = subprocess.run([*command, "--output-dir", str(killed)], env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 of 2 runs already finished" in done.stderr
    assert (killed / "default-seed0" / "results.json").read_bytes() == first
    assert "resumed from" in (killed / "mimetic-seed0" / "train.log").read_text()
    subprocess.run([*command, "--output-dir", str(clean)], env=env, cwd=REPO, check=True, capture_output=True)
    for name in ("default-seed0", "mimetic-seed0"):
        resumed, uninterrupted = (json.loads((root / name / "results.json").read_text()) for root in (killed, clean))
        assert resumed["top1"] == uninterrupted["top1"]
    assert (killed / "compare.md").read_text() == (clean / "compare.md").read_text().replace(str(clean), str(killed))


def test_compare_refuses_to_reuse_runs_trained_on_other_files_of_the_folder(tmp_path, capsys):
    """Catches a rerun of the same compare reusing its finished runs after images were added to the folder: the
    table would score the old images while the user reads it as the new ones'."""
    from PIL import Image

    images = image_folder(tmp_path / "photos", CLASSES, per_class=6)
    argv = ["compare", "--dataset", str(images), "--arms", "default", "--epochs", "1"]
    argv += [*TINY, "--output-dir", str(tmp_path / "cmp")]
    assert main(argv) == 0
    capsys.readouterr()
    added = images / CLASSES[0] / "new.png"
    Image.new("RGB", (16, 16), (200, 10, 10)).save(added)
    assert main(argv) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "default-seed0 was trained on other files of --dataset" in errors[0], errors
    added.unlink()  # the folder as the runs saw it: they are reused
    assert main(argv) == 0 and "1 of 1 runs already finished" in capsys.readouterr().err


def test_fit_batch_keeps_the_recipe_when_the_data_fills_it():
    recipe = _recipe()
    assert fit_batch(recipe, 512, 1, print) is recipe
    assert fit_batch(recipe, 511, 1, print) == replace(recipe, batch_size=511)


def _readme_own_data_commands() -> list[list[str]]:
    """The README's command lines that run on ``my_images/`` (continuations joined, comments dropped), except the
    Hub push, which needs the Hub."""
    lines, joined = (REPO / "README.md").read_text().splitlines(), []
    for line in lines:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line.strip()
        else:
            joined.append(line.strip())
    commands = [shlex.split(line, comments=True) for line in joined if line.startswith("structinit-hf ")]
    return [words[1:] for words in commands if "my_images/" in words and words[1] != "push-to-hub"]


@pytest.mark.slow
def test_the_readme_commands_for_your_own_data_run_as_written(tmp_path, monkeypatch):
    """On 3 classes x 40 images, with a tiny 10-class run standing in for the README's runs/c10 (trained on the
    embedded sample): compare, fine-tune and evaluate exit 0 exactly as the README writes them. compare's defaults
    (the proxy profile its flags leave alone) are cut to depth 1 and 2 epochs: the README's 12 runs are still
    trained, each a tiny one."""
    tiny = dict(architecture={**PROFILE.architecture, "depth": 1}, recipe={**PROFILE.recipe, "epochs": 2})
    monkeypatch.setattr(compare_inits, "PROFILE", replace(PROFILE, **tiny, table_epochs=(1,)))
    monkeypatch.chdir(tmp_path)
    image_folder(tmp_path / "my_images", CLASSES, per_class=40)
    run([*TINY, "--max-train-samples", "64", "--epochs", "1", "--output-dir", "runs/c10"])
    commands = _readme_own_data_commands()
    assert [words[0] for words in commands] == ["compare", "train", "evaluate"], commands
    for words in commands:
        assert main(words) == 0, words
    assert json.loads(Path("runs/my-images/results.json").read_text())["label_names"] == CLASSES


def test_a_folder_too_small_to_hold_out_an_image_names_the_smallest(tmp_path, capsys):
    images = image_folder(tmp_path / "one_each", CLASSES, per_class=1)
    assert main(["train", *TINY, "--dataset", str(images), "--output-dir", str(tmp_path / "run")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "holds out no image of the 3" in errors[0] and "2 images" in errors[0], errors
    assert not (tmp_path / "run" / "results.json").exists()
