"""Structured init beyond the plain ViT: timm's SwinTransformer (impulse in the relative position bias, mimetic) and
MlpMixer (token MLP as a shift; ResMLP, gMLP, gMixer), through apply_structured_init and the registered names."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
import timm
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from timm.layers import GatedMlp, GluMlp
from timm.models.mlp_mixer import Affine, MlpMixer, ResBlock, SpatialGatingBlock
from torch import nn
from transformers import AutoModelForImageClassification, TimmWrapperConfig

import structinit_hf
from structinit_hf import apply_structured_init
from structinit_hf.benchmark.attention import swin_target_mass
from structinit_hf.init import token_mixing
from structinit_hf.init.impulse import impulse_shifts

SWIN = dict(img_size=16, patch_size=2, window_size=4, embed_dim=24, depths=(2, 2), num_heads=(3, 6))
MIXER = dict(img_size=16, patch_size=2, num_blocks=2, embed_dim=64, mlp_ratio=(2.0, 4.0))  # 64 tokens, 128 hidden
SWIN_NAMES = [
    "swin_tiny_patch2_window4_32",
    "swin_tiny_impulse3_patch2_window4_32",
    "swin_tiny_mimetic_patch2_window4_32",
]
MIXER_NAMES = ["mixer_s4_32", "mixer_s4_impulse3_32"]


def _tiny(name: str, **kwargs) -> torch.nn.Module:
    return timm.create_model(name, **(SWIN if name.startswith("swin") else MIXER), **kwargs)


def test_swin_bias_impulse_puts_the_sharpness_on_every_reachable_target() -> None:
    """Catches a bias written at the wrong offset (timm indexes query minus key) or with the wrong logit: on images,
    every head's attention peaks on its target wherever the window holds it, with the mass sharpness asks for."""
    torch.manual_seed(0)
    model = _tiny("swin_tiny_impulse3_patch2_window4_32", sharpness=0.8)
    rows = swin_target_mass(model, torch.randn(4, 3, 16, 16))
    assert len(rows) == 4
    for row in rows:
        assert row["hit_rate"] == 1.0
        assert 0.78 < row["target_mass"] < 0.95  # 0.8 in a full window, more where a mask removes keys
        assert 0.3 < row["reachable"] <= 1.0
    timm_default = _tiny("swin_tiny_patch2_window4_32")
    timm_default.structinit_shifts = model.structinit_shifts
    assert max(row["target_mass"] for row in swin_target_mass(timm_default, torch.randn(4, 3, 16, 16))) < 0.2


def test_relative_bias_table_holds_the_logit_at_each_heads_offset() -> None:
    shifts = torch.tensor([[0, 0], [-1, 1], [3, -3]])  # the last clipped to the 3x3 window's offsets (+-2)
    table = token_mixing.relative_bias_impulse(3, shifts, 5.0)
    assert table.shape == (25, 3) and (table != 0).sum() == 3
    assert table[12, 0] == 5.0  # (dy, dx) = (0, 0): the table's centre
    assert table[(2 + 1) * 5 + (2 - 1), 1] == 5.0  # query minus key = (1, -1)
    assert table[0 * 5 + 4, 2] == 5.0  # clipped to (2, -2): query minus key = (-2, 2)


