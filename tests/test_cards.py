"""Model cards: rendered offline from the run, parsed back with ModelCard.load, checked against results.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import timm
import torch
from huggingface_hub import ModelCard
from PIL import Image

from structinit_hf.models.timm_wrapper import save_checkpoint
from structinit_hf.train import PushSettings, push_to_hub
from structinit_hf.train.models import loading
from structinit_hf.train.publish.cards import CARD_TAGS, TEMPLATE_DIR, build_model_card, model_family, read_results
from structinit_hf.train.publish.hub import CARD_FILE, stage_repo_folder
from structinit_hf.train.settings import SAMPLE_DATASETS

CIFAR10_LABELS = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
REPO_ID = "my-org/vit_tiny_impulse3.cifar10"
TINY = dict(depth=1, img_size=16, patch_size=4)


def write_run(run_dir: Path, *, attention_image: bool = True, **overrides) -> tuple[Path, torch.nn.Module]:
    """A finished training run as scripts/train.py leaves it (contract item 2), for a tiny model."""
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_impulse3", seed=3, **TINY).eval()
    save_checkpoint(model, run_dir / "final", label_names=CIFAR10_LABELS)
    results = {
        "model": "vit_tiny_impulse3",
        "model_kwargs": dict(TINY, seed=3),
        "init": {"attention_init": "impulse", "kernel_size": 3, "seed": 3, "pseudo_input": "sincos", "solver": "svd"},
        "dataset": "uoft-cs/cifar10",
        "dataset_config": None,
        "split": "test",
        "num_classes": 10,
        "label_names": CIFAR10_LABELS,
        "top1": 43.17,
        "top5": 89.86,
        "epochs": 3,
        "images_seen": 13980,
        "wall_time_s": 4321.5,
        "args": {"model": "vit_tiny_impulse3", "lr": 0.001, "batch_size": 128, "warmup_epochs": 1, "seed": 3},
        "versions": {"python": "3.11.7", "torch": torch.__version__, "timm": timm.__version__},
        **overrides,
    }
    for path in (run_dir / "results.json", run_dir / "final" / "results.json"):
        path.write_text(json.dumps(results, indent=2))
    if attention_image:
        Image.new("RGB", (24, 8), (200, 30, 30)).save(run_dir / "attention_init.png")
    return run_dir, model


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("run"))[0]


def test_card_metadata_and_numbers_match_results(run, tmp_path):
    folder = stage_repo_folder(run, REPO_ID, tmp_path / "repo")
    results = json.loads((run / "results.json").read_text())
    card = ModelCard.load(folder / CARD_FILE)

    data = card.data
    assert data.library_name == "timm"
    assert data.pipeline_tag == "image-classification"
    assert data.license == "apache-2.0"
    assert set(CARD_TAGS) <= set(data.tags)
    assert data.datasets == ["uoft-cs/cifar10"]
    assert data.model_name == "vit_tiny_impulse3.cifar10"
    by_metric = {result.metric_type: result for result in data.eval_results}
    assert set(by_metric) == {"accuracy", "top_5_accuracy"}
    assert by_metric["accuracy"].metric_value == results["top1"]
    assert by_metric["top_5_accuracy"].metric_value == results["top5"]
    for result in data.eval_results:
        assert (result.dataset_type, result.dataset_split, result.task_type) == (
            "uoft-cs/cifar10",
            "test",
            "image-classification",
        )

    body = card.text
    assert "| uoft-cs/cifar10 | test | 43.17 | 89.86 |" in body
    assert "random 3x3 impulse filter" in body
    for setting in ("| kernel_size | `3` |", "| seed | `3` |", "| pseudo_input | `sincos` |", "| solver | `svd` |"):
        assert setting in body
    for name, value in results["args"].items():  # the whole recipe is in the card
        assert f"| `{name}` | `{value}` |" in body
    assert "3 epochs" in body and "13,980 images seen" in body and "1.2 h wall time" in body
    assert f'timm.create_model("hf-hub:{REPO_ID}", pretrained=True)' in body
    assert f'AutoModelForImageClassification.from_pretrained("{REPO_ID}")' in body
    assert f'pipeline("image-classification", model="{REPO_ID}")' in body
    assert "![Initial attention maps](attention_init.png)" in body and (folder / "attention_init.png").is_file()
    for arxiv_id in ("2404.01139", "2305.09828", "2103.10697"):
        assert arxiv_id in body
    assert body.count("@inproceedings{") == 2 and body.count("@article{") == 1
    params = sum(p.numel() for p in timm.create_model("vit_tiny_impulse3", **TINY).parameters())
    assert f"**Params (M):** {params / 1e6:.2f}" in body
    assert "**Image size:** 16 x 16 px" in body
    assert "| solver | `svd` |\n\nThe run's attention maps" in body  # the table ends before the text


def test_an_impulse_card_says_what_else_the_init_touched(run):
    results = read_results(run / "results.json")
    config = json.loads((run / "final" / "config.json").read_text())
    plain = build_model_card(results, config, REPO_ID, num_params=10**6).text
    assert "value/output projections" not in plain and "patch embedding's initial weights" not in plain
    assert "Every other weight keeps timm's default initialisation" in plain
    results["init"] = {**results["init"], "value_init": "mimetic", "patch_embed_scale": 0.5}
    text = build_model_card(results, config, REPO_ID, num_params=10**6).text
    assert "The value/output projections got mimetic init's" in text
    assert "initial weights were scaled by 0.5" in text


def test_an_impulse_card_names_its_preset(run):
    """Catches a card that hides which construction (this project's, v1 or v2) the checkpoint started from."""
    results = read_results(run / "results.json")
    config = json.loads((run / "final" / "config.json").read_text())
    texts = {}
    for preset in ("structinit", "v1", "v2"):
        results["init"] = {**results["init"], "preset": preset}
        texts[preset] = build_model_card(results, config, REPO_ID, num_params=10**6).text
    assert "this project's own (**`structinit` preset**" in texts["structinit"]
    assert "**`v1` preset**, the paper's first version (arXiv 2404.01139)" in texts["v1"]
    assert "**`v2` preset**, the authors' NeurIPS 2025 version (arXiv 2505.19985)" in texts["v2"]
    assert "| preset | `v2` |" in texts["v2"]


def test_a_shift_card_says_the_impulse_is_soft(run):
    """Catches a card for the default shift construction claiming the sharp impulse filter it does not start with."""
    results = read_results(run / "results.json")
    config = json.loads((run / "final" / "config.json").read_text())
    results["init"] = {**results["init"], "solver": "shift", "preset": "structinit", "value_init": "mimetic"}
    text = build_model_card(results, config, REPO_ID, num_params=10**6).text
    assert "**soft random 3x3 impulse**" in text and "impulse filter**" not in text
    assert "`W_q W_k^T ~ 0.7 Z + 0.7 I`, with the identity pointed at that shift" in text
    assert "The value/output projections got mimetic init's" in text and "| solver | `shift` |" in text


def test_a_mimetic_card_names_its_own_paper_first(run):
    results = read_results(run / "results.json")
    results.update(model="vit_tiny_mimetic", init={"attention_init": "mimetic", "seed": 0})
    config = json.loads((run / "final" / "config.json").read_text())
    card = build_model_card(results, config, REPO_ID, num_params=10**6)
    assert (
        "- **Papers:** [Mimetic Initialization of Self-Attention Layers](https://arxiv.org/abs/2305.09828)" in card.text
    )
    assert "**mimetic initialization** of its attention" in card.text


def test_card_without_attention_image_has_no_picture(tmp_path):
    run, _ = write_run(tmp_path / "run", attention_image=False)
    folder = stage_repo_folder(run, REPO_ID, tmp_path / "repo")
    assert "![" not in (folder / CARD_FILE).read_text()
    assert not (folder / "attention_init.png").exists()


def test_staging_takes_a_new_or_empty_folder_and_never_overwrites(run, tmp_path):
    (tmp_path / "empty").mkdir()
    assert (stage_repo_folder(run, REPO_ID, tmp_path / "empty") / CARD_FILE).is_file()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="used already exists and is not an empty folder"):
        stage_repo_folder(run, REPO_ID, tmp_path / "used")
    assert [p.name for p in (tmp_path / "used").iterdir()] == ["keep.txt"]


