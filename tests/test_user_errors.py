"""Every user error of every script, run as a user runs it: one line on stderr naming the flag, exit status 2.

Each case runs its script in this process (``script_in_process``); one case per script runs it again in a fresh
Python, as a shell starts it (marked slow)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from huggingface_hub import constants as hf_constants
from tiny_runs import REPO, TINY_MODEL, image_folder, run, script_env, synthetic_args, synthetic_dataset


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> SimpleNamespace:
    """A dataset, a finished two-epoch run (both checkpoints kept) and a model folder without weights."""
    root = tmp_path_factory.mktemp("user_errors")
    dataset = synthetic_dataset(root / "data")
    finished = root / "finished"
    run(synthetic_args(dataset, finished, "--epochs", "2", "--keep-checkpoints", "2"))
    weightless = root / "weightless"
    weightless.mkdir()
    shutil.copy(finished / "final" / "config.json", weightless / "config.json")
    truncated = shutil.copytree(finished / "final", root / "truncated")
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return SimpleNamespace(
        root=root, dataset=dataset, finished=finished, weightless=weightless, truncated=truncated,
        images=image_folder(root / "images", ["cat", "dog", "fox"]), one_class=image_folder(root / "one", ["cat"]),
    )  # fmt: skip


def _fine_tune(model: str, *extra: str):
    """Fine-tune ``model`` (a path under the fixture's root, or a run's final/) on the 3-class image folder."""
    return lambda paths, out: [
        "--model", str(paths.root / model), "--dataset", str(paths.images), "--val-split", "0.25",
        "--output-dir", str(out), *extra,
    ]  # fmt: skip


def _damaged(paths: SimpleNamespace, out: Path, name: str) -> list[str]:
    """A copy of the finished run whose newest checkpoint has ``name`` cut in half (or, for JSON, garbled)."""
    shutil.copytree(paths.finished, out)
    damaged = out / "checkpoints" / "epoch_0002" / name
    if name.endswith(".json"):
        damaged.write_text('{"epoch": 2, "step":')
    else:
        damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    return synthetic_args(paths.dataset, out, "--epochs", "2", "--keep-checkpoints", "2", "--resume", "auto")


def _train(*extra: str):
    return lambda paths, out: synthetic_args(paths.dataset, out, *extra)


def _beside_a_folder(out: Path, name: str) -> str:
    """``name`` (``a/b``, relative to the test's folder, where it runs) with its folder ``a/`` made, ``b`` missing."""
    (out.parent / name).parent.mkdir(parents=True, exist_ok=True)
    return name


def _compare(model: str, *model_kwargs: str, out: Path) -> list[str]:
    return ["--model", model, "--model-kwargs", *model_kwargs, "--epochs", "1", "--output-dir", str(out)]


def _evaluate(*extra: str):
    return lambda paths, out: [
        *TINY_MODEL, "--allow-untrained", "--dataset", str(paths.dataset), "--output", str(out / "r.json"), *extra
    ]  # fmt: skip


UNREACHABLE_HUB = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": "hf_not_a_real_token", "HF_HUB_OFFLINE": None}


def _unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """:data:`UNREACHABLE_HUB` in this process: huggingface_hub read the endpoint and offline flag when imported."""
    monkeypatch.setattr(hf_constants, "ENDPOINT", UNREACHABLE_HUB["HF_ENDPOINT"])
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", UNREACHABLE_HUB["HF_TOKEN"])


# (script, argv from the fixture's paths and a fresh output folder, environment changes, what the line must say)
def _missing_run_folder(paths: SimpleNamespace, out: Path) -> list[str]:
    """``--model out/c11`` where ``out/`` holds only ``c10``: a mistyped run folder, which reads as a Hub id."""
    (out / "c10").mkdir(parents=True)
    return ["--model", "out/c11", "--dataset", str(paths.dataset)]


CASES = {
    "aa": ("train", _train("--aa", "bogus"), {}, "--aa 'bogus' (aa='bogus'): not a timm auto-augment policy"),
    "label-smoothing": (
        "train",
        _train("--label-smoothing", "1.5"),
        {},
        "--label-smoothing 1.5 (label_smoothing=1.5): out of range",
    ),
    "weight-decay": (
        "train",
        _train("--weight-decay", "-1"),
        {},
        "--weight-decay -1.0 (weight_decay=-1.0): out of range; allowed: >= 0",
    ),
    "warmup": ("train", _train("--warmup-epochs", "-2"), {}, "--warmup-epochs -2.0 (warmup_epochs=-2.0): out of range"),
    "clip": (
        "train",
        _train("--clip-grad", "-1"),
        {},
        "--clip-grad -1.0 (clip_grad=-1.0): out of range; allowed: >= 0",
    ),
    "hflip": ("train", _train("--hflip", "2"), {}, "--hflip 2.0 (hflip=2.0): out of range; allowed: a probability"),
    "scale": (
        "train",
        _train("--scale", "1.0", "0.08"),
        {},
        "--scale 1 0.08 (scale=(1.0, 0.08)): out of range; allowed: MIN MAX",
    ),
    "ratio": ("train", _train("--ratio", "2", "1"), {}, "--ratio 2 1 (ratio=(2.0, 1.0)): out of range"),
    "lr": ("train", _train("--lr", "0"), {}, "--lr 0.0 (lr=0.0): out of range; allowed: > 0"),
    "reprob": ("train", _train("--reprob", "1.5"), {}, "--reprob 1.5 (reprob=1.5): out of range"),
    "ema-decay": (
        "train",
        _train("--model-ema-decay", "1"),
        {},
        "--model-ema-decay 1.0 (model_ema_decay=1.0): out of range",
    ),
    "batch-size": (
        "train",
        _train("--batch-size", "0"),
        {},
        "--batch-size 0 (batch_size=0): out of range; allowed: an integer >= 1",
    ),
    "opt": (
        "train",
        _train("--opt", "adamww"),
        {},
        "--opt 'adamww' (opt='adamww'): not a timm optimizer (did you mean",
    ),
    "fp16-on-cpu": ("train", _train("--mixed-precision", "fp16"), {}, "--mixed-precision fp16: not on a CPU"),
    "image-column": ("train", _train("--image-column", "label"), {}, "--image-column 'label': that column holds"),
    "label-column": ("train", _train("--label-column", "img"), {}, "--label-column 'img': that column holds Image"),
    "model-kwargs-seed": ("train", _train("--model-kwargs", "seed=abc"), {}, "--model-kwargs seed='abc': seed takes"),
    "model-kwargs-depth": (
        "train",
        _train("--model-kwargs", "depth=abc"),
        {},
        "--model-kwargs depth='abc': depth takes int",
    ),
    "model-kwargs-pool": (
        "train",
        _train("--model-kwargs", "global_pool=mean"),
        {},
        "--model-kwargs global_pool='mean': global_pool takes one of '', 'avg',",
    ),
    "model-kwargs-none": (
        "train",
        _train("--model-kwargs", "init_values=None"),
        {},
        "--model-kwargs init_values=None: timm.create_model drops a keyword whose value is None, so vit_tiny_impulse3",
    ),
    "model-kwargs-fixed-by-variant": (
        "train",
        lambda paths, out: [
            "--model",
            "mixer_s16_224",
            "--model-kwargs",
            "img_size=64",
            "num_blocks=2",
            "--dataset",
            str(paths.dataset),
            "--output-dir",
            str(out),
        ],
        {},
        "--model-kwargs num_blocks=2: mixer_s16_224 sets num_blocks itself",
    ),
    "compare-model-kwargs-type": (
        "compare",
        lambda paths, out: _compare("deit_tiny_patch16_224", "img_size=32", "depth=abc", out=out),
        {},
        "--model-kwargs depth='abc': depth takes int",
    ),
    "compare-model-kwargs-value": (
        "compare",
        lambda paths, out: _compare("deit_tiny_patch16_224", "img_size=32", "num_heads=5", out=out),
        {},
        "deit_tiny_patch16_224 cannot be built with img_size=32 num_heads=5: AssertionError: dim should be divisible",
    ),
    "compare-model-kwargs-fixed-by-variant": (
        "compare",
        lambda paths, out: _compare("mixer_s16_224", "img_size=64", "num_blocks=2", out=out),
        {},
        "--model-kwargs num_blocks=2: mixer_s16_224 sets num_blocks itself",
    ),
    "compare-model-kwargs-none": (
        "compare",
        lambda paths, out: _compare("vit_relpos_small_patch16_224", "img_size=32", "init_values=None", out=out),
        {},
        "--model-kwargs init_values=None: timm.create_model drops",
    ),
    "missing-dataset-folder": (
        "train",
        lambda paths, out: [*TINY_MODEL, "--dataset", _beside_a_folder(out, "data/mine"), "--output-dir", str(out)],
        UNREACHABLE_HUB,
        "dataset folder 'data/mine' does not exist (data/ holds no folders); pass a folder that datasets can load",
    ),
    "compare-missing-dataset-folder": (
        "compare",
        lambda paths, out: ["--dataset", _beside_a_folder(out, "data/mine"), "--output-dir", str(out)],
        UNREACHABLE_HUB,
        "dataset folder 'data/mine' does not exist (data/ holds no folders)",
    ),
    "weightless-model": (
        "train",
        lambda paths, out: [*synthetic_args(paths.dataset, out)[len(TINY_MODEL) :], "--model", str(paths.weightless)],
        {},
        "the folder has a config.json but no weights",
    ),
    "truncated-weights": (
        "train",
        lambda paths, out: _damaged(paths, out, "model.safetensors"),
        {},
        "epoch_0002/model.safetensors is damaged",
    ),
    "truncated-optimizer": (
        "train",
        lambda paths, out: _damaged(paths, out, "optimizer.bin"),
        {},
        "epoch_0002/optimizer.bin is damaged",
    ),
    "corrupt-trainer-state": (
        "train",
        lambda paths, out: _damaged(paths, out, "trainer_state.json"),
        {},
        "epoch_0002/trainer_state.json is unreadable",
    ),
    "evaluate-batch-size": ("evaluate", _evaluate("--batch-size", "0"), {}, "--batch-size 0: out of range"),
    "evaluate-fp16-on-cpu": ("evaluate", _evaluate("--mixed-precision", "fp16"), {}, "--mixed-precision fp16: not on"),
    "evaluate-image-column": ("evaluate", _evaluate("--image-column", "label"), {}, "--image-column 'label': that"),
    "evaluate-missing-run-folder": (
        "evaluate",
        lambda paths, out: _missing_run_folder(paths, out),
        {},
        "model folder 'out/c11' does not exist (out/ holds c10 (did you mean 'c10'?)); pass a checkpoint folder",
    ),
    "evaluate-weightless-model": (
        "evaluate",
        lambda paths, out: ["--model", str(paths.weightless), "--dataset", str(paths.dataset)],
        {},
        "the folder has a config.json but no weights",
    ),
    "push-unreachable-hub": (
        "push_to_hub",
        lambda paths, out: ["--run-dir", str(paths.finished), "--repo-id", "someone/tiny", "--dataset-id", "a/b"],
        UNREACHABLE_HUB,
        "cannot reach http://127.0.0.1:9 to upload",
    ),
    "push-repo-id": (
        "push_to_hub",
        lambda paths, out: ["--run-dir", str(paths.finished), "--repo-id", "tiny", "--dry-run"],
        {},
        "repo_id must be 'namespace/name', got 'tiny'",
    ),
    "seed": (
        "train",
        _train("--seed", "-1"),
        {},
        "--seed -1 (seed=-1): out of range; allowed: an integer in [0, 4294967295]",
    ),
    "absurd-batch": (
        "train",
        _train("--batch-size", "1000000000000"),
        {},
        "--batch-size 1000000000000 (batch_size=1000000000000): out of range",
    ),
    "single-class-folder": (
        "train",
        lambda paths, out: [*TINY_MODEL, "--dataset", str(paths.one_class), "--output-dir", str(out)],
        {},
        "one class folder (cat); an image folder needs one sub-folder per class, at least 2",
    ),
    "fine-tune-depth": (
        "train",
        _fine_tune("finished/final", "--model-kwargs", "depth=2"),
        {},
        "--model-kwargs depth=2 (saved: 1): the weights of",
    ),
    "fine-tune-negative-depth": ("train", _fine_tune("finished/final", "--model-kwargs", "depth=-1"), {}, "depth=-1"),
    "fine-tune-init-option": (
        "train",
        _fine_tune("finished/final", "--model-kwargs", "kernel_size=5"),
        {},
        "--model-kwargs kernel_size: init options do not apply to",
    ),
    "fine-tune-truncated": ("train", _fine_tune("truncated"), {}, "its weights could not be read"),
    "fine-tune-weights-file": (
        "train",
        _fine_tune("finished/final/model.safetensors"),
        {},
        "model.safetensors is a file; pass the checkpoint folder that holds it",
    ),
    "evaluate-truncated": (
        "evaluate",
        lambda paths, out: ["--model", str(paths.truncated), "--dataset", str(paths.dataset)],
        {},
        "its weights could not be read",
    ),
    "evaluate-over-run-record": (
        "evaluate",
        lambda paths, out: [
            "--model",
            str(paths.finished / "final"),
            "--dataset",
            str(paths.dataset),
            "--output",
            str(paths.finished / "results.json"),
        ],  # fmt: skip
        {},
        "that is the training run's own record",
    ),
    "plot-num-images": ("plot_attention", lambda paths, out: ["--num-images", "0"], {}, "--num-images 0: out of range"),
}


def _check_one_line(case: str, done: subprocess.CompletedProcess, out: Path) -> None:
    """Catches a traceback (AssertionError, KeyError, RuntimeError, a 75-line ConnectError), a value accepted
    without a check, and a message that does not name the flag and value or the damaged file and a way on."""
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1 and done.stderr.rstrip().endswith(errors[0]), done.stderr[-3000:]
    assert CASES[case][3] in errors[0], errors[0]
    if case.startswith(("truncated", "corrupt")):
        assert f"resume from the previous checkpoint with --resume {out / 'checkpoints' / 'epoch_0001'}," in errors[0]
    assert not (out / "run.lock").exists()  # a refused run leaves no lock behind


@pytest.mark.parametrize("case", list(CASES))
def test_a_user_error_is_one_line_and_exit_status_2(case, paths, tmp_path, monkeypatch, script_in_process) -> None:
    script, argv, env_changes, _ = CASES[case]
    if env_changes == UNREACHABLE_HUB:
        _unreachable_hub(monkeypatch)
    monkeypatch.chdir(tmp_path)
    _check_one_line(case, script_in_process(script, argv(paths, tmp_path / "out")), tmp_path / "out")


@pytest.mark.slow  # a fresh Python per case
@pytest.mark.parametrize("case", ["aa", "evaluate-missing-run-folder", "push-unreachable-hub", "plot-num-images"])
def test_a_user_error_from_a_fresh_process_is_one_line_and_exit_status_2(case, paths, tmp_path) -> None:
    """One case per script, started as a shell starts it: nothing this process imported or set up helps."""
    script, argv, env_changes, _ = CASES[case]
    env = script_env(**{key: value for key, value in env_changes.items() if value is not None})
    for key in (key for key, value in env_changes.items() if value is None):
        env.pop(key, None)
    command = [sys.executable, str(REPO / "scripts" / f"{script}.py"), *argv(paths, tmp_path / "out")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    _check_one_line(case, done, tmp_path / "out")


def test_compare_refuses_a_recipe_value_before_printing_anything(script_in_process, tmp_path) -> None:
    """Catches a value each run refuses only once the comparison has printed its dataset line and the command that
    resumes it (a hint to rerun what can never run)."""
    done = script_in_process("compare", ["--epochs", "-1", "--output-dir", str(tmp_path / "c")])
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.strip() == "error: --epochs -1 (epochs=-1): out of range; allowed: an integer >= 1"
    assert not (tmp_path / "c").exists()


def test_evaluate_refuses_an_output_it_cannot_write_before_scoring(script_in_process, paths, tmp_path) -> None:
    """Catches an output location that is refused only after every image was scored, in an error naming the
    temporary file the record was being written to."""
    (tmp_path / "afile").write_text("")
    output = tmp_path / "afile" / "r.json"
    argv = [*TINY_MODEL, "--allow-untrained", "--dataset", str(paths.dataset), "--output", str(output)]
    done = script_in_process("evaluate", argv)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.strip() == (
        f"error: --output {output}: cannot write there ({tmp_path / 'afile'}: Not a directory); pass --output FILE in "
        "a writable folder"
    )