def test_swin_init_is_seeded_and_the_record_says_what_ran() -> None:
    torch.manual_seed(0)
    a = _tiny("swin_tiny_impulse3_patch2_window4_32", seed=3)
    torch.manual_seed(1)
    b = _tiny("swin_tiny_impulse3_patch2_window4_32", seed=3)
    c = _tiny("swin_tiny_impulse3_patch2_window4_32", seed=4)
    tables = [[m.relative_position_bias_table for m in model.modules() if hasattr(m, "relative_position_bias_table")]
              for model in (a, b, c)]  # fmt: skip
    assert all(torch.equal(x, y) for x, y in zip(tables[0], tables[1], strict=True))  # the global RNG plays no part
    assert not all(torch.equal(x, y) for x, y in zip(tables[0], tables[2], strict=True))
    settings = dict(a.structinit_settings)
    shifts = settings.pop("shifts")
    assert [len(block) for block in shifts] == [3, 3, 6, 6]
    assert shifts[0] == impulse_shifts(3, 3, 3).tolist()  # block i draws with seed + i
    assert settings == {
        "attention_init": "impulse", "family": "swin", "kernel_size": 3, "seed": 3, "sharpness": 0.7,
        "per_layer": True, "shift_order": "random", "value_init": "default", "attn_layer_scale": None, "control": None,
        "mlp_init": "default",
    }  # fmt: skip
    mimetic = _tiny("swin_tiny_mimetic_patch2_window4_32", seed=2)
    assert mimetic.structinit_settings == {"attention_init": "mimetic", "seed": 2, "mlp_init": "default", "control": None}
    vo = _tiny("swin_tiny_impulse3_patch2_window4_32", value_init="mimetic")
    assert not torch.equal(vo.layers[0].blocks[0].attn.proj.weight, a.layers[0].blocks[0].attn.proj.weight)


@pytest.mark.parametrize(
    "hidden, construction, bound", [(128, "pairs", 1e-5), (128, "auto", 1e-5), (64, "offset", 0.06)]
)
def test_mixer_token_mlp_acts_as_its_shift(hidden: int, construction: str, bound: float) -> None:
    """Catches a token MLP that drifts from the shift: relative error on LayerNorm'd token rows, exact with GELU
    pairs at hidden >= 2 N, within 6% with the offset construction at hidden = N."""
    target = token_mixing.shift_mixing((8, 8), torch.tensor([[1, -1]]))
    fc1, b1, fc2, b2 = token_mixing.token_mlp_weights(target, hidden, construction)
    x = F.layer_norm(torch.randn(32, 64, 48), (48,)).transpose(1, 2)  # channels x tokens, as mlp_tokens sees it
    y = F.gelu(x @ fc1.T + b1) @ fc2.T + b2
    expected = x @ target.T
    assert ((y - expected).norm() / expected.norm()).item() < bound


@pytest.mark.parametrize(
    "name, kwargs",
    [  # timm's own builders fix the width and depth: its class, as resmlp_12_224, gmlp_ti16_224 ... build it, tiny
        ("mixer", dict(embed_dim=128)),
        ("resmlp", dict(embed_dim=32, mlp_ratio=4, block_layer=ResBlock, norm_layer=Affine)),
        ("gmlp", dict(embed_dim=32, mlp_ratio=6, block_layer=SpatialGatingBlock, mlp_layer=GatedMlp)),
        ("gmixer", dict(embed_dim=64, mlp_ratio=(1.0, 4.0), mlp_layer=GluMlp, act_layer=nn.SiLU)),
    ],
)
def test_every_timm_token_mixer_starts_as_its_shift(name: str, kwargs: dict) -> None:
    """Mixer's MLP (pairs), ResMLP's and gMLP's single linear maps and gMixer's gated MLP: each block's token mixer
    equals the recorded shift exactly at init (stock timm models through apply_structured_init)."""
    network = MlpMixer(num_classes=3, img_size=64, patch_size=16, num_blocks=2, **kwargs)
    model = apply_structured_init(network, "impulse", seed=2, num_shifts=2)
    grid = model.stem.grid_size
    x = F.layer_norm(torch.randn(3, grid[0] * grid[1], model.embed_dim), (model.embed_dim,)).transpose(1, 2)
    for block, shifts in zip(model.blocks, model.structinit_shifts, strict=True):
        mixer = getattr(block, "mlp_tokens", None) or getattr(block, "linear_tokens", None)
        mixer = mixer or block.mlp_channels.gate.proj
        expected = x @ token_mixing.shift_mixing(grid, torch.tensor(shifts)).T
        torch.testing.assert_close(mixer(x), expected, atol=1e-5, rtol=1e-4)


