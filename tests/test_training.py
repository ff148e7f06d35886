"""The Accelerate training loop and evaluation: outputs, two processes, NaN stop, model sources.

Kill-and-resume is tested in test_run_folder.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import datasets
import pytest
import timm
import torch
from PIL import Image
from tiny_runs import REPO, TINY_MODEL, run, weights

from structinit_hf.train.cli.args import evaluation_parser, training_parser
from structinit_hf.train.data.splits import load_image_classification
from structinit_hf.train.models.evaluation import run_evaluation
from structinit_hf.train.models.export import save_final_model
from structinit_hf.train.models.loading import load_model
from structinit_hf.train.training import prepare as run_setup
from structinit_hf.train.training.checkpoints import find_checkpoint

METRIC_KEYS = {
    "epoch",
    "step",
    "train_loss",
    "val_top1",
    "val_top5",
    "lr",
    "images_per_sec",
    "images_seen",
    "wall_time_s",
    "val_images_per_sec",
    "train_s",
    "data_wait_s",
    "val_s",
    "peak_gpu_memory_mb",
}
RESULT_KEYS = {
    "model", "model_kwargs", "init", "dataset", "dataset_config", "split", "num_classes", "label_names",
    "top1", "top5", "epochs", "images_seen", "wall_time_s", "args", "versions", "peak_gpu_memory_mb",
}  # fmt: skip


def tiny_args(dataset: Path, output_dir: Path, *extra: str) -> list[str]:
    """A run of a depth-1, 16 px ViT on 48 training images (3 steps of 16) scored on 37 test images."""
    return [
        *TINY_MODEL,
        "--dataset", str(dataset),
        "--output-dir", str(output_dir),
        "--max-train-samples", "48",
        "--max-eval-samples", "37",
        "--val-split", "0",
        "--batch-size", "16",
        "--warmup-epochs", "1",
        *extra,
    ]  # fmt: skip


@pytest.mark.slow
def test_one_epoch_writes_every_output_and_each_loads(cifar10_sample, tmp_path) -> None:
    out = tmp_path / "run"
    record = run(tiny_args(cifar10_sample, out, "--epochs", "1", "--report-to", "tensorboard"))

    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and set(lines[0]) == METRIC_KEYS
    assert lines[0]["epoch"] == 1 and lines[0]["step"] == 3 and lines[0]["images_seen"] == 48
    assert lines[0]["val_images_per_sec"] > 0 and lines[0]["peak_gpu_memory_mb"] is None  # no GPU on CPU
    assert 0 < lines[0]["data_wait_s"] < lines[0]["train_s"] and lines[0]["val_s"] > 0  # where the epoch went
    assert list(out.rglob("events.out.tfevents*")), "tensorboard logs missing"
    checkpoint = out / "checkpoints" / "epoch_0001"
    assert {"model.safetensors", "optimizer.bin", "trainer_state.json"} <= {p.name for p in checkpoint.iterdir()}
    assert find_checkpoint(out, "latest") == checkpoint

    saved = json.loads((out / "results.json").read_text())
    assert saved == json.loads((out / "final" / "results.json").read_text()) == json.loads(json.dumps(record))
    assert RESULT_KEYS <= set(saved) and saved["args"]["mixed_precision"] == saved["mixed_precision"] == "no"
    assert (saved["micro_batch"], saved["grad_accum"], saved["args"]["grad_accum"]) == (16, 1, 1)
    assert saved["split"] == "test" and saved["num_samples"] == 37 and saved["epochs"] == 1
    assert saved["images_seen"] == 48 and saved["num_classes"] == 10 and saved["label_names"][0] == "airplane"
    assert saved["init"]["attention_init"] == "impulse" and saved["init"]["kernel_size"] == 3
    assert saved["model_kwargs"] == {"depth": 1, "img_size": 16, "patch_size": 4, "embed_dim": 48}
    assert saved["args"]["epochs"] == 1 and set(saved["versions"]) >= {"torch", "timm", "transformers", "accelerate"}

    timm_model = timm.create_model(f"local-dir:{out / 'final'}", pretrained=True).eval()
    from transformers import AutoModelForImageClassification

    hf_model = AutoModelForImageClassification.from_pretrained(out / "final").eval()
    pixels = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(hf_model(pixel_values=pixels).logits, timm_model(pixels))

    evaluation = evaluation_parser().parse_args(
        ["--model", str(out / "final"), "--dataset", str(cifar10_sample), "--max-eval-samples", "37",
         "--batch-size", "10", "--output", str(tmp_path / "eval.json")]
    )  # fmt: skip
    scored = run_evaluation(evaluation)
    assert (scored["top1"], scored["top5"], scored["num_samples"]) == (saved["top1"], saved["top5"], 37)
    assert scored["epochs"] == 1 and scored["init"] == saved["init"]
    assert RESULT_KEYS <= set(json.loads((tmp_path / "eval.json").read_text()))


@pytest.mark.slow
def test_two_processes_count_like_one(cifar10_sample, tmp_path) -> None:
    out = tmp_path / "ddp"
    # `accelerate launch --cpu --num_processes 2` starts ONE process unless mpirun is configured (accelerate
    # issue #2741); torchrun through --multi_gpu with ACCELERATE_USE_CPU=1 gives two gloo CPU processes.
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", str(REPO / "scripts" / "train.py"),
        *tiny_args(cifar10_sample, out, "--epochs", "1"),
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 process(es) x micro-batch 8" in done.stdout
    trained = json.loads((out / "results.json").read_text())
    assert trained["num_samples"] == 37 and trained["images_seen"] == 48

    single = run_evaluation(
        evaluation_parser().parse_args(
            [
                "--model",
                str(out / "final"),
                "--dataset",
                str(cifar10_sample),
                "--max-eval-samples",
                "37",
                "--batch-size",
                "8",
                "--output",
                str(tmp_path / "one.json"),
            ]
        )  # fmt: skip
    )
    assert single["num_samples"] == 37
    assert round(single["top1"] * 37 / 100) == round(trained["top1"] * 37 / 100)
    assert round(single["top5"] * 37 / 100) == round(trained["top5"] * 37 / 100)


@pytest.mark.slow
def test_gradient_accumulation_matches_one_big_batch(cifar10_sample, tmp_path) -> None:
    common = ("--epochs", "1", "--aa", "none", "--hflip", "0", "--scale", "1", "1", "--ratio", "1", "1")
    run(tiny_args(cifar10_sample, tmp_path / "whole", *common))
    run(tiny_args(cifar10_sample, tmp_path / "accumulated", *common, "--grad-accum", "2"))
    whole, accumulated = weights(tmp_path / "whole" / "final"), weights(tmp_path / "accumulated" / "final")
    for name in whole:
        torch.testing.assert_close(accumulated[name], whole[name], rtol=1e-4, atol=1e-5)
    small = dict(depth=1, img_size=16, patch_size=4, embed_dim=48)
    start = load_model("vit_tiny_impulse3", num_classes=10, model_kwargs=small)[0].state_dict()
    assert not torch.equal(start["head.weight"], whole["head.weight"]), "one epoch did not change the weights"


@pytest.mark.slow
def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(cifar10_sample, tmp_path, monkeypatch) -> None:
    real = run_setup.load_model

    def poisoned(*args, **kwargs):
        model, init, fine_tuned_from = real(*args, **kwargs)
        calls = []

        def after_three_steps(module, inputs, output):
            if module.training:
                calls.append(1)
                return output * float("nan") if len(calls) > 3 else output

        model.head.register_forward_hook(after_three_steps)
        return model, init, fine_tuned_from

    monkeypatch.setattr(run_setup, "load_model", poisoned)
    out = tmp_path / "nan"
    with pytest.raises(
        FloatingPointError, match=r"loss became nan at epoch 2.*last good checkpoint is .*epoch_0001"
    ) as info:
        run(tiny_args(cifar10_sample, out, "--epochs", "3"))
    advice = str(info.value).split("epoch_0001")[1]  # only what a resume accepts: a lower --lr is a new run
    assert "another --output-dir with a lower --lr" in advice and "--resume with the same flags" in advice
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch_0001"]
    assert not (out / "final").exists()
    assert all(torch.isfinite(t).all() for t in weights(out / "checkpoints" / "epoch_0001").values())


@pytest.mark.slow
def test_bad_runs_are_refused(cifar10_sample, tmp_path) -> None:
    """Catches an indivisible batch passing, --resume pointing at a non-checkpoint, and a rerun silently
    overwriting a folder that holds a complete checkpoint or a finished run."""
    with pytest.raises(
        ValueError,
        match=r"--batch-size 10 \(batch_size=10\) is not divisible by 1 processes x --grad-accum 4 \(grad_accum=4\)",
    ):
        run(tiny_args(cifar10_sample, tmp_path / "a", "--batch-size", "10", "--grad-accum", "4"))
    with pytest.raises(ValueError, match="is not a checkpoint folder"):
        run(tiny_args(cifar10_sample, tmp_path / "b", "--resume", str(tmp_path)))
    (tmp_path / "c" / "checkpoints" / "epoch_0001").mkdir(parents=True)
    (tmp_path / "c" / "checkpoints" / "epoch_0001" / "trainer_state.json").write_text('{"epoch": 1}')
    with pytest.raises(ValueError, match="already holds checkpoints; pass --resume latest"):
        run(tiny_args(cifar10_sample, tmp_path / "c"))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "results.json").write_text("{}")  # finished, checkpoints deleted: never retrained silently
    for resume in ([], ["--resume", "latest"]):
        with pytest.raises(ValueError, match="holds a finished run"):
            run(tiny_args(cifar10_sample, tmp_path / "d", *resume))


def test_model_sources_and_init_settings(tmp_path) -> None:
    args = training_parser().parse_args(["--model-kwargs", "depth=2", "patch_size=4", "kernel_size=5", "solver=svd"])
    assert args.model_kwargs == {"depth": 2, "patch_size": 4, "kernel_size": 5, "solver": "svd"}
    small = dict(depth=1, img_size=16, patch_size=4, embed_dim=48)
    model, init, _ = load_model("vit_tiny_impulse5", num_classes=7, model_kwargs=dict(small, patch_size=2))
    assert model.num_classes == 7 and init["attention_init"] == "impulse" and init["kernel_size"] == 5
    assert load_model("vit_tiny_mimetic", model_kwargs=dict(small, seed=4))[1] == {
        "attention_init": "mimetic",
        "seed": 4,
        "mlp_init": "default",
        "control": None,
    }
    assert load_model("vit_tiny_patch2_32", model_kwargs=small)[1] == {"attention_init": "default"}
    assert load_model("resnet18", num_classes=3)[1] == {}
    with pytest.raises(ValueError, match="unknown model 'no_such_net'"):
        load_model("no_such_net")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="neither timm's 'architecture' nor transformers' 'model_type'"):
        load_model(str(tmp_path))
    start = time.perf_counter()
    with pytest.raises(OSError, match="'google/vit-base-patch16-224' is not in the local Hub cache"):
        load_model("google/vit-base-patch16-224", num_classes=10)  # offline: fails at once, naming the model
    assert time.perf_counter() - start < 15


@pytest.mark.slow
def test_evaluate_a_transformers_checkpoint(cifar10_sample, tmp_path) -> None:
    """Catches evaluation of a transformers checkpoint that preprocesses differently from its own image processor
    (the scores would differ from transformers' on the same images) and a head/dataset class-count mismatch."""
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    config = ViTConfig(
        image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        num_labels=10,
    )  # fmt: skip
    ViTForImageClassification(config).save_pretrained(tmp_path / "vit")
    processor = ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.4] * 3, image_std=[0.2] * 3)
    processor.save_pretrained(tmp_path / "vit")
    model, init, _ = load_model(str(tmp_path / "vit"))
    assert init == {} and model.data_config["input_size"] == (3, 16, 16) and model.data_config["mean"] == (0.4,) * 3

    argv = ["--model", str(tmp_path / "vit"), "--dataset", str(cifar10_sample), "--max-eval-samples", "20"]
    record = run_evaluation(evaluation_parser().parse_args([*argv, "--output", str(tmp_path / "r.json")]))
    assert record["num_samples"] == 20 and record["split"] == "test" and record["epochs"] is None
    rows = load_image_classification(str(cifar10_sample), train_split=None, max_eval_samples=20).evaluation
    with torch.no_grad():  # the scores transformers itself gives with the checkpoint's own processor
        pixels = processor(images=[row["img"] for row in rows], return_tensors="pt")["pixel_values"]
        logits = ViTForImageClassification.from_pretrained(tmp_path / "vit").eval()(pixel_values=pixels).logits
    labels = torch.tensor(rows["label"])
    top5 = (logits.topk(5, dim=1).indices == labels[:, None]).any(dim=1).float().mean().item() * 100
    assert record["top1"] == pytest.approx((logits.argmax(1) == labels).float().mean().item() * 100)
    assert record["top5"] == pytest.approx(top5)
    names = ["a", "b", "c"]
    rows = {"img": [Image.new("L", (8, 8), v) for v in (0, 90, 180)], "label": [0, 1, 2]}
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=names)})
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(tmp_path / "three")
    with pytest.raises(ValueError, match="predicts 10 classes but .* has 3"):
        run_evaluation(
            evaluation_parser().parse_args(
                ["--model", str(tmp_path / "vit"), "--dataset", str(tmp_path / "three"), "--split", "train"]
            )
        )


