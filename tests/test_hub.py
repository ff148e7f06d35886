"""Publishing against a local Hub stand-in (tests/fake_hub.py), through the real huggingface_hub client code.

The stand-in speaks plain HTTP on 127.0.0.1 and never advertises Xet. Two client paths are exercised:
- Xet disabled (``HF_HUB_DISABLE_XET``): ``upload_folder`` -> ``create_commit``: validate-yaml, preupload, the LFS
  batch API with a basic PUT for ``model.safetensors`` (the server says ``"lfs"`` for it, like the Hub), NDJSON commit;
- the default install (hf_xet present): the streamed pipeline, with the server answering ``"regular"`` for every file,
  so all content travels base64 inside the NDJSON commit and no Xet storage is contacted.
Then the model is loaded back from what arrived, with timm and transformers, and downloaded by an "online user".
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import huggingface_hub
import pytest
import timm
import torch
from fake_hub import FakeHub
from huggingface_hub import ModelCard
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import LocalEntryNotFoundError
from PIL import Image
from test_cards import CIFAR10_LABELS, TINY, write_run

from structinit_hf.train.cli.errors import UsageError
from structinit_hf.train.publish.hub import push_to_hub, stage_repo_folder
from structinit_hf.train.settings import PushSettings

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_FAKEtestTOKEN0123456789abcdef"
REPO_ID = "my-org/vit_tiny_impulse3.cifar10"
PUBLISHED_REPO = "structinit-hf/vit_tiny_impulse3.cifar10"  # timm's vit_tiny_impulse3.cifar10 points here


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished tiny run and the outputs its model gives on a fixed batch."""
    run_dir, model = write_run(tmp_path_factory.mktemp("hubrun") / "c10")
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(images)
    return run_dir, images, logits


@pytest.fixture
def online(monkeypatch, tmp_path):
    """Talk to the stand-in: the suite runs with HF_HUB_OFFLINE=1; temp folders go where the test can see them."""
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


@pytest.fixture
def no_xet(monkeypatch):
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)


def _tree(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file()
    }


def _assert_loads_both_ways(folder: Path, images: torch.Tensor, logits: torch.Tensor) -> None:
    from transformers import AutoModelForImageClassification, pipeline

    config = json.loads((folder / "config.json").read_text())
    assert timm.models.model_entrypoint(config["architecture"]).__module__.startswith("timm.")  # stock timm name
    assert "num_classes" not in config.get("model_args", {})
    model = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(images), logits)
    assert model.pretrained_cfg["label_names"] == CIFAR10_LABELS
    hf_model = AutoModelForImageClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        torch.testing.assert_close(hf_model(pixel_values=images).logits, logits)
    assert [hf_model.config.id2label[i] for i in range(10)] == CIFAR10_LABELS
    classifier = pipeline("image-classification", model=str(folder))  # the card's snippet
    predictions = classifier(Image.new("RGB", (16, 16), (90, 140, 200)), top_k=3)
    assert len(predictions) == 3 and {p["label"] for p in predictions} <= set(CIFAR10_LABELS)


def test_push_uploads_the_staged_folder_through_lfs(trained, online, no_xet, tmp_path):
    run_dir, images, logits = trained
    staged = stage_repo_folder(run_dir, REPO_ID, tmp_path / "expected")
    with FakeHub(token=TOKEN) as hub:
        result = push_to_hub(PushSettings(run_dir, REPO_ID, endpoint=hub.url))
        requests = [(method, path) for method, path, _ in hub.requests]
        files = hub.files(REPO_ID)
        snapshot = hub.write_snapshot(REPO_ID, tmp_path / "arrived")

    assert ("POST", "/api/repos/create") in requests and ("POST", "/api/validate-yaml") in requests
    assert ("POST", f"/{REPO_ID}.git/info/lfs/objects/batch") in requests
    assert sum(method == "PUT" for method, _ in requests) == 1  # model.safetensors, sent once by LFS basic transfer
    assert requests[-1] == ("POST", f"/api/models/{REPO_ID}/commit/main")
    assert all(status == 200 for *_, status in hub.requests)
    assert len(hub.commits) == 1 and hub.commits[0].summary == result.commit_message
    assert "c10" in result.commit_message and "43.17%" in result.commit_message
    assert result.commit_url == f"{hub.url}/{REPO_ID}/commit/{hub.commits[0].oid}"
    # exactly the staged folder arrived, byte for byte, the card included
    assert _tree(snapshot) == _tree(staged)
    assert set(files) == {
        "README.md",
        "config.json",
        "model.safetensors",
        "results.json",
        "attention_init.png",
        *(p.name for p in (run_dir / "final").iterdir() if p.is_file()),
    }
    assert files["model.safetensors"] == (run_dir / "final" / "model.safetensors").read_bytes()
    card = ModelCard(files["README.md"].decode())
    assert card.data.eval_results[0].metric_value == 43.17
    assert hub.validated_yaml[-1] == files["README.md"].decode()
    assert not list(online.iterdir())  # the staging folder is gone
    _assert_loads_both_ways(snapshot, images, logits)


