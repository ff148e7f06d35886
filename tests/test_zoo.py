"""The zoo (``zoo/<model>/``, trained on lent GPUs by ``study/zoo_loan.sh``): each committed model loads in stock timm
and stock transformers without the plugin and scores its recorded top-1 on the 1,000 test images of the sample the
package ships; it publishes as it is (to the Hub stand-in), its card being the card the package renders for it; a
user fine-tunes it with the one command README's "Trained models" gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_hub import FakeHub
from test_hub import TOKEN, no_xet, online  # noqa: F401  (fixtures)
from tiny_runs import image_folder, run
from without_package import run_without_package

from structinit_hf.train import PushSettings, push_to_hub
from structinit_hf.train.publish.cards import build_model_card, count_parameters, read_results

REPO = Path(__file__).resolve().parents[1]
SAMPLE_TEST = REPO / "structinit_hf" / "samples" / "cifar10" / "test-00000-of-00001.parquet"
MODELS = sorted(path for path in (REPO / "zoo").glob("*/model.safetensors"))
ZOO = [path.parent for path in MODELS]
sys.path.insert(0, str(REPO))
from study.zoo_commit import DATASET_ID, NAMESPACE, drop_progress_bars  # noqa: E402
from study.zoo_commit import main as zoo_commit  # noqa: E402

# what a user without the plugin runs: transformers' model (top-1 on the sample's test images) and pipeline, and stock
# timm's two ways in (timm's local-dir: and the overlay of the weights file on the architecture the config names)
SCORE_WITHOUT_PLUGIN = """
import io, json, sys
sys.modules["structinit_hf"] = None
import pyarrow.parquet as pq, timm, torch
from PIL import Image
from transformers import AutoModelForImageClassification, pipeline
folder, sample = sys.argv[1:]
config = json.load(open(f"{folder}/config.json"))
rows = pq.read_table(sample).to_pylist()
images = [Image.open(io.BytesIO(row["img"]["bytes"])).convert("RGB") for row in rows]
labels = torch.tensor([row["label"] for row in rows])
local = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
overlay = dict(file=f"{folder}/model.safetensors", **config["pretrained_cfg"])
stock = timm.create_model(
    config["architecture"], pretrained=True, pretrained_cfg_overlay=overlay, **config["model_args"]
)
transform = timm.data.create_transform(**timm.data.resolve_model_data_config(stock))
pixels = torch.stack([transform(image) for image in images])
hf = AutoModelForImageClassification.from_pretrained(folder).eval()
with torch.no_grad():  # the 1,000 images through transformers; the first 32 through each of stock timm's two ways
    logits = torch.cat([hf(chunk).logits for chunk in pixels.split(250)])
    same = all(torch.allclose(model(pixels[:32]), logits[:32], atol=1e-4) for model in (local, stock.eval()))
top1 = round((logits.argmax(-1) == labels).float().mean().item() * 100, 2)
answers = pipeline("image-classification", model=folder)(images[:8])
print(json.dumps({"top1": top1, "same": same, "dtype": str(hf.dtype), "pipeline": [a[0]["label"] for a in answers],
                  "model": [config["label_names"][i] for i in logits[:8].argmax(-1)]}))
"""


def _recorded(folder: Path) -> dict:
    return json.loads((folder / "sample_test.json").read_text())


def test_the_zoo_has_its_first_model_trained_to_the_end():
    """Catches a zoo folder lost or half-written: the impulse model, its whole schedule, the card's figures."""
    assert "vit_tiny_impulse3.cifar10" in [folder.name for folder in ZOO]
    for folder in ZOO:
        results = read_results(folder / "results.json")
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        assert len(lines) == results["epochs"] == results["args"]["epochs"] >= 100  # every epoch of the schedule
        assert results["num_samples"] == 10000 and results["split"] == "test" and results["args"]["seed"] == 0
        assert f"**{results['top1']:.2f}% top-1**" in (folder / "README.md").read_text()
        # re-scored on the CPU from the committed bf16 weights: the card's figure within bf16/fp32 rounding
        rescored = json.loads((folder / "cifar10_test_cpu.json").read_text())
        assert rescored["num_samples"] == 10000 and abs(rescored["top1"] - results["top1"]) <= 0.3


@pytest.mark.slow
@pytest.mark.parametrize("folder", ZOO, ids=[folder.name for folder in ZOO])
def test_a_zoo_model_scores_its_recorded_top1_without_the_plugin(folder, tmp_path):
    """Catches weights that stock timm or transformers load into another network (a head dropped for a class count
    taken from ImageNet's pretrained config, 224-px preprocessing), a transformers model left in bf16, and a model
    that no longer scores what its record says."""
    script = SCORE_WITHOUT_PLUGIN.replace("sys.argv[1:]", repr([str(folder), str(SAMPLE_TEST)]))
    scored = json.loads(run_without_package(script, tmp_path).splitlines()[-1])
    recorded = _recorded(folder)
    assert scored["same"] and scored["dtype"] == "torch.float32"
    assert abs(scored["top1"] - recorded["top1"]) <= 0.2  # CPUs round differently: an image or two either way
    assert recorded["num_samples"] == 1000 and recorded["top1"] >= 80
    assert scored["pipeline"] == scored["model"]


