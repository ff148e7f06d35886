"""The transformers route: transformers' own TimmWrapper classes build, keep, load and train our models."""

from __future__ import annotations

import json
import re
from pathlib import Path

import peft
import pytest
import timm
import torch
from transformers import (
    AutoConfig,
    AutoModelForImageClassification,
    TimmWrapperConfig,
    TimmWrapperForImageClassification,
    TimmWrapperModel,
    Trainer,
    TrainingArguments,
    ViTConfig,
    ViTForImageClassification,
)

import structinit_hf
from structinit_hf import StructInitViTConfig, StructInitViTForImageClassification
from structinit_hf.init import impulse, options
from structinit_hf.models.structinit_vit import default_cfgs

# a tiny network for every name: 16 px, patch 2 (8 x 8 grid), 32 wide, 2 heads, 2 blocks
TINY_ARGS = dict(img_size=16, patch_size=2, embed_dim=32, depth=2, num_heads=2)
OLD_RELEASE = Path(__file__).parent / "data" / "structinit_vit_0.1"


@pytest.fixture
def solver_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the attention init's runs (``apply_structured_init`` as the model class calls it)."""
    calls: list[int] = []
    apply = structinit_hf.models.structinit_vit.apply_structured_init

    def counted(*args, **kwargs):
        calls.append(1)
        return apply(*args, **kwargs)

    monkeypatch.setattr(structinit_hf.models.structinit_vit, "apply_structured_init", counted)
    return calls


def _init_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What the attention init writes: every block's qkv and proj weights and the position code."""
    tensors = {"pos_embed": model.pos_embed}
    for index, block in enumerate(model.blocks):
        tensors[f"{index}.qkv"] = block.attn.qkv.weight
        tensors[f"{index}.proj"] = block.attn.proj.weight
    return tensors


@pytest.mark.parametrize("name", sorted(default_cfgs))
def test_timm_wrapper_from_config_keeps_the_init_of_every_name(name: str):
    """transformers' own route (TimmWrapperConfig + from_config) re-draws every Linear after construction; the
    model's init comes back, equal to timm.create_model's, and its settings say so."""
    attention_init = "default" if name == "vit_tiny_patch2_32" else "mimetic" if "mimetic" in name else "impulse"
    model_args = dict(TINY_ARGS, **({} if attention_init == "default" else {"seed": 3}))
    config = TimmWrapperConfig(architecture=name, model_args=model_args, num_labels=4)
    wrapped = AutoModelForImageClassification.from_config(config).timm_model
    direct = timm.create_model(name, num_classes=4, **model_args)
    assert wrapped.structinit_settings == direct.structinit_settings
    assert wrapped.structinit_settings["attention_init"] == attention_init
    expected = _init_tensors(direct)
    for key, tensor in _init_tensors(wrapped).items():
        if attention_init == "default" and key != "pos_embed":  # timm's random draw: the distribution, not the values
            assert tensor.std().item() == pytest.approx(0.02, rel=0.25), key
        else:
            torch.testing.assert_close(tensor, expected[key], rtol=0, atol=0, msg=key)
    # and not transformers' N(0, 0.02) redraw: timm's trunc normal has no value beyond 2
    assert wrapped.blocks[0].mlp.fc1.weight.abs().max() <= 2.0


def test_structinit_config_is_transformers_timm_wrapper_config():
    config = StructInitViTConfig()
    assert isinstance(config, TimmWrapperConfig) and config.architecture == "vit_tiny_impulse3"
    assert isinstance(AutoConfig.for_model("structinit_vit"), StructInitViTConfig)
    model = AutoModelForImageClassification.from_config(StructInitViTConfig(model_args=TINY_ARGS, num_labels=3))
    assert isinstance(model, StructInitViTForImageClassification)
    assert isinstance(model, TimmWrapperForImageClassification)
    assert model.timm_model.structinit_settings["solver"] == "shift"
    features = TimmWrapperModel(TimmWrapperConfig(architecture="vit_tiny_impulse5", model_args=TINY_ARGS))
    assert features(torch.randn(2, 3, 16, 16)).pooler_output.shape == (2, 32)


def test_from_pretrained_builds_on_meta_never_runs_the_init_and_keeps_weights(tmp_path: Path, solver_calls: list[int]):
    model = AutoModelForImageClassification.from_config(
        TimmWrapperConfig(architecture="vit_tiny_impulse3", model_args=TINY_ARGS, num_labels=3)
    )
    assert len(solver_calls) == 2  # timm's construction, then again after transformers' re-draw
    model.save_pretrained(tmp_path)
    solver_calls.clear()
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path)
    assert solver_calls == []
    assert loaded.timm_model.structinit_settings is None  # loaded, not initialized
    for key, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0, msg=key)