def test_push_with_the_default_client_and_a_branch(trained, online, tmp_path):
    run_dir, images, logits = trained
    with FakeHub(token=TOKEN, lfs_suffixes=()) as hub:
        push_to_hub(PushSettings(run_dir, REPO_ID, endpoint=hub.url, private=True, revision="experiment"))
        assert hub.repos[REPO_ID].private
        assert hub.files(REPO_ID, "main") == {}
        assert not hub.lfs_objects  # everything went inside the NDJSON commit
        snapshot = hub.write_snapshot(REPO_ID, tmp_path / "arrived", branch="experiment")
        # a second push to an existing repo and branch is a new commit, not an error
        push_to_hub(PushSettings(run_dir, REPO_ID, endpoint=hub.url, revision="experiment"))
        assert [c.branch for c in hub.commits] == ["experiment", "experiment"]
    assert _tree(snapshot) == _tree(stage_repo_folder(run_dir, REPO_ID, tmp_path / "expected"))
    _assert_loads_both_ways(snapshot, images, logits)


def test_dry_run_makes_no_request(trained, online, tmp_path, monkeypatch):
    run_dir, *_ = trained
    with FakeHub(token=TOKEN) as hub:
        result = push_to_hub(PushSettings(run_dir, REPO_ID, endpoint=hub.url, dry_run=True))
        assert hub.requests == []
    expected = stage_repo_folder(run_dir, REPO_ID, tmp_path / "expected")
    assert result.commit_url is None
    assert result.files == {path: (expected / path).stat().st_size for path in _tree(expected)}
    assert result.card == (expected / "README.md").read_text()
    assert not list(online.iterdir())
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)  # a dry run needs no network; a push says so offline
    assert push_to_hub(PushSettings(run_dir, REPO_ID, dry_run=True)).files == result.files
    with pytest.raises(UsageError, match="HF_HUB_OFFLINE is set"):
        push_to_hub(PushSettings(run_dir, REPO_ID))


def test_unauthorized_push_fails_clearly_and_leaves_nothing(trained, online, no_xet, monkeypatch):
    run_dir, *_ = trained
    before = _tree(run_dir)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong_token")
    with FakeHub(token=TOKEN) as hub, pytest.raises(ConnectionError, match="HTTP 401") as info:
        push_to_hub(PushSettings(run_dir, REPO_ID, endpoint=hub.url))
    assert "HF_TOKEN" in str(info.value) and "hf_wrong_token" not in str(info.value)
    assert hub.commits == [] and hub.repos == {}
    assert _tree(run_dir) == before and not list(online.iterdir())


def test_server_error_during_commit_then_retry_succeeds(trained, online, no_xet, tmp_path):
    run_dir, *_ = trained
    with FakeHub(token=TOKEN) as hub:
        hub.fail_commits = True
        with pytest.raises(ConnectionError, match="HTTP 500") as info:
            push_to_hub(PushSettings(run_dir, REPO_ID, endpoint=hub.url))
        assert "rerun the same command" in str(info.value)
        assert hub.commits == [] and hub.files(REPO_ID) == {}
        assert not list(online.iterdir())
        hub.fail_commits = False  # the Hub recovers; the same command now goes through
        push_to_hub(PushSettings(run_dir, REPO_ID, endpoint=hub.url))
        snapshot = hub.write_snapshot(REPO_ID, tmp_path / "arrived")
    assert len(hub.commits) == 1
    assert _tree(snapshot) == _tree(stage_repo_folder(run_dir, REPO_ID, tmp_path / "expected"))


