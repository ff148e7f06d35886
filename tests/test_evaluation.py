"""Evaluation: the checkpoint's own preprocessing, and user errors before any data is read."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from PIL import Image
from transformers import DeiTImageProcessor, ViTConfig, ViTForImageClassification

from structinit_hf.models.common import CIFAR10_MEAN, CIFAR10_STD
from structinit_hf.train.cli.args import evaluation_parser
from structinit_hf.train.cli.commands import run_script
from structinit_hf.train.models.evaluation import run_evaluation
from structinit_hf.train.models.loading import eval_transform, load_model, model_data_config

REPO = Path(__file__).resolve().parents[1]
MEAN, STD = 0.4, 0.2


def _images(count: int, side: int = 36) -> list[Image.Image]:
    """Random RGB images, so that a crop, a resize or another normalization all give different pixels."""
    generator = np.random.default_rng(0)
    return [Image.fromarray(generator.integers(0, 256, (side, side, 3), dtype=np.uint8)) for _ in range(count)]


def _centre_32(image: Image.Image, mean, std) -> torch.Tensor:
    """What resize-to-36 then centre-crop-to-32 gives a 36 x 36 image: its middle pixels, normalized."""
    pixels = torch.from_numpy(np.array(image)[2:34, 2:34]).permute(2, 0, 1).float() / 255
    return (pixels - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]


@pytest.fixture
def cropping_checkpoint(tmp_path: Path) -> Path:
    """A 32 px transformers ViT whose saved image processor resizes to 36 and centre-crops to 32."""
    config = ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        num_labels=3,
    )  # fmt: skip
    torch.manual_seed(0)
    ViTForImageClassification(config).save_pretrained(tmp_path / "vit")
    processor = DeiTImageProcessor(
        size={"height": 36, "width": 36}, crop_size={"height": 32, "width": 32}, image_mean=[MEAN] * 3,
        image_std=[STD] * 3,
    )  # fmt: skip
    processor.save_pretrained(tmp_path / "vit")
    return tmp_path / "vit"


def test_transformers_checkpoint_is_resized_cropped_and_normalized_by_its_processor(cropping_checkpoint, tmp_path):
    """Catches the processor turned into a timm config by hand: crop_size ignored (36 x 36 inputs reach a
    32 px model and fail), resize and crop swapped, or the processor's mean/std replaced by another's."""
    model, *_ = load_model(str(cropping_checkpoint))
    images = _images(6)
    transform = eval_transform(model)
    for image in images:
        torch.testing.assert_close(transform(image), _centre_32(image, [MEAN] * 3, [STD] * 3), atol=1e-5, rtol=0)

    with torch.no_grad():  # label every image with the class the correctly preprocessed pixels give
        pixels = torch.stack([_centre_32(image, [MEAN] * 3, [STD] * 3) for image in images])
        labels = model(pixels).argmax(dim=1).tolist()
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b", "c"])})
    datasets.Dataset.from_dict({"img": images, "label": labels}, features=features).save_to_disk(tmp_path / "data")
    argv = ["--model", str(cropping_checkpoint), "--dataset", str(tmp_path / "data"), "--split", "train"]
    record = run_evaluation(evaluation_parser().parse_args([*argv, "--output", str(tmp_path / "results.json")]))
    assert record["num_samples"] == 6 and record["top1"] == 100.0
    assert json.loads((tmp_path / "results.json").read_text())["top1"] == 100.0


def test_training_data_config_of_a_cropping_processor(cropping_checkpoint):
    """Catches the processor's crop_size ignored where training builds its transforms from a timm data config:
    the model input must be the 32 px crop of a 36 px resize, normalized with the processor's statistics."""
    model, *_ = load_model(str(cropping_checkpoint))
    config = model_data_config(model)
    assert config["input_size"] == (3, 32, 32) and config["crop_pct"] == pytest.approx(32 / 36)
    assert config["mean"] == (MEAN,) * 3 and config["std"] == (STD,) * 3 and config["interpolation"] == "bicubic"


def test_timm_model_uses_timm_data_config():
    """Catches a timm model preprocessed with another model's (or no) crop and normalization."""
    overlay = dict(crop_pct=32 / 36)  # timm: resize to 32 / crop_pct = 36, then centre-crop 32
    model, *_ = load_model(
        "vit_tiny_patch2_32", model_kwargs=dict(depth=1, embed_dim=32, num_heads=2, pretrained_cfg_overlay=overlay)
    )
    image = _images(1)[0]
    torch.testing.assert_close(
        eval_transform(model)(image), _centre_32(image, CIFAR10_MEAN, CIFAR10_STD), atol=1e-5, rtol=0
    )