def test_new_head_on_loaded_weights_is_initialized_and_the_rest_is_kept(tmp_path: Path, solver_calls: list[int]):
    model = AutoModelForImageClassification.from_config(StructInitViTConfig(model_args=TINY_ARGS, num_labels=3))
    model.save_pretrained(tmp_path)
    solver_calls.clear()
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path, num_labels=5, ignore_mismatched_sizes=True)
    assert solver_calls == [] and loaded.timm_model.head.weight.shape == (5, 32)
    assert torch.isfinite(loaded.timm_model.head.weight).all() and loaded.timm_model.head.weight.abs().sum() > 0
    torch.testing.assert_close(loaded.timm_model.blocks[1].attn.qkv.weight, model.timm_model.blocks[1].attn.qkv.weight)


def test_previous_release_folder_loads_with_its_logits():
    """A folder written by 0.1 (model_type structinit_vit, made by that release's code) loads and predicts as
    it did then, through transformers and through timm."""
    expected = json.loads((OLD_RELEASE / "expected_logits.json").read_text())
    images = torch.linspace(-1, 1, 2 * 3 * 8 * 8).reshape(2, 3, 8, 8)
    model = AutoModelForImageClassification.from_pretrained(OLD_RELEASE).eval()
    assert isinstance(model, StructInitViTForImageClassification)
    assert model.config.id2label == {0: "cat", 1: "dog", 2: "bird"}
    with torch.no_grad():
        torch.testing.assert_close(model(images).logits, torch.tensor(expected["logits"]), rtol=0, atol=1e-6)
        timm_model = timm.create_model(f"local-dir:{OLD_RELEASE}", pretrained=True).eval()
        torch.testing.assert_close(timm_model(images), torch.tensor(expected["logits"]), rtol=0, atol=1e-6)


# 0.1's way of asking for a model: its config fields, here at TINY_ARGS' geometry
RELEASE_0_1_GEOMETRY = dict(image_size=16, patch_size=2, hidden_size=32, num_hidden_layers=2, num_attention_heads=2)


@pytest.mark.parametrize(
    ("fields", "name", "options"),
    [
        (dict(attention_init="impulse", impulse_kernel_size=5, init_seed=4), "vit_tiny_impulse5", dict(seed=4)),
        (
            dict(attention_init="impulse", impulse_kernel_size=5, impulse_solver="svd"),
            "vit_tiny_impulse5",
            dict(solver="svd"),  # "pinv" alone, on the sin-cos code at this width, reaches no pattern: refused
        ),
        (dict(attention_init="mimetic", init_seed=1), "vit_tiny_mimetic", dict(seed=1)),
        (dict(attention_init="default"), "vit_tiny_patch2_32", {}),
    ],
)
def test_the_0_1_config_fields_build_the_model_they_name(fields, name, options):
    """Catches 0.1's ``StructInitViTConfig(attention_init="impulse", impulse_kernel_size=5)`` silently building the
    default 3x3 impulse model: its fields build what timm builds for the registered name and keywords they mean."""
    config = StructInitViTConfig(**fields, **RELEASE_0_1_GEOMETRY, num_labels=3)
    assert config.architecture == name
    model = AutoModelForImageClassification.from_config(config).timm_model
    expected = timm.create_model(name, **TINY_ARGS, **options, num_classes=3)
    assert model.structinit_settings == expected.structinit_settings
    for key, value in _init_tensors(expected).items():
        if name != "vit_tiny_patch2_32" or key == "pos_embed":  # timm's default init is a random draw
            torch.testing.assert_close(_init_tensors(model)[key], value, rtol=0, atol=0, msg=key)


def test_a_0_1_field_that_contradicts_model_args_is_refused():
    with pytest.raises(
        ValueError,
        match=r"impulse_kernel_size=5 \(0.1's name for the timm keyword 'kernel_size'\) "
        r"contradicts model_args kernel_size=3; pass model_args alone",
    ):
        StructInitViTConfig(impulse_kernel_size=5, model_args=dict(TINY_ARGS, kernel_size=3))


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        (dict(attention_init="mimetic"), "attention_init='mimetic' contradicts architecture='vit_tiny_impulse3', which "
         "sets attention_init='impulse'; pass an architecture that builds it (the ViT-Tiny: 'vit_tiny_mimetic') or "
         "leave attention_init out"),
        (dict(impulse_kernel_size=5), "impulse_kernel_size=5 contradicts architecture='vit_tiny_impulse3', which sets "
         "kernel_size=3; pass an architecture that builds it (the ViT-Tiny: 'vit_tiny_impulse5')"),
    ],
)  # fmt: skip
def test_a_0_1_init_field_that_contradicts_the_architecture_given_is_refused(fields, refusal):
    """Catches an architecture given beside 0.1's init fields that is silently replaced (vit_tiny_impulse3 with
    attention_init="mimetic" built vit_tiny_mimetic) or built with another init (impulse_kernel_size=5 gave a 5x5 init
    under the 3x3 name); the same fields without an architecture still name the model, and fields that agree pass."""
    with pytest.raises(ValueError, match="^StructInitViTConfig: " + re.escape(refusal)):
        StructInitViTConfig(architecture="vit_tiny_impulse3", **fields, model_args=TINY_ARGS)
    assert StructInitViTConfig(**fields).architecture == refusal.split("ViT-Tiny: '")[1].split("'")[0]
    agreeing = StructInitViTConfig(architecture="vit_tiny_impulse3", attention_init="impulse", impulse_kernel_size=3)
    assert (agreeing.architecture, agreeing.model_args) == (
        "vit_tiny_impulse3",
        {"attention_init": "impulse", "kernel_size": 3},
    )


