"""timm's own relative-position and rotary ViTs on the CPU proxy (issue 56, point 6): the study's profiles build each
arm's model at the proxy's geometry with its init's pattern, and every queue line names a profile and arm there are."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from structinit_hf.benchmark.arms import ALL_ARMS, MODEL_ARMS
from structinit_hf.benchmark.profiles import STOCK_MODELS
from structinit_hf.benchmark.runs import run_settings
from structinit_hf.benchmark.summary import built_layer_scale
from structinit_hf.init.layer_scale import attention_layer_scale
from structinit_hf.train.models.loading import load_model
from study.profiles import PROFILES

REPO = Path(__file__).resolve().parents[1]
QUEUES = sorted((REPO / "study" / "queues").glob("*.txt"))
PROXY = PROFILES["cpu-proxy-n2500"]
RELATIVE = ("relpos", "rope")  # the stock families whose impulse is written into a relative position term


def _build(profile_name: str, arm: str, tmp_path: Path) -> tuple[str, torch.nn.Module]:
    """The model the harness trains for ``arm`` under ``profile_name`` (seed 0), built as training builds it."""
    profile = PROFILES[profile_name]
    flags = run_settings(profile, MODEL_ARMS[arm], 0, profile.datasets["cifar10"], tmp_path).flags()
    torch.manual_seed(0)
    return flags["model"], load_model(flags["model"], num_classes=10, model_kwargs=flags["model_kwargs"]).model


@pytest.mark.parametrize("family", sorted(STOCK_MODELS))
def test_each_family_has_both_rates_apart_in_the_rate_alone(family):
    """Catches a rate grid whose two settings differ in more than the peak rate, or a family profile that left the
    proxy's data, geometry or recipe."""
    fast, slow = PROFILES[f"cpu-proxy-n2500-{family}"], PROFILES[f"cpu-proxy-n2500-{family}-lr3e-4"]
    assert (fast.recipe["lr"], slow.recipe["lr"]) == (1e-3, 3e-4)
    assert replace(slow, name=fast.name, recipe=fast.recipe, notes=fast.notes) == fast
    assert fast.architecture == PROXY.architecture and {**fast.recipe, "lr": PROXY.recipe["lr"]} == PROXY.recipe
    assert fast.datasets == PROXY.datasets and (fast.family, fast.model) == ("model", STOCK_MODELS[family])


@pytest.mark.parametrize("family", sorted(STOCK_MODELS))
def test_each_arm_trains_the_stock_model_with_its_init(family, tmp_path):
    """Catches a model-* arm that trains no model (the arm leaves it to the profile), a geometry the model ignores,
    and an init that is refused at the proxy's geometry or does not reach its pattern there."""
    name = f"cpu-proxy-n2500-{family}"
    built, default = _build(name, "model-default", tmp_path)
    assert built == STOCK_MODELS[family] and default.patch_embed.grid_size == (8, 8) and len(default.blocks) == 12
    assert not hasattr(default, "structinit_check")

    _, impulse = _build(name, "model-impulse3", tmp_path)
    uniform = impulse.structinit_check[0]["uniform"]
    assert uniform == pytest.approx(1 / 64, rel=0.05) and len(impulse.structinit_check) == 12
    if family in RELATIVE:  # the pattern written exactly into a bias or rotation
        assert min(block["target_mass"] for block in impulse.structinit_check) > 30 * uniform  # stock: about 1x
        assert min(block["hit_rate"] for block in impulse.structinit_check) > 0.9
    else:  # DeiT-III takes the plain ViT's solve: the same soft pattern as the registered proxy's
        plain = load_model("vit_tiny_impulse3", num_classes=10, model_kwargs=PROXY.architecture).model
        masses = [block["target_mass"] for block in impulse.structinit_check]
        assert masses == pytest.approx([block["target_mass"] for block in plain.structinit_check], rel=0.05)

    _, mimetic = _build(name, "model-mimetic", tmp_path)
    assert mimetic.structinit_settings == {
        "attention_init": "mimetic", "seed": 0, "mlp_init": "default", "control": None,
        "attn_layer_scale_source": "model's own",
    }  # fmt: skip
    qkv = "blocks.0.attn.qkv.weight"
    assert not torch.equal(mimetic.state_dict()[qkv], default.state_dict()[qkv])  # the same draw, then rewritten