def test_mixer_record_options_and_errors() -> None:
    model = _tiny("mixer_s4_impulse3_32", seed=5, kernel_size=5)
    settings = dict(model.structinit_settings)
    assert len(settings.pop("shifts")) == 2
    assert settings == {
        "attention_init": "impulse", "family": "mixer", "kernel_size": 5, "seed": 5, "num_shifts": 1,
        "per_layer": True, "shift_order": "random", "token_mlp": "auto", "control": None,
    }  # fmt: skip
    with pytest.raises(ValueError, match="init method 'mimetic' does not apply to a mixer model"):
        apply_structured_init(_tiny("mixer_s4_32"), "mimetic")
    with pytest.raises(TypeError, match="unexpected keyword argument 'solver'"):  # a ViT option
        _tiny("mixer_s4_impulse3_32", solver="svd")
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_shifts'"):  # a Mixer option
        _tiny("swin_tiny_impulse3_patch2_window4_32", num_shifts=2)
    with pytest.raises(ValueError, match="unknown token_mlp 'linear'"):
        _tiny("mixer_s4_impulse3_32", token_mlp="linear")
    with pytest.raises(ValueError, match="kernel_size 9 does not fit the 8x8 patch grid"):
        _tiny("mixer_s4_impulse3_32", kernel_size=9)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["swin_tiny_impulse3_patch2_window4_32", "swin_tiny_mimetic_patch2_window4_32",
                                  "mixer_s4_impulse3_32"])  # fmt: skip
def test_half_precision_builds_write_the_float32_init_rounded(name: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    reference = _tiny(name)
    torch.set_default_dtype(dtype)
    try:
        torch.manual_seed(0)
        model = _tiny(name)
        assert torch.get_default_dtype() == dtype
    finally:
        torch.set_default_dtype(torch.float32)
    written = "layers.0.blocks.1.attn.qkv.weight" if name.startswith("swin") else "blocks.1.mlp_tokens.fc1.weight"
    if "impulse3_patch" in name:
        written = "layers.1.blocks.1.attn.relative_position_bias_table"
    state, expected = model.state_dict()[written], reference.state_dict()[written]
    assert state.dtype == dtype
    torch.testing.assert_close(state, expected.to(dtype), rtol=0, atol=0)
    cast = _tiny(name, dtype=dtype)
    assert cast(torch.randn(1, 3, 16, 16, dtype=dtype)).dtype == dtype


@pytest.mark.parametrize("name", [*SWIN_NAMES, *MIXER_NAMES])
def test_meta_device_features_only_and_gradients(name: str) -> None:
    with torch.device("meta"):
        skeleton = _tiny(name)
    assert skeleton.structinit_settings is None
    assert _tiny(name, device="meta").head.fc.weight.is_meta if name.startswith("swin") else True
    features = _tiny(name, features_only=True, **({} if name.startswith("swin") else {"out_indices": (1,)}))
    shapes = [tuple(f.shape) for f in features(torch.randn(2, 3, 16, 16))]
    assert shapes == ([(2, 8, 8, 24), (2, 4, 4, 48)] if name.startswith("swin") else [(2, 64, 8, 8)])
    model = _tiny(name, num_classes=3)
    model(torch.randn(2, 3, 16, 16)).sum().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def _stock_build_seconds(name: str, stock: str, **kwargs) -> tuple[float, float]:
    """The faster of two builds of ``name`` and of the stock timm name with the same geometry."""
    times = {}
    for key in (name, stock):
        best = float("inf")
        for _ in range(2):
            start = time.perf_counter()
            timm.create_model(key, **kwargs)
            best = min(best, time.perf_counter() - start)
        times[key] = best
    return times[name], times[stock]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, stock, kwargs",
    [
        ("swin_tiny_impulse3_patch4_window7_224", "swin_tiny_patch4_window7_224", {}),
        ("swin_tiny_mimetic_patch4_window7_224", "swin_tiny_patch4_window7_224", {}),
        ("mixer_s16_impulse3_224", "mixer_s16_224", {}),
        ("swin_tiny_impulse3_patch2_window4_32", "swin_tiny_patch4_window7_224", dict(img_size=32, patch_size=2,
                                                                                      window_size=4)),
        ("mixer_s4_impulse3_32", "mixer_s16_224", dict(img_size=32)),
    ],
)  # fmt: skip
def test_build_time_stays_within_the_bar(name: str, stock: str, kwargs: dict) -> None:
    """At most 8x the stock timm build, or 0.5 s more (the bar the ViT names meet)."""
    ours, theirs = _stock_build_seconds(name, stock, **kwargs)
    assert ours <= max(8 * theirs, theirs + 0.5), f"{name} {ours:.2f} s against {stock} {theirs:.2f} s"


