"""transformers integration: config, Auto classes, init-once semantics, outputs, remote code, stock ViT."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import timm
import torch
import torch.nn.functional as F
from reference_attention import recomputed_attention
from safetensors.torch import load_file, save_file
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForImageClassification,
    Trainer,
    TrainingArguments,
    ViTConfig,
    ViTForImageClassification,
)
from without_package import run_without_package

import structinit_hf
from structinit_hf import impulse, init, timm_models
from structinit_hf.hf import StructInitViTConfig, StructInitViTForImageClassification, StructInitViTModel, variants
from structinit_hf.hf import configuration_structinit_vit as configuration

# a tiny impulse ViT: 16 px, patch 2 (8 x 8 grid), 64 wide, 2 heads
TINY = dict(image_size=16, patch_size=2, hidden_size=64, num_attention_heads=2, num_hidden_layers=2, num_labels=4)


@pytest.fixture
def solver_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the impulse solver's calls (init.py calls it as ``impulse.solve_qk``)."""
    calls: list[int] = []
    solve = impulse.solve_qk

    def counted(*args, **kwargs):
        calls.append(1)
        return solve(*args, **kwargs)

    monkeypatch.setattr(impulse, "solve_qk", counted)
    return calls


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k.removeprefix("timm_model."): v for k, v in model.state_dict().items()}


def _assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys()
    different = [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert not different, f"weights differ: {different}"


def test_default_config_is_vit_tiny_impulse3_and_matches_the_package():
    config = StructInitViTConfig()
    assert (config.image_size, config.patch_size, config.hidden_size) == (32, 2, 192)
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_labels) == (12, 3, 10)
    assert (config.class_token, config.pooling, config.position_embedding) == (False, "avg", "sincos")
    assert config.attention_init == "impulse" and config.impulse_kernel_size == 3
    # the remote-code module cannot import the package, so its literal defaults are checked here
    assert init.ImpulseOptions(**config.init_options()) == init.ImpulseOptions()
    assert set(configuration._IMPULSE_FIELDS) == set(init.ImpulseOptions.__dataclass_fields__)
    assert configuration.ATTENTION_INITS == init.INIT_METHODS
    assert configuration.POSITION_EMBEDDINGS == timm_models.POS_EMBEDS
    assert tuple(config.image_mean) == variants.CIFAR10_MEAN and tuple(config.image_std) == variants.CIFAR10_STD
    expected = StructInitViTConfig.from_timm_name("vit_tiny_impulse3").to_dict()
    assert {k: v for k, v in config.to_dict().items()} == expected


def test_every_registered_vit_has_a_config():
    plain_vits = set(timm.list_models(module="timm_models")) - {"convit_tiny_patch2_32"}
    assert plain_vits == set(variants.TIMM_VARIANTS)


def _small(name: str) -> dict:
    """Overrides that keep a registered name cheap to build: one block, a 3 x 3 or 8 x 8 patch grid."""
    overrides = dict(depth=1, img_size=48, embed_dim=96) if name.endswith("_224") else dict(depth=1, img_size=16)
    if variants.TIMM_VARIANTS[name].model_args["attention_init"] != "default":
        overrides["seed"] = 3
    return overrides


@pytest.mark.parametrize("name", sorted(variants.TIMM_VARIANTS))
def test_both_routes_build_identical_initial_weights(name: str):
    """Same torch seed, same config: timm.create_model and AutoModelForImageClassification agree bit for bit."""
    torch.manual_seed(0)
    timm_model = timm.create_model(name, **_small(name))
    torch.manual_seed(0)
    hf_model = AutoModelForImageClassification.from_config(StructInitViTConfig.from_timm_name(name, **_small(name)))
    _assert_same_weights(timm_model, hf_model)
    assert hf_model.config.num_labels == timm_model.num_classes
    assert tuple(hf_model.config.image_mean) == tuple(timm_model.pretrained_cfg["mean"])
    # a fixed sin-cos code stays frozen; the default impulse construction's learned-style code trains, on both routes
    assert hf_model.timm_model.pos_embed.requires_grad == timm_model.pos_embed.requires_grad


@pytest.mark.parametrize("name", sorted(variants.TIMM_VARIANTS))
def test_config_architecture_is_the_registered_one_at_full_width(name: str, tmp_path: Path):
    """The config's full-width network loads strictly into timm's (loading never runs the solver)."""
    config = StructInitViTConfig.from_timm_name(name, depth=1, attention_init="default")
    weights = AutoModelForImageClassification.from_config(config).timm_model.state_dict()
    save_file(weights, tmp_path / "model.safetensors")
    timm_model = timm.create_model(
        name, depth=1, pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / "model.safetensors"))
    )
    assert torch.equal(timm_model.blocks[0].attn.qkv.weight, weights["blocks.0.attn.qkv.weight"])
    assert timm_model.num_classes == config.num_labels