def test_a_0_1_folder_keeps_its_fields_as_the_record_of_its_init():
    """0.1's saved folders name a stock architecture with the model_args of the weights: its fields (hidden_size 16,
    impulse_kernel_size 3 ...) describe the init the weights started from, and change nothing that loads."""
    config = AutoConfig.from_pretrained(OLD_RELEASE)
    assert (config.architecture, config.model_args["embed_dim"]) == ("vit_base_patch16_224", 16)
    assert (config.attention_init, config.impulse_kernel_size, config.hidden_size) == ("impulse", 3, 16)


@pytest.mark.slow
def test_trainer_trains_and_its_checkpoint_reloads(tmp_path: Path):
    model = AutoModelForImageClassification.from_config(StructInitViTConfig(model_args=TINY_ARGS, num_labels=4))
    generator = torch.Generator().manual_seed(0)
    data = [{"pixel_values": torch.randn(3, 16, 16, generator=generator), "labels": i % 4} for i in range(8)]
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, save_steps=2, report_to=[], use_cpu=True
    )
    before = model.timm_model.blocks[0].attn.qkv.weight.detach().clone()
    Trainer(model=model, args=args, train_dataset=data).train()
    assert not torch.equal(before, model.timm_model.blocks[0].attn.qkv.weight)
    reloaded = AutoModelForImageClassification.from_pretrained(tmp_path / "checkpoint-2")
    for key, value in model.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[key], value, rtol=0, atol=0, msg=key)


def test_gradient_checkpointing_is_reported_as_it_is():
    model = AutoModelForImageClassification.from_config(StructInitViTConfig(model_args=TINY_ARGS, num_labels=2))
    assert model.supports_gradient_checkpointing and not model.is_activation_checkpointing
    model.activation_checkpointing_enable()
    assert model.timm_model.grad_checkpointing and model.is_activation_checkpointing
    model.activation_checkpointing_disable()
    assert not model.timm_model.grad_checkpointing and not model.is_activation_checkpointing


@pytest.mark.slow
def test_lora_on_qkv_trains_and_saves_and_loads(tmp_path: Path):
    """PEFT's LoRA on every block's fused qkv: only the adapters train, and the adapter round-trips."""
    config = StructInitViTConfig(model_args=TINY_ARGS, num_labels=3)
    base = AutoModelForImageClassification.from_config(config)
    base.save_pretrained(tmp_path / "base")
    frozen_qkv = base.timm_model.blocks[0].attn.qkv.weight.detach().clone()
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=["qkv"], modules_to_save=["head"]))
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name or "head" in name for name in trainable)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    images, labels = torch.randn(8, 3, 16, 16), torch.arange(8) % 3
    losses = []
    for _ in range(5):
        loss = model(pixel_values=images, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    torch.testing.assert_close(base.timm_model.blocks[0].attn.qkv.base_layer.weight, frozen_qkv, rtol=0, atol=0)
    model.save_pretrained(tmp_path / "adapter")
    model.eval()
    with torch.no_grad():
        expected = model(pixel_values=images).logits
    base_again = AutoModelForImageClassification.from_pretrained(tmp_path / "base")
    reloaded = peft.PeftModel.from_pretrained(base_again, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(pixel_values=images).logits, expected)


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
        ViTForImageClassification(config), "impulse", **{**options.SVD_DEFAULTS, "kernel_size": 3, "seed": 1}
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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_from_config_in_half_precision_keeps_the_init(dtype: torch.dtype):
    """from_config(dtype=...) builds under that default dtype; the init computes in float32 and the model holds its
    values in ``dtype``."""
    config = StructInitViTConfig(architecture="vit_tiny_impulse3", model_args=dict(TINY_ARGS, seed=3), num_labels=4)
    model = AutoModelForImageClassification.from_config(config, dtype=dtype).timm_model
    reference = timm.create_model("vit_tiny_impulse3", num_classes=4, **TINY_ARGS, seed=3)
    assert model.structinit_settings == reference.structinit_settings
    for key, tensor in _init_tensors(model).items():
        if key.endswith("qkv") or key == "pos_embed":
            assert tensor.dtype == dtype, key
            torch.testing.assert_close(tensor, _init_tensors(reference)[key].to(dtype), rtol=0, atol=0, msg=key)
    assert torch.get_default_dtype() == torch.float32