def test_final_folder_of_a_transformers_model_keeps_its_image_processor(tmp_path) -> None:
    """Catches a trained transformers checkpoint saved without the processor it came with: AutoImageProcessor then
    fails on final/ and evaluation falls back to a different preprocessing than the one it trained with."""
    from transformers import AutoImageProcessor, ViTConfig, ViTForImageClassification, ViTImageProcessor

    config = ViTConfig(
        image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        num_labels=3,
    )  # fmt: skip
    ViTForImageClassification(config).save_pretrained(tmp_path / "vit")
    ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.4] * 3, image_std=[0.2] * 3).save_pretrained(
        tmp_path / "vit"
    )
    model, *_ = load_model(str(tmp_path / "vit"))
    save_final_model(model, tmp_path / "final", ["a", "b", "c"])
    processor = AutoImageProcessor.from_pretrained(tmp_path / "final")
    assert list(processor.image_mean) == [0.4] * 3 and processor.size == {"height": 16, "width": 16}
    reloaded, *_ = load_model(str(tmp_path / "final"))
    assert reloaded.data_config["mean"] == (0.4,) * 3 and reloaded.data_config["input_size"] == (3, 16, 16)


def test_final_folder_of_a_plain_timm_model_loads_both_ways(tmp_path) -> None:
    from transformers import AutoModelForImageClassification

    model = timm.create_model("resnet10t", num_classes=3).eval()
    save_final_model(model, tmp_path / "final", ["a", "b", "c"])
    save_final_model(model, tmp_path / "final", ["a", "b", "c"])  # replaces the folder whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]
    pixels = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        reference = model(pixels)
        torch.testing.assert_close(
            timm.create_model(f"local-dir:{tmp_path / 'final'}", pretrained=True).eval()(pixels), reference
        )
        hf_model = AutoModelForImageClassification.from_pretrained(tmp_path / "final").eval()
        torch.testing.assert_close(hf_model(pixel_values=pixels).logits, reference)