def test_auto_classes_are_registered():
    config = AutoConfig.for_model("structinit_vit", **TINY)
    assert isinstance(config, StructInitViTConfig)
    assert type(AutoModel.from_config(config)) is StructInitViTModel
    assert type(AutoModelForImageClassification.from_config(config)) is StructInitViTForImageClassification


def test_solver_runs_on_construction_only_and_loading_keeps_weights(tmp_path: Path, solver_calls: list[int]):
    config = StructInitViTConfig(**TINY, impulse_kernel_size=5, impulse_per_layer=True)
    model = AutoModelForImageClassification.from_config(config).eval()
    assert len(solver_calls) == 1  # one solve for every block
    assert config.impulse_solver == "shift" and config.impulse_qk_frobenius == 0.0  # the resolved options, recorded
    StructInitViTForImageClassification(config)
    assert len(solver_calls) == 2
    model.save_pretrained(tmp_path)
    assert {"config.json", "model.safetensors"} <= {p.name for p in tmp_path.iterdir()}
    solver_calls.clear()
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path).eval()
    assert solver_calls == []
    _assert_same_weights(model, loaded)
    pixels = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        assert torch.equal(model(pixels).logits, loaded(pixels).logits)
    assert not loaded.timm_model.pos_embed.requires_grad  # the fixed sin-cos code stays frozen after loading
    encoder = AutoModel.from_pretrained(tmp_path)  # the classifier's weights serve the encoder too
    assert solver_calls == [] and type(encoder) is StructInitViTModel
    assert torch.equal(encoder.timm_model.blocks[0].attn.qkv.weight, model.timm_model.blocks[0].attn.qkv.weight)


def test_mimetic_init_runs_on_construction_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls: list[int] = []
    mimetic_qk = init.mimetic_qk
    monkeypatch.setattr(init, "mimetic_qk", lambda *a, **k: calls.append(1) or mimetic_qk(*a, **k))
    model = AutoModelForImageClassification.from_config(StructInitViTConfig(**TINY, attention_init="mimetic"))
    assert len(calls) == TINY["num_hidden_layers"]
    model.save_pretrained(tmp_path)
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path)
    assert len(calls) == TINY["num_hidden_layers"]
    _assert_same_weights(model, loaded)


def test_weights_file_has_timm_keys(tmp_path: Path):
    model = AutoModelForImageClassification.from_config(StructInitViTConfig(**TINY))
    model.save_pretrained(tmp_path)
    assert set(load_file(tmp_path / "model.safetensors")) == set(model.timm_model.state_dict())


def test_forward_outputs_loss_attentions_and_hidden_states():
    model = AutoModelForImageClassification.from_config(StructInitViTConfig(**TINY)).eval()
    pixels, labels = torch.randn(2, 3, 16, 16), torch.tensor([1, 3])
    with torch.no_grad():
        out = model(pixels, labels=labels, output_attentions=True, output_hidden_states=True)
    assert out.logits.shape == (2, 4)
    assert torch.allclose(out.loss, F.cross_entropy(out.logits, labels))
    reference = recomputed_attention(model.timm_model, pixels)
    assert len(out.attentions) == len(reference) == 2
    for got, want in zip(out.attentions, reference, strict=True):
        assert got.shape == (2, 2, 64, 64)
        assert torch.allclose(got, want, atol=1e-5)
    assert len(out.hidden_states) == 3 and out.hidden_states[0].shape == (2, 64, 64)
    assert all(block.attn.fused_attn == timm.layers.use_fused_attn() for block in model.timm_model.blocks)
    with torch.no_grad():
        assert out.loss is not None and model(pixels).attentions is None
    encoder = StructInitViTModel(StructInitViTConfig(**TINY)).eval()
    with torch.no_grad():
        features = encoder(pixels)
    assert features.last_hidden_state.shape == (2, 64, 64) and features.pooler_output.shape == (2, 64)


def test_output_attentions_in_training_are_that_forwards_maps_and_leave_no_hooks():
    """Catches maps read from another forward than the one returned (attention dropout makes every forward's
    maps differ), a reader that switches the model to eval mode, and hooks or unfused attention left behind."""
    config = StructInitViTConfig(**TINY, attn_drop_rate=0.5)
    model = AutoModelForImageClassification.from_config(config).train()
    attn = model.timm_model.blocks[0].attn
    seen = {}
    hook = attn.register_forward_hook(lambda _m, args, out: seen.update(x=args[0], out=out))
    out = model(torch.randn(2, 3, 16, 16), output_attentions=True)
    hook.remove()
    assert model.training
    maps = out.attentions[0]
    assert (maps == 0).any() and maps.max() > 1  # dropout zeroed entries and rescaled the rest by 2
    b, t, c = seen["x"].shape
    v = attn.qkv(seen["x"]).reshape(b, t, 3, attn.num_heads, attn.head_dim)[:, :, 2].transpose(1, 2)
    rebuilt = attn.proj((maps @ v).transpose(1, 2).reshape(b, t, c))  # the block's output from the returned maps
    torch.testing.assert_close(rebuilt, seen["out"])
    for block in model.timm_model.blocks:
        assert not block.attn.attn_drop._forward_hooks and not block.attn.attn_drop._forward_pre_hooks
        assert block.attn.fused_attn == timm.layers.use_fused_attn()


