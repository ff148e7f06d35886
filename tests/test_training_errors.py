"""Training that says when it goes wrong, and the command line's one-line answers: a diverging loss, a resume with
nothing to resume, a mistyped flag, an output folder that cannot be made, hints that name the way to what was meant."""

from __future__ import annotations

import pytest
from tiny_runs import TINY_MODEL, synthetic_args, synthetic_dataset

from structinit_hf.__main__ import main


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return synthetic_dataset(tmp_path_factory.mktemp("data") / "synthetic")


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "nothing on stderr"
    return err[-1]


def test_a_diverging_loss_stops_the_run_naming_the_step_the_loss_and_the_lr(dataset, tmp_path, capsys):
    """Catches ``train --lr 10`` going 1.39 -> 1166 -> 4221 to the end with exit status 0 (only NaN was caught)."""
    argv = synthetic_args(dataset, tmp_path / "run", "--lr", "10", "--warmup-epochs", "0", "--aa", "none")
    assert main(["train", *argv]) == 2
    line = _error_line(capsys)
    assert line.startswith("error: the training loss grew to ") and " at lr " in line and "it diverged" in line, line
    assert "after optimizer step " in line and "lower --lr" in line
    assert not (tmp_path / "run" / "results.json").exists()


def test_resume_latest_without_a_checkpoint_is_refused_and_auto_starts_fresh(dataset, tmp_path, capsys):
    """Catches ``train --output-dir runs/typo --resume latest`` silently starting the whole recipe, as transformers'
    ``Trainer(resume_from_checkpoint=True)`` refuses; ``--resume auto`` is the start-or-continue command."""
    typo = tmp_path / "typo"
    assert main(["train", "--output-dir", str(typo), "--resume", "latest"]) == 2
    line = _error_line(capsys)
    assert line == (
        f"error: --resume latest: {typo} holds no checkpoint to resume from; check --output-dir, or pass --resume auto "
        "to start a fresh run where there is none"
    )
    assert not typo.exists()
    out = tmp_path / "run"
    assert main(["train", *synthetic_args(dataset, out, "--epochs", "1", "--resume", "auto")]) == 0
    assert (out / "results.json").is_file()


def test_a_mistyped_flag_is_one_did_you_mean_line(capsys):
    """Catches ``--epoch`` answered with 33 lines of usage and no suggestion."""
    assert main(["train", "--epoch", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: unrecognized argument --epoch (did you mean '--epochs'?); structinit-hf train --help lists them"
    ]


def test_an_output_dir_that_cannot_be_made_names_the_flag(capsys):
    assert main(["train", *TINY_MODEL, "--output-dir", "/proc/nope", "--epochs", "1"]) == 2
    line = _error_line(capsys)
    assert line.startswith("error: --output-dir /proc/nope: ") and "\n" not in line, line


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        (
            ["--model", "vit_tiny_impulse3", "--model-kwargs", "attention_init=mimetic"],
            "vit_tiny_impulse3 is registered with impulse init and its options, which mimetic init does not take; for "
            "mimetic init train vit_tiny_mimetic, or a stock timm name with attention_init=mimetic",
        ),
        (
            ["--model", "vit_tiny_patch16_224", "--model-kwargs", "kernel_size=5"],
            "kernel_size is an init option: add attention_init=impulse (or mimetic) to run that init on "
            "vit_tiny_patch16_224",
        ),
    ],
)
def test_a_model_keyword_hint_names_the_way_to_what_was_meant(kwargs, said, capsys):
    """Catches ``attention_init=mimetic`` on vit_tiny_impulse3 answered "takes only 'seed', got ['kernel_size']" (the
    user gave none), and ``kernel_size=5`` on a stock name answered "unknown model keyword" with no hint."""
    assert main(["train", *kwargs, "--epochs", "1"]) == 2
    line = _error_line(capsys)
    assert said in line, line


def test_train_help_names_attention_init_and_the_layer_scale_default(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "attention_init=impulse" in text and "attn_layer_scale" in text


def test_compare_says_why_its_lr_range_is_narrower_than_trains(capsys):
    assert main(["compare", "--lr", "2"]) == 2
    line = _error_line(capsys)
    assert "allowed: a number between 0 and 1 (compare trains with AdamW" in line and "train takes any lr > 0" in line


def test_bf16_on_a_cpu_without_native_bf16_is_noted(dataset, tmp_path, capsys, monkeypatch):
    """Catches ``--mixed-precision bf16`` running 4-5 times slower than fp32 on such a CPU with no word."""
    from structinit_hf.train.training import prepare

    monkeypatch.setattr(prepare, "native_bf16", lambda device: False)
    argv = synthetic_args(dataset, tmp_path / "run", "--epochs", "1", "--mixed-precision", "bf16")
    assert main(["train", *argv]) == 0
    assert "note: bf16 on a CPU without native bf16 (AVX512-BF16 or AMX) is emulated" in capsys.readouterr().out


def test_a_one_step_run_leaks_no_timm_scheduler_warning(dataset, tmp_path, capsys, caplog):
    """Catches timm's "Cosine annealing scheduler will have no effect" at ``--epochs 1`` (one optimizer step)."""
    argv = synthetic_args(dataset, tmp_path / "run", "--epochs", "1", "--batch-size", "32")
    assert main(["train", *argv]) == 0
    printed = capsys.readouterr()
    assert "Cosine annealing" not in printed.out + printed.err + caplog.text


def test_a_resume_refusal_prints_flags_as_the_command_line_spells_them(dataset, tmp_path, capsys):
    """Catches ``(now {'depth': 2, ...})``: a Python dict in a refusal."""
    out = tmp_path / "run"
    assert main(["train", *synthetic_args(dataset, out, "--epochs", "2", "--checkpoint-every", "1")]) == 0
    capsys.readouterr()
    (out / "results.json").unlink()  # a run to resume: its checkpoints kept
    argv = ["--output-dir", str(out), "--resume", "latest", "--model-kwargs", "depth=2", "img_size=16", "patch_size=4"]
    assert main(["train", *argv]) == 2
    line = _error_line(capsys)
    assert "--model-kwargs depth=1 img_size=16 patch_size=4 embed_dim=48 (now depth=2 img_size=16 patch_size=4)" in line
    assert "{" not in line, line