def test_a_local_dataset_is_named_as_one_or_linked_to_its_hub_id(run, tmp_path, cifar10_sample):
    results = read_results(run / "results.json")
    results["dataset"] = results["args"]["dataset"] = str(cifar10_sample)
    results["images_per_class"] = {"train": {name: 7 for name in results["label_names"]}}
    config = json.loads((run / "final" / "config.json").read_text())
    local = build_model_card(results, config, REPO_ID, num_params=1)  # no invented Hub id
    assert local.data.datasets is None and "huggingface.co/datasets" not in local.text
    assert f"on a local dataset, `{cifar10_sample.name}`, not on the Hub" in local.text
    assert f"{results['label_names'][0]} (7 training images)" in local.text and str(cifar10_sample) not in str(local)
    card = build_model_card(results, config, REPO_ID, num_params=1, dataset_id="uoft-cs/cifar10")
    assert card.data.datasets == ["uoft-cs/cifar10"]
    assert f"read from the local copy `{cifar10_sample.name}`" in card.text
    assert str(cifar10_sample) not in str(card)  # a local path is not published, only its last part
    assert f"| `dataset` | `.../{cifar10_sample.name}` |" in card.text
    with pytest.raises(ValueError, match="not a Hub dataset id"):
        build_model_card(results, config, REPO_ID, num_params=1, dataset_id="../data")


