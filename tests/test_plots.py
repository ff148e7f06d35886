"""Attention pictures and ConViT's non-locality, on tiny models and real CIFAR-10 images."""

from __future__ import annotations

import math

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from reference_attention import recomputed_attention
from timm.models.convit import GPSA

import structinit_hf  # noqa: F401  (registers the models)
from structinit_hf.benchmark import plots
from structinit_hf.benchmark.attention import patch_attention_maps
from structinit_hf.benchmark.plots import (
    attention_distance,
    default_blocks,
    draw_attention_pictures,
    load_images,
    nonlocality,
    plot_attention_figure,
    plot_nonlocality,
)
from structinit_hf.models.timm_wrapper import save_checkpoint

TINY = {"img_size": 16, "patch_size": 4}


def test_attention_distance_measures_patch_units() -> None:
    eye = torch.eye(6).expand(2, 3, 6, 6)  # a 2 x 3 grid attending to itself
    assert attention_distance(eye, (2, 3)) == pytest.approx(0.0)
    right = torch.zeros(1, 1, 6, 6)
    for row in range(2):
        for col in range(3):
            right[0, 0, 3 * row + col, 3 * row + (col + 1) % 3] = 1.0  # wraps: the last column looks 2 to the left
    assert attention_distance(right, (2, 3)) == pytest.approx((4 * 1 + 2 * 2) / 6)
    uniform = torch.full((1, 1, 4, 4), 0.25)
    assert attention_distance(uniform, (2, 2)) == pytest.approx((0 + 1 + 1 + math.sqrt(2)) / 4)
    with pytest.raises(ValueError, match="3 x 3 patch grid"):
        attention_distance(uniform, (3, 3))


def test_convit_maps_mix_positional_and_content_attention_then_drop_the_class_token() -> None:
    model = timm.create_model("convit_tiny_patch2_32", depth=3, local_up_to_layer=2, **TINY)
    images = torch.randn(2, 3, 16, 16)
    maps = patch_attention_maps(model, images)
    assert [tuple(m.shape) for m in maps] == [(2, 4, 16, 16)] * 3
    assert torch.allclose(maps[0].sum(-1), torch.ones(2, 4, 16))  # GPSA: the gated mixture is a distribution
    assert (maps[2].sum(-1) < 1).all()  # MHSA: the share given to the class token is left out
    gpsa = model.blocks[0].attn
    assert isinstance(gpsa, GPSA)
    with torch.no_grad():
        x = model.blocks[0].norm1(model.patch_embed(images) + model.pos_embed)
        assert torch.allclose(maps[0], gpsa.get_attention(x), atol=1e-6)
    distances = nonlocality(model, images)
    assert max(distances[:2]) < distances[2]  # local GPSA at init, then content attention over the whole grid


@pytest.fixture
def drawn(monkeypatch) -> list:
    """The matplotlib figures the plotting functions save (their panels are checked, not only the PNG)."""
    figures = []
    save = plots.save_figure

    def keep(fig, path):
        figures.append(fig)
        return save(fig, path)

    monkeypatch.setattr(plots, "save_figure", keep)
    return figures