@pytest.mark.parametrize("queue", QUEUES, ids=lambda path: path.name)
def test_every_queue_line_names_a_profile_arm_and_dataset_the_harness_takes(queue):
    """Catches a queue line that would fail only when the queue reaches it, hours in: an unknown profile or arm, an arm
    of another family than its profile's (the harness refuses it), a dataset the profile lacks, a seed that is no
    integer."""
    lines = [line.split() for line in queue.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert lines
    for fields in lines:
        assert len(fields) in (4, 5), fields
        profile, seed, arm, _root, *dataset = fields
        assert profile in PROFILES and arm in ALL_ARMS and seed.isdigit(), fields
        assert ALL_ARMS[arm].family == PROFILES[profile].family, fields
        assert not dataset or dataset[0] in PROFILES[profile].datasets, fields


def test_the_issue_56_queue_is_every_run_once_seed_major():
    """Catches a run of the 3 seeds x 2 rates x 3 inits per family left out, doubled, or a seed queued before the
    previous seed's runs."""
    lines = [line.split() for line in (REPO / "study/queues/issue-56.txt").read_text().splitlines()]
    runs = [(int(seed), profile, arm) for profile, seed, arm, *_ in (f for f in lines if f[0] != "#")]
    profiles = [f"cpu-proxy-n2500-{family}{rate}" for family in RELATIVE for rate in ("", "-lr3e-4")]
    arms = ("model-default", "model-impulse3", "model-mimetic")
    assert sorted(runs) == sorted((seed, profile, arm) for seed in range(3) for profile in profiles for arm in arms)
    assert [seed for seed, _, _ in runs] == sorted(seed for seed, _, _ in runs)


@pytest.mark.parametrize("family", sorted(STOCK_MODELS))
def test_the_factorial_cells_start_from_the_gamma_they_name(family, tmp_path):
    """Catches a layer-scale-off profile whose model keeps timm's layer scale (``init_values=None`` is dropped by
    ``timm.create_model``; 0 closes the branches), an attention-scale arm that leaves the scale as built or also opens
    the MLP branch, and a record whose gamma is not the model's."""
    built_as = {"deit3": 1e-6, "relpos": 1e-6, "rope": 1e-5}[family]
    cells = {
        (f"cpu-proxy-n2500-{family}", "model-default"): (built_as, built_as),
        (f"cpu-proxy-n2500-{family}", "model-impulse3-attnls0.1"): (0.1, built_as),
        (f"cpu-proxy-n2500-{family}", "model-impulse3-attnls1"): (1.0, built_as),
        (f"cpu-proxy-n2500-{family}-ls1", "model-impulse3"): (1.0, 1.0),
    }
    for (profile, arm), (attention, mlp) in cells.items():
        name, model = _build(profile, arm, tmp_path)
        assert attention_layer_scale(model) == pytest.approx(attention), (profile, arm)
        mlp_scales = [getattr(block, "gamma_2", None) for block in model.blocks]
        mlp_scales = [s if s is not None else b.ls2.gamma for s, b in zip(mlp_scales, model.blocks, strict=True)]
        assert all(torch.allclose(s, torch.full_like(s, mlp)) for s in mlp_scales), (profile, arm)
        flags = run_settings(PROFILES[profile], MODEL_ARMS[arm], 0, PROXY.datasets["cifar10"], tmp_path).flags()
        record = {"model": name, "model_kwargs": flags["model_kwargs"], "num_classes": 10}
        assert built_layer_scale(record) == pytest.approx(attention), (profile, arm)


def test_the_issue_67_queue_is_the_whole_factorial_once_seed_major():
    """Catches a cell of the factorial left out or doubled, an attention-scale arm queued where every gamma is 1
    already, a layer-scale-off cell queued before the cells as built (the comparison with timm's default as a user
    has it comes first), or a seed queued before the previous seed's runs."""
    lines = [line.split() for line in (REPO / "study/queues/issue-67.txt").read_text().splitlines()]
    runs = [(int(seed), profile, arm) for profile, seed, arm, *_ in (f for f in lines if f[0] != "#")]
    inits = ("model-default", "model-impulse3", "model-mimetic", "model-impulse3-mimeticvo")
    both = "model-impulse3-mimeticvo-attnls1"

    def built(family: str, seed: int) -> tuple[str, ...]:  # the sweep (0.1, 1) on seed 0; then 1, its winner
        sweep = ("model-impulse3-attnls0.1",) * (seed == 0 or family == "deit3") + ("model-impulse3-attnls1",)
        return (*inits, *sweep, *(() if family == "deit3" else (both,)))

    expected = [
        (seed, f"cpu-proxy-n2500-{family}{off}", arm)
        for seed in range(3)
        for family in STOCK_MODELS
        for off, arms in (("", built(family, seed)), ("-ls1", inits))
        for arm in arms
        if not (family == "deit3" and arm == "model-impulse3-mimeticvo")  # its impulse writes mimetic V/O already
    ]
    longer = [(seed, "cpu-proxy-n2500-rope-long", arm) for seed in range(3) for arm in ("model-default", both)]
    assert sorted(runs) == sorted(expected + longer)
    first = [run for run in runs if not run[1].endswith(("-ls1", "-long"))]
    assert runs == first + longer + [run for run in runs if run[1].endswith("-ls1")]  # as built, 50 epochs, then off
    off = [seed for seed, profile, _ in runs if profile.endswith("-ls1")]
    assert [seed for seed, *_ in first] == sorted(seed for seed, *_ in first) and off == sorted(off)


def test_deit3s_impulse_is_its_impulse_with_mimetic_vo(tmp_path):
    """Catches a change of the ViT impulse's default value_init that would make the factorial's skipped DeiT-III "+
    mimetic V/O" cells differ from its impulse cells (they are not run because they are the same model)."""
    _, impulse = _build("cpu-proxy-n2500-deit3", "model-impulse3", tmp_path)
    _, with_vo = _build("cpu-proxy-n2500-deit3", "model-impulse3-mimeticvo", tmp_path)
    _, default = _build("cpu-proxy-n2500-deit3", "model-default", tmp_path)
    proj = "blocks.0.attn.proj.weight"
    assert not torch.equal(impulse.state_dict()[proj], default.state_dict()[proj])
    assert all(torch.equal(value, with_vo.state_dict()[key]) for key, value in impulse.state_dict().items())