def test_credentials_in_the_recorded_options_are_redacted(run):
    results = read_results(run / "results.json")
    results["args"] = {**results["args"], "hub_token": "hf_abcdefSECRET"}
    config = json.loads((run / "final" / "config.json").read_text())
    card = build_model_card(results, config, REPO_ID, num_params=1)
    assert "hf_abcdefSECRET" not in str(card)
    assert "| `hub_token` | `<redacted>` |" in card.text


def test_a_card_says_where_it_trained_and_the_command_that_trains_it_again(run):
    """Catches a card whose command drops an option the run set, spells a default, keeps where the run was kept, or
    a local copy's path where the run read a Hub dataset; and a GPU run said to have trained on the CPU."""
    results = read_results(run / "results.json")
    results["args"] = {**results["args"], "output_dir": "/home/me/runs/x", "compile": False, "opt_eps": 0.001,
                       "scale": [0.08, 1.0], "model_kwargs": {"depth": 1}, "dataset": "/data/c10"}  # fmt: skip
    config = json.loads((run / "final" / "config.json").read_text())
    card = build_model_card({**results, "numerics": {"gpu": "NVIDIA H200"}}, config, REPO_ID, num_params=1,
                            dataset_id="uoft-cs/cifar10").text  # fmt: skip
    command = next(line for line in card.splitlines() if line.startswith("structinit-hf train "))
    assert command == (
        "structinit-hf train --model vit_tiny_impulse3 --batch-size 128 --warmup-epochs 1 --seed 3 --no-compile "
        "--model-kwargs depth=1 --dataset uoft-cs/cifar10"
    )  # lr and opt_eps at their defaults, where the run was kept left out
    assert ") on one NVIDIA H200, with `scripts/train.py`" in card
    sample = str(SAMPLE_DATASETS["cifar10-sample"])
    local = {**results, "dataset": sample, "args": {**results["args"], "dataset": sample}, "numerics": {"gpu": "H200"}}
    local.update(global_batch=512, micro_batch=64, grad_accum=1)  # 8 processes
    cpu = build_model_card({**local, "numerics": {"torch_threads": 2}}, config, REPO_ID, num_params=1).text
    assert ") on the CPU, with" in cpu and " --dataset cifar10-sample" in cpu and "/samples/" not in cpu
    assert ") on 8 processes on H200 GPUs, with" in build_model_card(local, config, REPO_ID, num_params=1).text


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("top1", None, "lacks the field"), ("top5", "89", "wrong type"), ("top1", 143.0, r"percentage in \[0, 100\]")],
)
def test_read_results_names_the_bad_field(run, tmp_path, field, value, message):
    results = json.loads((run / "results.json").read_text())
    if value is None:
        del results[field]
    else:
        results[field] = value
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    with pytest.raises(ValueError, match=message) as info:
        read_results(path)
    assert field in str(info.value)


