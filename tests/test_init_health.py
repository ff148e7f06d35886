"""The init-health report: Q/K norms, attention entropy and target hits per block."""

from __future__ import annotations

import math

import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

from structinit_hf import apply_structured_init
from structinit_hf.benchmark.attention import attention_entropy, init_health, qk_spectral_norms
from structinit_hf.init.apply import impulse_block_targets
from structinit_hf.init.options import SVD_DEFAULTS


def tiny_vit(**kwargs) -> VisionTransformer:
    args = dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, class_token=False, global_pool="avg")
    return VisionTransformer(**{**args, **kwargs}).eval()


def test_spectral_norms_read_the_query_and_key_rows() -> None:
    """Catches norms taken over the wrong rows of the fused qkv weight (e.g. the value rows)."""
    model = tiny_vit()
    with torch.no_grad():
        model.blocks[1].attn.qkv.weight.zero_()
        model.blocks[1].attn.qkv.weight[0, 0] = 3.0  # a query row
        model.blocks[1].attn.qkv.weight[32, 1] = 2.0  # a key row
        model.blocks[1].attn.qkv.weight[64:] = 100.0  # value rows must not count
    assert qk_spectral_norms(model)[1] == (pytest.approx(3.0), pytest.approx(2.0))


def test_entropy_is_uniform_for_blind_attention_and_hits_count_targets() -> None:
    """Catches an entropy not normalised by log N, or hit rates read off the wrong key."""
    model = tiny_vit()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[:64].zero_()  # Q = K = 0: every row uniform
            block.attn.qkv.bias.zero_()
    rows = init_health(model, torch.randn(2, 3, 16, 16))
    assert math.isclose(rows[0]["entropy"], math.log(16), rel_tol=1e-5)
    assert math.isclose(rows[1]["entropy_ratio"], 1.0, rel_tol=1e-5) and "hit_rate" not in rows[0]
    assert rows[0]["bf16_shift"] < 1e-3  # uniform rows survive bf16; solved ones move a little (checked below)
    # blind rows peak nowhere in particular; the impulse init's rows peak on their targets
    targets = impulse_block_targets(apply_structured_init(tiny_vit(), "impulse", **SVD_DEFAULTS))  # the shifts it draws
    assert init_health(model, torch.randn(2, 3, 16, 16), targets)[0]["hit_rate"] < 0.2
    apply_structured_init(model, "impulse", **{**SVD_DEFAULTS, "patch_embed_scale": 0.1})  # position dominates
    solved = init_health(model, torch.randn(2, 3, 16, 16), targets)[0]
    assert solved["hit_rate"] > 0.8 and 0 < solved["bf16_shift"] < 0.5


def test_attention_entropy_tells_collapse_from_uniform_and_skips_the_class_token() -> None:
    """Catches the collapse check reading the class token's share as spread (a collapsed model would look healthy),
    or not normalising by the number of patch keys."""
    model = tiny_vit(class_token=True, global_pool="token")
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[:64].zero_()
            block.attn.qkv.bias.zero_()
    assert attention_entropy(model, images) == pytest.approx([1.0, 1.0], rel=1e-5)
    with torch.no_grad():
        for block in model.blocks:  # query = key = 30 x the token: each patch row piles onto one key
            block.attn.qkv.weight[:32] = 30 * torch.eye(32)
            block.attn.qkv.weight[32:64] = 30 * torch.eye(32)
    collapsed = attention_entropy(model, images)
    assert len(collapsed) == 2 and max(collapsed) < 0.1