@pytest.mark.parametrize("name", ["swin_tiny_impulse3_patch2_window4_32", "mixer_s4_impulse3_32"])
def test_saved_folder_loads_in_timm_and_transformers_with_stock_keys(tmp_path: Path, name: str) -> None:
    model = _tiny(name, num_classes=3).eval()
    folder = structinit_hf.save_checkpoint(model, tmp_path / "final")
    config = json.loads((folder / "config.json").read_text())
    state = load_file(folder / "model.safetensors")
    assert set(state) == set(model.state_dict())
    assert config["model_type"] == "timm_wrapper" and config["structinit"] == model.structinit_settings
    pixels = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = model(pixels)
        assert torch.equal(timm.create_model(f"local-dir:{folder}", pretrained=True).eval()(pixels), expected)
        assert torch.equal(AutoModelForImageClassification.from_pretrained(folder).eval()(pixels).logits, expected)
    if name.startswith("swin"):
        assert config["architecture"] == "swin_tiny_patch4_window7_224"
        assert timm.models.model_entrypoint(config["architecture"]).__module__ == "timm.models.swin_transformer"
    else:  # timm's Mixer builders fix patch, depth and width: other geometries are named by this package's control
        assert config["architecture"] == "mixer_s4_32"
        stock = MlpMixer(num_classes=3, **config["model_args"]).eval()  # stock timm's class, stock keys
        stock.load_state_dict(state)
        assert torch.equal(stock(pixels), expected)


def test_a_stock_geometry_mixer_exports_under_timms_name(tmp_path: Path) -> None:
    model = timm.create_model("mixer_s16_impulse3_224", img_size=64, num_classes=2)
    config = structinit_hf.models.timm_wrapper.stock_timm_config(model)
    assert config.architecture == "mixer_s16_224" and config.model_args["img_size"] == 64
    assert not {"patch_size", "num_blocks", "embed_dim", "attention_init", "kernel_size"} & set(config.model_args)
    stock = timm.create_model(config.architecture, num_classes=2, **config.model_args)
    stock.load_state_dict(model.state_dict())


@pytest.mark.parametrize("name", ["swin_tiny_impulse3_patch2_window4_32", "swin_tiny_mimetic_patch2_window4_32",
                                  "mixer_s4_impulse3_32"])  # fmt: skip
def test_timm_wrapper_from_config_keeps_the_init(name: str) -> None:
    """transformers re-draws every Linear after construction; the model's own init comes back, as timm builds it."""
    args = dict(SWIN if name.startswith("swin") else MIXER, seed=3)
    wrapped = AutoModelForImageClassification.from_config(
        TimmWrapperConfig(architecture=name, model_args=args, num_labels=4)
    ).timm_model
    direct = timm.create_model(name, num_classes=4, **args)
    assert wrapped.structinit_settings == direct.structinit_settings
    part = "mlp_tokens" if "mixer" in name else "attn.qkv" if "mimetic" in name else "relative_position_bias_table"
    for key in [k for k in direct.state_dict() if part in k]:
        torch.testing.assert_close(wrapped.state_dict()[key], direct.state_dict()[key], rtol=0, atol=0, msg=key)


@pytest.mark.slow  # builds each Swin and Mixer name four times
def test_the_device_check_passes_on_the_cpu(tmp_path: Path, script_in_process) -> None:
    """``study/device_init_check.py``, which a GPU loan runs for issue 45, passes on the CPU with small Swin, Mixer
    and ViT models: each init is seeded apart from the global RNG, its bfloat16 build is its float32 one rounded."""
    out = tmp_path / "check.md"
    done = script_in_process("study/device_init_check", ["--device", "cpu", "--tiny", "--out", str(out)])
    assert done.returncode == 0, done.stdout
    rows = [line for line in out.read_text().splitlines() if line.startswith(("| swin", "| mixer", "| vit"))]
    assert len(rows) == 8 and all(row.endswith("| True |") and "| equal |" in row for row in rows), rows
    assert "target mass 0.7" in rows[0] and "relative error from its shift" in rows[-3]