def test_attention_of_a_new_model_peaks_at_the_impulse_targets():
    """The first block's maps, read through output_attentions, follow each head's impulse shift."""
    svd = {f"impulse_{name}": value for name, value in init.SVD_DEFAULTS.items()}  # sharp maps on noise images
    config = StructInitViTConfig(**TINY, impulse_kernel_size=3, init_seed=5, **svd)
    model = AutoModelForImageClassification.from_config(config).eval()
    with torch.no_grad():
        maps = model(torch.randn(4, 3, 16, 16), output_attentions=True).attentions[0]
    shifts = impulse.impulse_shifts(2, 3, seed=5, grid_size=(8, 8))
    fidelity = impulse.target_fidelity(maps, impulse.impulse_targets((8, 8), shifts))
    assert fidelity["hit_rate"] > 0.9, fidelity


def test_trainer_trains_and_saves_with_timm_keys(tmp_path: Path):
    model = AutoModelForImageClassification.from_config(StructInitViTConfig(**TINY))
    generator = torch.Generator().manual_seed(0)
    data = [{"pixel_values": torch.randn(3, 16, 16, generator=generator), "labels": i % 4} for i in range(8)]
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, save_steps=2, report_to=[], use_cpu=True
    )
    before = model.timm_model.head.weight.detach().clone()
    Trainer(model=model, args=args, train_dataset=data).train()
    assert not torch.equal(before, model.timm_model.head.weight)
    checkpoint = tmp_path / "checkpoint-2"
    assert set(load_file(checkpoint / "model.safetensors")) == set(model.timm_model.state_dict())
    _assert_same_weights(model, AutoModelForImageClassification.from_pretrained(checkpoint))


def test_checkpoint_without_package_loads_with_trust_remote_code(tmp_path: Path):
    """A subprocess where structinit_hf cannot be imported loads the folder through the saved modules."""
    folder = tmp_path / "checkpoint"
    model = AutoModelForImageClassification.from_config(StructInitViTConfig(**TINY)).eval()
    model.save_pretrained(folder)
    pixels = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        save_file({"pixels": pixels, "logits": model(pixels).logits}, tmp_path / "io.safetensors")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["structinit_hf"] = None  # not importable in this process
        import torch
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoModel, AutoModelForImageClassification
        io = load_file({str(tmp_path / "io.safetensors")!r})
        model = AutoModelForImageClassification.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        with torch.no_grad():
            assert torch.equal(model(io["pixels"]).logits, io["logits"])
        AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True)
        config = AutoConfig.from_pretrained({str(folder)!r}, trust_remote_code=True)
        try:
            AutoModelForImageClassification.from_config(config, trust_remote_code=True)
        except ImportError as error:
            assert "structinit-hf" in str(error)
        else:
            raise AssertionError("a new model was built without the package")
        print("remote code ok")
        """
    )
    assert "remote code ok" in run_without_package(script, tmp_path)
    assert (tmp_path / "hf_home" / "modules" / "transformers_modules").is_dir()


def _stock_vit_first_layer_maps() -> tuple[torch.Tensor, torch.Tensor]:
    """First-layer maps (B x heads x 65 x 65) of transformers' ViT after impulse init, and the 64 x 64 targets."""
    config = ViTConfig(
        image_size=16,
        patch_size=2,
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=128,
        num_labels=3,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = structinit_hf.apply_structured_init(  # the svd construction: its rows peak on target by design
        ViTForImageClassification(config), "impulse", **{**init.SVD_DEFAULTS, "kernel_size": 3, "seed": 1}
    ).eval()
    with torch.no_grad():
        maps = model(torch.rand(4, 3, 16, 16), output_attentions=True).attentions[0]
    return maps, impulse.impulse_targets((8, 8), impulse.impulse_shifts(2, 3, seed=1, grid_size=(8, 8)))


def test_stock_transformers_vit_gets_impulse_attention_on_patch_tokens():
    """apply_structured_init on transformers' own ViT (q_proj/k_proj, class token at index 0): among the
    patch keys, every patch row of the first layer peaks at its head's impulse target."""
    maps, targets = _stock_vit_first_layer_maps()
    assert maps.shape == (4, 2, 65, 65)
    fidelity = impulse.target_fidelity(maps[:, :, 1:, 1:], targets)
    assert fidelity["hit_rate"] == 1.0, fidelity


def test_stock_transformers_vit_patch_rows_peak_at_targets_over_all_keys():
    """The class token's key is hidden (zero logit): every patch row still peaks at its target."""
    maps, targets = _stock_vit_first_layer_maps()
    with_class_key = torch.cat([torch.zeros(2, 64, 1), targets], dim=-1)  # the class token is key 0
    assert impulse.target_fidelity(maps[:, :, 1:, :], with_class_key)["hit_rate"] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(attention_init="xavier"), "xavier"),
        (dict(image_size=15), "not divisible by patch_size"),
        (dict(hidden_size=190), "hidden_size 190 is not divisible by num_heads / num_attention_heads 3"),
        (dict(impulse_kernel_size=9, image_size=16), "does not fit the 8x8 patch grid"),
        (dict(impulse_kernel_size=4), "odd int"),
        (dict(num_labels=5, id2label={0: "a", 1: "b", 2: "c"}), "num_labels=5"),
        (dict(pooling="token"), "class_token"),
        (dict(position_embedding="rope"), "rope"),
        (dict(impulse_pseudo_input="noise"), "noise"),
        (dict(impulse_value_init="identity"), "unknown value_init 'identity'"),
    ],
)
def test_bad_config_fails_at_config_time(kwargs: dict, match: str):
    with pytest.raises(ValueError, match=match):
        StructInitViTConfig(**kwargs)