def test_each_model_family_has_its_template(run):
    assert model_family("convit_tiny_patch2_32") == "convit"
    for name in ("vit_tiny_impulse3.cifar10", "deit3_small_patch16_224", "swin_tiny_patch4_window7_224", "resnet50"):
        assert model_family(name) == "timm"  # any timm architecture has a card
    results = read_results(run / "results.json")
    results.update(model="convit_tiny_patch2_32", init={})
    config = {"architecture": "convit_tiny", "model_args": {}, "pretrained_cfg": {"input_size": [3, 32, 32]}}
    card = build_model_card(results, config, "my-org/convit_tiny_patch2_32.cifar10", num_params=10**6)
    assert "timm's ConViT" in card.text and "gated positional self-attention" in card.text
    assert "stock timm loads it" not in card.text  # only said of the plain-ViT family
    assert {p.name for p in TEMPLATE_DIR.glob("*.md.j2")} >= {"timm.md.j2", "convit.md.j2", "_citation.md.j2"}


def test_a_card_names_the_network_its_geometry_and_the_name_it_loads_as(run):
    """Catches a width-48 run's card naming vit_base_patch16_224 as its architecture (the stock name it is saved
    under), and a stock timm name called "registered in structinit-hf"."""
    results = read_results(run / "results.json")
    config = json.loads((run / "final" / "config.json").read_text())
    narrow = timm.create_model("vit_tiny_impulse3", **TINY, embed_dim=48)  # no stock name for width 48
    config.update(architecture=narrow.stock_architecture, model_args=narrow.network_args)
    assert config["architecture"] == "vit_base_patch16_224"
    text = build_model_card(results, config, REPO_ID, num_params=10**6).text
    assert "- **Architecture:** timm `VisionTransformer`, width 48, depth 1, 3 heads, patch 4 x 4 on 16 x 16 px" in text
    assert "- **Loads as:** timm `vit_base_patch16_224` with " in text and "`embed_dim=48`" in text
    assert "- **Registered as:** `vit_tiny_impulse3`" in text
    results["model"] = "vit_tiny_patch16_224"
    assert "Registered as" not in build_model_card(results, config, REPO_ID, num_params=10**6).text


@pytest.mark.parametrize(
    ("record", "said"),
    [
        (
            {"attn_layer_scale": 1.0, "structinit_defaults": {"attn_layer_scale": 1.0}},
            "at 1 (`attn_layer_scale`, the family's default)",
        ),
        ({"attention_layer_scale": {"before": 1e-06, "after": 1.0}}, "from 1e-06 (as built) to 1 (`attn_layer_scale`)"),
        ({"attn_layer_scale": 0.1}, "at 0.1 (`attn_layer_scale`)"),
    ],
)
def test_a_card_says_what_the_init_did_to_the_layer_scale(run, record, said):
    """Catches a card silent on an attention layer scale the init opened (read from the run's init record)."""
    results = read_results(run / "results.json")
    config = json.loads((run / "final" / "config.json").read_text())
    assert "layer scale" not in build_model_card(results, config, REPO_ID, num_params=10**6).text
    results["init"] = {**results["init"], **record}
    text = build_model_card(results, config, REPO_ID, num_params=10**6).text
    assert f"The attention branch's layer scale started {said}" in text


def _child_card(fine_tuned_from: dict, tmp_path: Path) -> ModelCard:
    """The published card of a run fine-tuned from the parent that ``fine_tuned_from`` (load_model's record) names."""
    child, _ = write_run(tmp_path / "child", fine_tuned_from=fine_tuned_from)
    return ModelCard.load(stage_repo_folder(child, "me/child", tmp_path / "child_repo") / CARD_FILE)