@pytest.mark.slow
def test_attention_figure_shows_the_chosen_head_blocks_and_centre_query(tmp_path, drawn) -> None:
    """Catches panels that show another head, block or model than asked, a map not averaged over the images,
    a corner that is not the first two patch rows, a centre query off the centre, or rows and columns swapped;
    each panel's pixels are compared with maps recomputed from the blocks' ``qkv`` weights."""
    torch.manual_seed(0)
    models = {
        "impulse": timm.create_model("vit_tiny_impulse3", depth=2, **TINY),  # 4 x 4 patch grid, 3 heads
        "default": timm.create_model("vit_tiny_patch2_32", depth=2, **TINY),
    }
    images = [torch.randn(3, 3, 16, 16), torch.randn(3, 3, 16, 16)]
    path = plot_attention_figure(models, images, tmp_path / "a.png", blocks=(2, 1), head=1)
    fig = drawn[-1]
    panels = [axis.images[0].get_array().data for axis in fig.axes]
    assert len(panels) == 2 * 2 * 3  # 2 models x 2 blocks x (full map, corner, centre query)
    for r, (model, batch) in enumerate(zip(models.values(), images, strict=True)):
        reference = recomputed_attention(model.eval(), batch)
        for i, block in enumerate((2, 1)):
            full = reference[block - 1][:, 1].mean(0).numpy()
            centre_query = full[2 * 4 + 2].reshape(4, 4)  # patch (2, 2) of the 4 x 4 grid
            for j, expected in enumerate((full, full[:8, :8], centre_query)):
                np.testing.assert_allclose(panels[r * 6 + i * 3 + j], expected, atol=1e-5)
    with Image.open(path) as picture:
        assert picture.format == "PNG" and picture.size == tuple(round(v) for v in fig.get_size_inches() * 110)

    with pytest.raises(ValueError, match=r"blocks \[3\] do not exist"):
        plot_attention_figure(models, images, tmp_path / "b.png", blocks=(1, 3))
    with pytest.raises(ValueError, match="head 5"):
        plot_attention_figure(models, images, tmp_path / "b.png", head=5)
    with pytest.raises(ValueError, match="1 image batches for 2 models"):
        plot_attention_figure(models, images[:1], tmp_path / "b.png")
    assert not (tmp_path / "b.png").exists()
    assert default_blocks(12) == (1, 6, 12) and default_blocks(1) == (1,)


def test_nonlocality_plot_draws_each_curve_and_the_gpsa_boundary(tmp_path, drawn) -> None:
    """Catches curves drawn with other values or blocks than given, trained and init lines styled alike,
    and the GPSA | MHSA boundary in the wrong place (it sits between the last GPSA block and the next)."""
    curves = {"x": [1.0, 2.0, 2.5], "x (trained)": [1.5, 2.5, 3.0]}
    plot_nonlocality(curves, tmp_path / "n.png", boundaries=[1])
    (ax,) = drawn[-1].axes
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert set(lines) == set(curves)
    for label, values in curves.items():
        assert list(lines[label].get_xdata()) == [1, 2, 3] and list(lines[label].get_ydata()) == values
    assert lines["x"].get_linestyle() == "--" and lines["x (trained)"].get_linestyle() == "-"
    boundaries = [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert boundaries == [1.5]
    with Image.open(tmp_path / "n.png") as picture:
        assert picture.format == "PNG"
    with pytest.raises(ValueError, match="no curves"):
        plot_nonlocality({}, tmp_path / "m.png")


@pytest.mark.slow
def test_pictures_at_init_and_from_checkpoints_on_cifar10(cifar10_sample, tmp_path) -> None:
    vit_kwargs = {**TINY, "depth": 2}
    convit_kwargs = {**TINY, "depth": 2, "local_up_to_layer": 1}
    impulse = save_checkpoint(timm.create_model("vit_tiny_impulse3", **vit_kwargs), tmp_path / "impulse")
    convit = tmp_path / "convit" / "final"  # a run folder: its final/ checkpoint is used
    labels = [str(i) for i in range(10)]
    save_checkpoint(timm.create_model("convit_tiny_patch2_32", **convit_kwargs), convit, label_names=labels)

    written = draw_attention_pictures(
        tmp_path / "out",
        dataset=str(cifar10_sample),
        models=["vit_tiny_impulse3", "vit_tiny_patch2_32"],
        checkpoints=[str(impulse), str(impulse)],
        model_kwargs=vit_kwargs,
        convit_kwargs=convit_kwargs,
        convit_checkpoint=str(tmp_path / "convit"),
        num_images=4,
    )
    assert sorted(written) == ["attention_init", "attention_trained", "nonlocality"]
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in written.values())
    images = load_images(str(cifar10_sample), [timm.create_model("vit_tiny_patch2_32", **vit_kwargs)], 4)[0]
    assert images.shape == (4, 3, 16, 16)
    with pytest.raises(ValueError, match="1 checkpoints for 2 models"):
        draw_attention_pictures(
            tmp_path / "out", dataset=str(cifar10_sample), models=["a", "b"], checkpoints=["c"], num_images=1
        )