def _script_main():
    spec = importlib.util.spec_from_file_location("push_to_hub_script", ROOT / "scripts" / "push_to_hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.mark.parametrize(
    ("remove", "message"),
    [(["results.json", "final/results.json"], "no results.json"), (["final/model.safetensors"], "no weights")],
)
def test_incomplete_run_is_refused(tmp_path, capsys, remove, message):
    run_dir, _ = write_run(tmp_path / "run")
    for name in remove:
        (run_dir / name).unlink()
    capsys.readouterr()  # what writing the run printed
    with pytest.raises(FileNotFoundError, match=message) as info:
        push_to_hub(PushSettings(run_dir, REPO_ID, dry_run=True))
    assert str(run_dir) in str(info.value)
    assert _script_main()(["--run-dir", str(run_dir), "--repo-id", REPO_ID, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.slow
def test_token_never_written_or_logged(trained, tmp_path, monkeypatch, capsys, caplog):
    """Dry run in-process, push as a user would (a process with HF_TOKEN, HF_ENDPOINT and the client's debug logging);
    grep every output, every uploaded file and every file written."""
    run_dir, *_ = trained
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    caplog.set_level("DEBUG")
    assert _script_main()(["--run-dir", str(run_dir), "--repo-id", REPO_ID, "--dry-run"]) == 0
    dry = capsys.readouterr()
    assert "README.md" in dry.out and "model-index" in dry.out
    env = {
        **os.environ,
        "HF_TOKEN": TOKEN,
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_VERBOSITY": "debug",
        "HF_HOME": str(tmp_path / "hf_home"),
    }
    command = [sys.executable, str(ROOT / "scripts" / "push_to_hub.py"), "--run-dir", str(run_dir)]
    with FakeHub(token=TOKEN) as hub:
        env["HF_ENDPOINT"] = hub.url
        push = subprocess.run([*command, "--repo-id", REPO_ID], env=env, capture_output=True, text=True, timeout=120)
        assert push.returncode == 0, push.stderr
        uploaded = hub.files(REPO_ID)
    assert any(h.get("authorization") == f"Bearer {TOKEN}" for h in hub.request_headers)  # it was used...
    assert hub.commits[0].summary in push.stdout
    for text in (dry.out, dry.err, caplog.text, push.stdout, push.stderr, hub.commits[0].description):
        assert TOKEN not in text  # ...and never shown
    for name, content in uploaded.items():
        assert TOKEN.encode() not in content, name
    for path in [*run_dir.rglob("*"), *(tmp_path / "hf_home").rglob("*")]:
        assert not path.is_file() or TOKEN.encode() not in path.read_bytes(), path


def test_run_that_recorded_the_token_is_not_uploaded(tmp_path, online, no_xet):
    run_dir, _ = write_run(tmp_path / "run", args={"model": "vit_tiny_impulse3", "push_token": TOKEN})
    (run_dir / "final" / "results.json").unlink()
    with FakeHub(token=TOKEN) as hub:
        for dry_run in (True, False):
            with pytest.raises(ValueError, match="results.json contains your Hub access token") as info:
                push_to_hub(PushSettings(run_dir, REPO_ID, endpoint=hub.url, dry_run=dry_run))
            assert TOKEN not in str(info.value)
        assert hub.requests == []


@pytest.mark.slow
def test_published_tag_downloads_for_online_users(trained, online, no_xet, tmp_path):
    """An online user (fresh cache, HF_ENDPOINT on the stand-in) loads the pushed repo: with stock timm (hf-hub:) and
    transformers' remote code before structinit_hf is imported, then by the registered timm tag."""
    run_dir, images, logits = trained
    torch.save({"images": images, "logits": logits}, tmp_path / "expected.pt")
    user = f"""
import sys, timm, torch
from transformers import AutoModelForImageClassification

class NotInstalled:  # as if structinit-hf were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "structinit_hf":
            raise ModuleNotFoundError(name)

sys.meta_path.insert(0, NotInstalled())
expected = torch.load({str(tmp_path / "expected.pt")!r}, weights_only=True)
by_repo = timm.create_model("hf-hub:{PUBLISHED_REPO}", pretrained=True).eval()  # stock timm
hf = AutoModelForImageClassification.from_pretrained("{PUBLISHED_REPO}", trust_remote_code=True).eval()
assert "structinit_hf" not in sys.modules
sys.meta_path.pop(0)
import structinit_hf
by_tag = timm.create_model("vit_tiny_impulse3.cifar10", pretrained=True, **{TINY!r}).eval()
with torch.no_grad():
    for out in (by_repo(expected["images"]), by_tag(expected["images"]), hf(pixel_values=expected["images"]).logits):
        torch.testing.assert_close(out, expected["logits"])
print("loaded", by_tag.pretrained_cfg["hf_hub_id"])
"""
    with FakeHub(token=TOKEN) as hub:
        push_to_hub(PushSettings(run_dir, PUBLISHED_REPO, endpoint=hub.url))
        env = {
            **os.environ,
            "HF_TOKEN": TOKEN,
            "HF_HUB_OFFLINE": "0",
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(tmp_path / "hf_home"),
            "HF_HUB_DISABLE_XET": "1",
        }
        done = subprocess.run([sys.executable, "-c", user], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"loaded {PUBLISHED_REPO}" in done.stdout


def test_published_tag_offline_fails_with_a_clear_message(monkeypatch, tmp_path):
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    assert timm.models.get_pretrained_cfg("vit_tiny_impulse3.cifar10").hf_hub_id == PUBLISHED_REPO
    assert "vit_tiny_impulse3.cifar10" in timm.list_pretrained("vit_tiny_impulse3*")
    assert timm.create_model("vit_tiny_impulse3", **TINY).pretrained_cfg.get("hf_hub_id") is None  # bare name: fresh
    with pytest.raises(LocalEntryNotFoundError, match=f"{PUBLISHED_REPO}.*HF_HUB_OFFLINE"):
        timm.create_model("vit_tiny_impulse3.cifar10", pretrained=True, **TINY)


def test_transformers_push_to_hub_uploads_the_stock_folder(online, no_xet, tmp_path, monkeypatch):
    """``model.push_to_hub`` of a model built with StructInitViTConfig (transformers' own upload, through
    save_pretrained) sends the stock timm_wrapper folder: config.json names a stock timm architecture, no code."""
    import transformers.utils.hub
    from transformers import AutoModelForImageClassification

    from structinit_hf import StructInitViTConfig

    config = StructInitViTConfig(model_args=dict(TINY, seed=1), num_labels=3)
    model = AutoModelForImageClassification.from_config(config)
    with FakeHub(token=TOKEN) as hub:
        # transformers uploads through its own shared client (transformers.utils.hub.hf_api()) and reads the repo's
        # card from huggingface_hub's default endpoint: point both here (the card read would retry huggingface.co)
        monkeypatch.setattr(transformers.utils.hub, "_hf_api", huggingface_hub.HfApi(endpoint=hub.url))
        monkeypatch.setattr(hf_constants, "ENDPOINT", hub.url)
        monkeypatch.setattr(
            hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}"
        )
        model.push_to_hub("my-org/tiny-impulse", token=TOKEN)
        files = hub.files("my-org/tiny-impulse")
        snapshot = hub.write_snapshot("my-org/tiny-impulse", tmp_path / "arrived")
    uploaded = json.loads(files["config.json"])
    assert uploaded["model_type"] == "timm_wrapper" and uploaded["structinit"]["attention_init"] == "impulse"
    assert timm.models.model_entrypoint(uploaded["architecture"]).__module__.startswith("timm.")
    assert not any(name.endswith(".py") for name in files)
    loaded = timm.create_model(f"local-dir:{snapshot}", pretrained=True)
    torch.testing.assert_close(loaded.blocks[0].attn.qkv.weight, model.timm_model.blocks[0].attn.qkv.weight)