def test_a_card_and_commit_name_a_local_parent_by_its_folder_not_by_its_path(tmp_path, monkeypatch):
    """Catches ``model = runs/c10/final`` and a parent "trained on" a local folder's path (paths of the machine that
    trained, meaningless on the Hub), in the card and in the commit message: a local parent is "a local checkpoint"
    named by its run folder, with the dataset its run recorded by name, and the init it started from."""
    monkeypatch.chdir(tmp_path)
    local_data = str(tmp_path / "photos")
    write_run(Path("runs/c10"), dataset=local_data, args={"model": "vit_tiny_impulse3", "dataset": local_data})
    record = loading.load_model("runs/c10/final", num_classes=3).fine_tuned_from
    assert (record["model"], record["hub_id"], record["dataset"]) == ("runs/c10/final", None, local_data)
    child, _ = write_run(tmp_path / "child", fine_tuned_from=record, args={"model": "runs/c10/final", "lr": 1e-4})
    card = ModelCard.load(stage_repo_folder(child, "me/child", tmp_path / "child_repo") / CARD_FILE)
    assert (
        "fine-tuned from a local checkpoint `c10` trained on `photos` (classifier re-initialized), a model that "
        "started\nwith **structured (impulse 3x3) initialization** of its attention" in card.text
    )
    assert "Fine-tuned from a local checkpoint `c10` (classifier re-initialized) on [uoft-cs/cifar10]" in card.text
    assert "| `model` | `c10` |" in card.text and card.data.base_model is None
    message = push_to_hub(PushSettings(child, "me/child", dry_run=True)).commit_message
    assert message.startswith("Upload run child: fine-tuned from c10, top-1")
    for text in (card.text, message):
        assert "runs/" not in text and "final" not in text and str(tmp_path) not in text


def _downloaded_repo(run: Path, tmp_path: Path) -> Path:
    """The published parent as ``snapshot_download(REPO_ID, local_dir=...)`` leaves it: weights, card, results."""
    return stage_repo_folder(run, REPO_ID, tmp_path / "downloaded")


def _hub_cache_snapshot(run: Path, tmp_path: Path) -> Path:
    """The parent's final/ as the Hub cache keeps a download of REPO_ID (no card in it)."""
    org, name = REPO_ID.split("/")
    snapshot = tmp_path / "hub" / f"models--{org}--{name}" / "snapshots" / "0123abcd"
    snapshot.parent.mkdir(parents=True)
    shutil.copytree(run / "final", snapshot)
    return snapshot


def _hf_hub_source(monkeypatch) -> str:
    """``--model hf-hub:REPO_ID`` (timm's weights fetched by create_timm_model, stood in for: the suite is offline)."""
    monkeypatch.setattr(loading, "create_timm_model", lambda source, **kwargs: torch.nn.Identity())
    return f"hf-hub:{REPO_ID}"


@pytest.mark.parametrize("parent", ["downloaded_repo", "hub_cache_snapshot", "hf_hub_source"])
def test_a_card_names_a_hub_parent_by_its_hub_id(run, tmp_path, monkeypatch, parent):
    """Catches a parent from the Hub named by a local path (or as "a local checkpoint"): given as ``hf-hub:<id>``, or
    as a folder that is a copy of a Hub repo (its card loads ``hf-hub:<id>``, or it sits in the Hub cache), the card
    links the parent's Hub page and declares it as ``base_model``."""
    source = {
        "downloaded_repo": lambda: str(_downloaded_repo(run, tmp_path)),
        "hub_cache_snapshot": lambda: str(_hub_cache_snapshot(run, tmp_path)),
        "hf_hub_source": lambda: _hf_hub_source(monkeypatch),
    }[parent]()
    record = loading.load_model(source, num_classes=3).fine_tuned_from
    assert record["hub_id"] == REPO_ID
    card = _child_card(record, tmp_path)
    assert f"fine-tuned from [{REPO_ID}](https://huggingface.co/{REPO_ID})" in card.text
    assert f"Fine-tuned from [{REPO_ID}](https://huggingface.co/{REPO_ID})" in card.text
    assert card.data.base_model == REPO_ID and "local checkpoint" not in card.text and str(tmp_path) not in card.text