@pytest.mark.parametrize("folder", ZOO, ids=[folder.name for folder in ZOO])
def test_a_zoo_card_is_the_card_the_package_renders(folder):
    """Catches a committed card gone stale against the card code, or against the run's record."""
    repo_id = f"{NAMESPACE}/{folder.name}"
    config = json.loads((folder / "config.json").read_text())
    card = build_model_card(
        read_results(folder / "results.json"),
        config,
        repo_id,
        num_params=count_parameters(folder / "model.safetensors"),
        dataset_id=DATASET_ID,
    )
    assert (folder / "README.md").read_text() == str(card)
    assert "on one NVIDIA H" in str(card) and f"--epochs {read_results(folder / 'results.json')['epochs']}" in str(card)


# an online user (HF_ENDPOINT on the stand-in) asks timm for the registered pretrained tag the zoo model publishes
BY_TAG = """
import sys, timm, torch, structinit_hf
images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
by_tag = timm.create_model("vit_tiny_impulse3.cifar10", pretrained=True).eval()
folder = timm.create_model("local-dir:" + sys.argv[1], pretrained=True).eval()
with torch.no_grad():
    torch.testing.assert_close(by_tag(images), folder(images), rtol=0, atol=0)
print("loaded", by_tag.pretrained_cfg["hf_hub_id"])
"""


@pytest.mark.slow
def test_a_zoo_model_is_pushed_as_it_is_and_its_timm_tag_downloads_it(tmp_path, online, no_xet):  # noqa: F811
    """Catches push-to-hub refusing a zoo folder (no final/) or dropping the run's record from the upload, and a zoo
    model that the registered tag ``vit_tiny_impulse3.cifar10`` (its hf_hub_id) would not load once published."""
    folder = REPO / "zoo" / "vit_tiny_impulse3.cifar10"
    with FakeHub(token=TOKEN) as hub:
        push_to_hub(PushSettings(folder, f"{NAMESPACE}/{folder.name}", endpoint=hub.url, dataset_id=DATASET_ID))
        snapshot = hub.write_snapshot(f"{NAMESPACE}/{folder.name}", tmp_path / "arrived")
        env = {**os.environ, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf_home"),
               "HF_HUB_DISABLE_XET": "1"}  # fmt: skip
        command = [sys.executable, "-c", BY_TAG, str(folder)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and f"loaded {NAMESPACE}/{folder.name}" in done.stdout, done.stderr[-3000:]
    arrived = sorted(path.name for path in snapshot.iterdir())
    assert arrived == sorted(path.name for path in folder.iterdir())
    assert (snapshot / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()
    assert (snapshot / "README.md").read_text() == (folder / "README.md").read_text()


@pytest.mark.slow
def test_a_zoo_model_fine_tunes_with_one_command(tmp_path):
    """The command README's "Trained models" gives (`--model zoo/<name>` in its fine-tune line), on a user's image
    folder of other classes: a new head, the rest the zoo's."""
    data = image_folder(tmp_path / "my_images", ["left", "right"], per_class=6)
    folder = REPO / "zoo" / "vit_tiny_impulse3.cifar10"
    results = run(["--model", str(folder), "--dataset", str(data), "--epochs", "1", "--batch-size", "8",
                   "--warmup-epochs", "0", "--lr", "1e-4", "--output-dir", str(tmp_path / "run")])  # fmt: skip
    assert results["num_classes"] == 2 and results["label_names"] == ["left", "right"]
    assert results["fine_tuned_from"]["model"] == str(folder)


def test_train_log_keeps_the_runs_lines_without_its_progress_bars():
    log = (
        "set-up: 9.7 s\n\repoch 1:   0%|          | 0/48640 [00:00<?, ?img/s]first step: began 31.0 s after\n"
        "\repoch 1:   1%|          | 512/48640 [00:39<1:01:26, 13.05img/s, loss=2.3]\repoch 1/2  train loss 2.2\n"
    )
    assert drop_progress_bars(log) == "set-up: 9.7 s\nfirst step: began 31.0 s after\nepoch 1/2  train loss 2.2\n"


@pytest.mark.slow
def test_a_zoo_loan_smoke_run_comes_back_and_becomes_a_zoo_folder(tmp_path):
    """``SMOKE=1 bash study/zoo_loan.sh`` (a 1-block model, 2 epochs of the shipped sample, on the CPU), then
    ``study/zoo_commit.py`` on what it left in $OUT: catches a loan whose weights do not come back within the device's
    limits (8 files of 16 MiB), a bf16 copy that is not the fp32 weights rounded, and a folder without its card."""
    env = {**os.environ, "SMOKE": "1", "DATA": "cifar10-sample", "EPOCHS": "2", "RUNS": str(tmp_path / "runs"),
           "OUT": str(tmp_path / "out")}  # fmt: skip
    done = subprocess.run(["bash", "study/zoo_loan.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "finished: weights and the run's files brought back" in done.stdout, done.stdout
    back = sorted((tmp_path / "out").iterdir())
    assert len(back) <= 8 and all(path.stat().st_size < 16 * 2**20 for path in back)
    assert zoo_commit([str(tmp_path / "out"), str(tmp_path / "zoo" / "tiny.cifar10"), "--dataset-id", ""]) == 0
    folder = tmp_path / "zoo" / "tiny.cifar10"
    assert json.loads((folder / "config.json").read_text())["dtype"] == "float32"
    card = (folder / "README.md").read_text()
    assert "structinit-hf train --model vit_tiny_impulse3 --model-kwargs depth=1 --dataset cifar10-sample " in card
    assert "%|" not in (folder / "train.log").read_text() and "test: top-1" in (folder / "train.log").read_text()