@pytest.mark.parametrize(
    "name, method",
    [("vit_tiny_patch16_224", "impulse"), ("vit_tiny_patch16_224", "mimetic"), (SWIN_NAMES[0], "impulse"),
     (SWIN_NAMES[0], "mimetic"), (MIXER_NAMES[0], "impulse")],
)  # fmt: skip
def test_the_init_computes_on_the_cpu_whatever_the_default_device(name: str, method: str) -> None:
    """Catches an init that makes its tensors on the caller's default device: its seeded generator is a CPU one, so
    under ``with torch.device("cuda")`` (how a user builds on a GPU) a draw would fail. Here the model is on the CPU
    and the default device is ``meta``: the init must write what it writes with no default device set."""
    vit = dict(depth=2, img_size=16, patch_size=2)
    model = timm.create_model(name, **vit) if name.startswith("vit") else _tiny(name)
    expected = apply_structured_init(copy.deepcopy(model), method, seed=0).state_dict()
    with torch.device("meta"):
        written = apply_structured_init(model, method, seed=0).state_dict()
    for key, value in expected.items():
        torch.testing.assert_close(written[key], value, rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("method", ["impulse", "mimetic"])
def test_a_model_partly_on_meta_gets_the_init_on_its_other_parameters(method: str) -> None:
    """Catches the init following a meta parameter onto meta (an offloaded head, say): the CPU parameters must get
    the values a whole CPU model gets, and the meta ones nothing."""
    model = timm.create_model("vit_tiny_patch16_224", depth=2, img_size=16, patch_size=2)
    expected = apply_structured_init(copy.deepcopy(model), method, seed=0).state_dict()
    model.head.to("meta")
    written = apply_structured_init(model, method, seed=0).state_dict()
    assert written["head.weight"].is_meta
    for key, value in expected.items():
        if not key.startswith("head."):
            torch.testing.assert_close(written[key], value, rtol=0, atol=0, msg=key)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("vit_tiny_impulse3", dict(img_size=16, patch_size=4, depth=2)),
        ("swin_tiny_impulse3_patch2_window4_32", SWIN),
        ("mixer_s4_impulse3_32", MIXER),
    ],  # fmt: skip
    ids=["vit", "swin", "mixer"],
)
def test_timms_buffer_reinit_after_a_load_or_training_keeps_the_weights(name: str, args: dict) -> None:
    """Catches the hook transformers calls after re-drawing the layers (``init_non_persistent_buffers``) running the
    init again when timm calls it: ``reinit_non_persistent_buffers``, the last step of timm's meta-device load and
    what timm says to run after a load or a move, wiped every loaded or trained weight."""
    from timm.models._manipulate import reinit_non_persistent_buffers

    def trained(model: nn.Module) -> nn.Module:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.25)  # weights no init draws
        return model

    source = trained(timm.create_model(name, num_classes=3, **args))
    loaded = timm.create_model(name, num_classes=3, **args)
    loaded.load_state_dict(source.state_dict())
    with torch.device("meta"):
        skeleton = timm.create_model(name, num_classes=3, **args)
    skeleton.to_empty(device="cpu").load_state_dict(source.state_dict())
    wrapped = trained(
        AutoModelForImageClassification.from_config(
            TimmWrapperConfig(architecture=name, model_args=args, num_labels=3)
        ).timm_model
    )
    kept = copy.deepcopy(wrapped.state_dict())
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = source.eval()(images)
        for model, weights in ((source, source.state_dict()), (loaded, source.state_dict()),
                               (skeleton, source.state_dict()), (wrapped, kept)):  # fmt: skip
            weights = {key: value.clone() for key, value in weights.items()}
            assert reinit_non_persistent_buffers(model)  # timm found the hook
            for key, value in weights.items():
                assert torch.equal(model.state_dict()[key], value), key
        torch.testing.assert_close(skeleton.eval()(images), expected, rtol=0, atol=0)  # its index buffers rebuilt