def test_unknown_model_keyword_names_the_nearest_before_reading_data(tmp_path, capsys):
    """Catches timm's bare TypeError (no suggestion, a traceback), and the dataset being read before the model
    is checked: the dataset named here does not exist, so reading it first would report that instead."""
    argv = ["--model", "vit_tiny_impulse3", "--allow-untrained", "--model-kwargs", "kernal_size=5", "depth=1"]
    argv += ["--dataset", str(tmp_path / "missing"), "--output", str(tmp_path / "r.json")]
    assert run_script(evaluation_parser(), run_evaluation, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: unknown model keyword 'kernal_size' for vit_tiny_impulse3")
    assert "(did you mean 'kernel_size'?)" in err[-1] and "missing" not in err[-1]
    assert not (tmp_path / "r.json").exists()


def test_transformers_hub_id_offline_fails_at_once_naming_it():
    """Catches transformers' generic "couldn't connect" OSError (it names neither the model nor HF_HUB_OFFLINE),
    and minutes of retries before it."""
    start = time.perf_counter()
    with pytest.raises(
        FileNotFoundError,
        match=r"'google/vit-base-patch16-224' is not in the local Hub cache and HF_HUB_OFFLINE is set",
    ):
        load_model("google/vit-base-patch16-224", num_classes=10)
    assert time.perf_counter() - start < 15


def test_unknown_model_name_suggests_a_registered_one():
    """Catches a typo in --model answered without the name the user meant."""
    with pytest.raises(ValueError, match=r"unknown model 'vit_tiny_impuls3' \(did you mean 'vit_tiny_impulse3'\?\)"):
        load_model("vit_tiny_impuls3")


def test_script_user_error_is_one_line_exit_2_and_debug_shows_the_traceback(
    cropping_checkpoint, tmp_path, script_in_process
):
    """Catches scripts/evaluate.py not going through commands.run_script (a traceback and exit status 1)."""
    names = ["a", "b", "c", "d"]
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=names)})
    rows = {"img": _images(4), "label": [0, 1, 2, 3]}
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(tmp_path / "four")
    argv = ["--model", str(cropping_checkpoint), "--dataset", str(tmp_path / "four"), "--split", "train"]
    argv += ["--output", str(tmp_path / "r.json")]
    done = script_in_process("evaluate", argv)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: model {str(cropping_checkpoint)!r} predicts 3 classes but {str(tmp_path / 'four')!r} has 4; "
        "pick a checkpoint trained on this dataset"
    )
    assert "Traceback" not in done.stderr
    with pytest.raises(ValueError, match="predicts 3 classes"):  # what a shell shows as a traceback and status 1
        script_in_process("evaluate", [*argv, "--debug"])


@pytest.mark.parametrize("command", ["train", "evaluate"])
@pytest.mark.parametrize(
    ("model", "kind"), [("hf-hub:made-up-org/no-such-model", "timm"), ("made-up-org/no-such-model", "transformers")]
)
def test_a_hub_model_offline_is_one_line_naming_it_and_hf_hub_offline(command, model, kind, tmp_path, capsys):
    """Catches timm's "An error happened while trying to locate the file on the Hub" (it names neither the model nor
    HF_HUB_OFFLINE) reaching the user of train or evaluate, or the two commands wording the same case apart."""
    from structinit_hf.train.cli.args import training_parser
    from structinit_hf.train.training.loop import run_command

    parser, function = (training_parser(), run_command) if command == "train" else (evaluation_parser(), run_evaluation)
    out = ["--output-dir", str(tmp_path / "run")] if command == "train" else ["--output", str(tmp_path / "r.json")]
    assert run_script(parser, function, ["--model", model, "--dataset", "cifar10-sample", *out]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {kind} model {model!r} is not in the local Hub cache and HF_HUB_OFFLINE is set; pass a local "
        "checkpoint folder, or run once online to cache it"
    )