def test_from_timm_name_rejects_unknown_names_and_overrides():
    assert StructInitViTConfig.from_timm_name("vit_tiny_impulse5", depth=2, num_classes=3).impulse_kernel_size == 5
    with pytest.raises(ValueError, match="convit_tiny_patch2_32"):
        StructInitViTConfig.from_timm_name("convit_tiny_patch2_32")
    with pytest.raises(ValueError, match="kernal_size"):
        StructInitViTConfig.from_timm_name("vit_tiny_impulse5", kernal_size=3)


def test_bad_checkpoints_get_errors_naming_the_file(tmp_path: Path):
    config = StructInitViTConfig(**TINY)
    config.save_pretrained(tmp_path / "no_weights")
    with pytest.raises(OSError, match="model.safetensors"):
        AutoModelForImageClassification.from_pretrained(tmp_path / "no_weights")
    folder = tmp_path / "wrong_shape"
    AutoModelForImageClassification.from_config(config).save_pretrained(folder)
    weights = load_file(folder / "model.safetensors")
    weights["head.weight"] = torch.zeros(7, 64)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"wrong_shape/model\.safetensors.*head\.weight: \(7, 64\)"):
        AutoModelForImageClassification.from_pretrained(folder)


def test_new_head_on_loaded_weights_gets_timm_init_not_the_solver(tmp_path: Path, solver_calls: list[int]):
    model = AutoModelForImageClassification.from_config(StructInitViTConfig(**TINY))
    model.save_pretrained(tmp_path)
    solver_calls.clear()
    relabelled = AutoModelForImageClassification.from_pretrained(
        tmp_path, id2label={0: "cat", 1: "dog"}, ignore_mismatched_sizes=True
    )
    assert solver_calls == []
    head = relabelled.timm_model.head
    assert head.weight.shape == (2, 64) and torch.all(head.bias == 0)
    assert 0.01 < head.weight.std().item() < 0.03  # timm's truncated normal (std 0.02), not empty memory
    assert torch.equal(relabelled.timm_model.blocks[1].attn.qkv.weight, model.timm_model.blocks[1].attn.qkv.weight)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "structinit_vit" and config["num_classes"] == 4


def test_a_learned_style_position_code_trains_and_stays_trainable_after_loading(tmp_path: Path):
    """Catches the transformers route freezing the code the pinv construction writes (the timm route trains it), or a
    reload that forgets it: the config records the resolved options, and requires_grad follows them."""
    pinv = {f"impulse_{name}": value for name, value in init.PINV_DEFAULTS.items()}
    model = AutoModelForImageClassification.from_config(StructInitViTConfig(**TINY, **pinv))
    assert model.timm_model.pos_embed.requires_grad
    model.save_pretrained(tmp_path)
    assert AutoModelForImageClassification.from_pretrained(tmp_path).timm_model.pos_embed.requires_grad
    v2 = AutoModelForImageClassification.from_config(StructInitViTConfig(**TINY, impulse_preset="v2"))
    assert v2.config.impulse_pseudo_input == "learned" and v2.timm_model.pos_embed.requires_grad  # resolved, recorded