def test_every_record_says_what_changes_its_numbers(monkeypatch):
    """Catches a results.json that cannot tell two machines apart: the same versions and flags give other numbers
    under another torch thread count, another CPU instruction set or a variable that picks MKL's or oneDNN's kernels
    (measured: docs/benchmarks.md), and other decoding or cropping under other torchvision, numpy or pillow."""
    from structinit_hf.train.models.evaluation import library_versions, numerics

    monkeypatch.setenv("MKL_CBWR", "AVX2")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        recorded = numerics()
    finally:
        torch.set_num_threads(before)
    assert recorded["torch_threads"] == 1 and recorded["code_path_variables"] == {"MKL_CBWR": "AVX2"}
    assert recorded["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    if sys.platform == "linux":  # the generation and features MKL picks kernels by, which AVX512 alone does not say
        assert recorded["cpu"].startswith("family ") and " model " in recorded["cpu"]
    assert recorded["deterministic_algorithms"] is False
    assert {"torch", "timm", "torchvision", "numpy", "pillow"} <= set(library_versions())


def test_evaluate_needs_a_model_and_refuses_untrained_weights_before_reading_data(tmp_path, monkeypatch, capsys):
    """Catches evaluate scoring a fresh vit_tiny_impulse3 (the old default --model, or any timm name) and calling it
    a result: no --model is argparse's usage error; a timm name is one line naming it and --allow-untrained, before
    the data (which does not exist here) is read; nothing is written, in the cwd or elsewhere."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        evaluation_parser().parse_args(["--dataset", "cifar10-sample"])
    assert stop.value.code == 2 and "the following arguments are required: --model" in capsys.readouterr().err
    argv = ["--model", "vit_tiny_impulse3", "--dataset", str(tmp_path / "missing")]
    assert run_script(evaluation_parser(), run_evaluation, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --model vit_tiny_impulse3: a timm name builds fresh, untrained weights; pass the trained model (a "
        "run's final/ folder, hf-hub:<repo> or a transformers Hub id), or --allow-untrained to score the untrained "
        "network as a baseline"
    ]
    assert list(tmp_path.iterdir()) == []


def test_an_untrained_score_says_so_and_needs_a_place_for_its_record(tmp_path, monkeypatch, capsys):
    """Catches --allow-untrained scoring silently (the line and the record must say untrained), and a model with no
    folder writing its record into whatever folder the user stands in."""
    from tiny_runs import synthetic_dataset

    monkeypatch.chdir(tmp_path)
    dataset = synthetic_dataset(tmp_path / "data")
    tiny = ["--model-kwargs", "depth=1", "embed_dim=32", "num_heads=2"]
    argv = ["--model", "vit_tiny_patch16_224", *tiny, "--allow-untrained", "--dataset", str(dataset)]
    capsys.readouterr()
    assert run_script(evaluation_parser(), run_evaluation, argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --model vit_tiny_patch16_224: not a local folder, so the record has no folder to go beside; pass "
        "--output FILE"
    ]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data"]
    assert run_script(evaluation_parser(), run_evaluation, [*argv, "--output", str(tmp_path / "e.json")]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed.startswith("vit_tiny_patch16_224 (untrained: fresh weights) on "), printed
    assert json.loads((tmp_path / "e.json").read_text())["untrained"] is True


def test_the_record_goes_beside_the_model_folder_not_into_the_cwd(cropping_checkpoint, tmp_path, monkeypatch):
    """Catches evaluation.json written into whatever folder the user stands in (the old default --output)."""
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b", "c"])})
    rows = {"img": _images(3), "label": [0, 1, 2]}
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(tmp_path / "data")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    record = run_evaluation(
        evaluation_parser().parse_args(
            ["--model", str(cropping_checkpoint), "--dataset", str(tmp_path / "data"), "--split", "train"]
        )
    )
    assert list(elsewhere.iterdir()) == [] and not (cropping_checkpoint / "evaluation.json").exists()
    saved = json.loads((cropping_checkpoint.parent / "evaluation.json").read_text())
    assert (
        saved == record
        and saved["untrained"] is False
        and saved["args"]["output"] == str(cropping_checkpoint.parent / "evaluation.json")
    )


def test_evaluate_scores_a_run_at_its_precision_through_the_attention_path_it_trained_with(tmp_path, monkeypatch):
    """Catches ``evaluate --mixed-precision bf16`` on a CPU scoring through torch's fused attention where training
    (and ``compare``'s table) scored through timm's unfused path: in bf16 the two round differently, so a run's
    ``final/`` re-scored printed another top-1 than its run (9.40 against 9.60). fp32 keeps the fused kernel."""
    from tiny_runs import TINY_MODEL, run, synthetic_dataset

    from structinit_hf.train import EvaluationSettings, evaluate
    from structinit_hf.train.models import evaluation

    dataset, out = synthetic_dataset(tmp_path / "data"), tmp_path / "run"
    trained = run([*TINY_MODEL, "--dataset", str(dataset), "--output-dir", str(out), "--epochs", "1",
                   "--batch-size", "8", "--mixed-precision", "bf16"])  # fmt: skip
    paths, real_score = [], evaluation.score

    def score(model, loader, accelerator):
        paths.append({module.fused_attn for module in model.modules() if hasattr(module, "fused_attn")})
        return real_score(model, loader, accelerator)

    monkeypatch.setattr(evaluation, "score", score)
    for precision in ("bf16", "no"):
        scores = evaluate(
            EvaluationSettings(str(out / "final"), dataset=str(dataset), mixed_precision=precision,
                               output=tmp_path / f"{precision}.json")
        )  # fmt: skip
        if precision == "bf16":
            assert (scores.top1, scores.top5) == (trained["top1"], trained["top5"])
    assert paths == [{False}, {True}]
