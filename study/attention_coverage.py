"""Which attention classes the impulse init takes, what it writes there, and the mass it puts on target at init.

Builds every timm and transformers attention class a user can train from scratch at one tiny geometry (32 px, patch
4: an 8 x 8 grid, width 48, 3 heads, depth 2; transformers: 16 px, patch 2), applies ``apply_structured_init(model,
"impulse", seed=1)`` and measures, through the whole model on 4 random images, the mean attention of the heads with a
non-zero shift on their targets, block 0 and the mean over blocks, beside timm's (or transformers') default init on
the same targets. Where the init refuses, the table gives its one line. Writes the table between the coverage
markers of docs/method.md (``--write``) or prints it:

    PYTHONPATH=. python study/attention_coverage.py --write
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import timm
import torch
import transformers

from structinit_hf import apply_structured_init, init_refusal
from structinit_hf.atomic import write_text
from structinit_hf.init.apply import _family
from structinit_hf.init.check import attention_maps, target_patterns

DOCS = Path(__file__).resolve().parents[1] / "docs" / "method.md"
START, END = "<!-- attention-coverage:start -->", "<!-- attention-coverage:end -->"
TIMM = dict(pretrained=False, img_size=32, patch_size=4, embed_dim=48, num_heads=3, depth=2, num_classes=3)
HF = dict(image_size=16, patch_size=2, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
          intermediate_size=96, num_labels=3)  # fmt: skip

WRITES = {
    "vit": "Q/K solved on the position code written into the absolute position embedding",
    "relpos": "the impulse in the relative position bias (table: Swin's construction; MLP: fitted peak)",
    "rope": "the query/key biases, whose rotated product peaks at the offset",
}


def _timm(name: str, **kwargs):
    return lambda: timm.create_model(name, **{**TIMM, **kwargs})


def _hf(model: str, config: str, **kwargs):
    return lambda: getattr(transformers, model)(getattr(transformers, config)(**HF, **kwargs))


CASES = [  # (library class (attention class), how it is built, builder)
    ("timm VisionTransformer (Attention)", "vit_tiny_patch16_224", _timm("vit_tiny_patch16_224")),
    ("timm VisionTransformerDistilled (Attention)", "deit_tiny_distilled_patch16_224",
     _timm("deit_tiny_distilled_patch16_224")),
    ("timm VisionTransformer, no position embedding", "vit_tiny_patch16_224, pos_embed='none'",
     _timm("vit_tiny_patch16_224", pos_embed="none", class_token=False, global_pool="avg")),
    ("timm VisionTransformerRelPos (RelPosMlp)", "vit_relpos_small_patch16_224", _timm("vit_relpos_small_patch16_224")),
    ("timm VisionTransformerRelPos (RelPosBias)", "vit_relpos_small_patch16_224, rel_pos_type='bias'",
     _timm("vit_relpos_small_patch16_224", rel_pos_type="bias")),
    ("timm VisionTransformerRelPos (shared RelPosMlp)", "vit_srelpos_small_patch16_224",
     _timm("vit_srelpos_small_patch16_224")),
    ("timm VisionTransformerRelPos (ResPostRelPosBlock)", "vit_relpos_small_patch16_rpn_224",
     _timm("vit_relpos_small_patch16_rpn_224")),
    ("timm Beit (relative bias per block)", "beit_base_patch16_224", _timm("beit_base_patch16_224")),
    ("timm Beit (shared relative bias)", "beit_base_patch16_224, use_shared_rel_pos_bias", _timm(
        "beit_base_patch16_224", use_shared_rel_pos_bias=True, use_rel_pos_bias=False)),
    ("timm Beit (absolute position only)", "beit_base_patch16_224, use_abs_pos_emb, no rel bias", _timm(
        "beit_base_patch16_224", use_abs_pos_emb=True, use_rel_pos_bias=False)),
    ("timm Eva (AttentionRope, axial)", "vit_small_patch16_rope_224", _timm("vit_small_patch16_rope_224")),
    ("timm Eva (AttentionRope, axial + ape)", "vit_small_patch16_rope_ape_224",
     _timm("vit_small_patch16_rope_ape_224")),
    ("timm Eva (AttentionRope, mixed)", "vit_small_patch16_rope_mixed_224", _timm("vit_small_patch16_rope_mixed_224")),
    ("timm Eva (AttentionRope, no qkv bias)", "vit_small_patch16_rope_224, qkv_bias=False",
     _timm("vit_small_patch16_rope_224", qkv_bias=False)),
    ("timm Eva (EvaAttention: RoPE + ape, EVA-02)", "eva02_tiny_patch14_224", _timm("eva02_tiny_patch14_224")),
    ("timm Cait (TalkingHeadAttn)", "cait_xxs24_224", _timm("cait_xxs24_224")),
    ("transformers ViTForImageClassification", "ViTConfig", _hf("ViTForImageClassification", "ViTConfig")),
    ("transformers DeiTForImageClassification", "DeiTConfig", _hf("DeiTForImageClassification", "DeiTConfig")),
    ("transformers DeiTForImageClassificationWithTeacher", "DeiTConfig (distillation token)",
     _hf("DeiTForImageClassificationWithTeacher", "DeiTConfig")),
    ("transformers BeitForImageClassification (relative bias)", "use_relative_position_bias",
     _hf("BeitForImageClassification", "BeitConfig", use_relative_position_bias=True)),
    ("transformers BeitForImageClassification (shared bias)", "use_shared_relative_position_bias",
     _hf("BeitForImageClassification", "BeitConfig", use_shared_relative_position_bias=True)),
    ("transformers BeitForImageClassification (absolute)", "use_absolute_position_embeddings",
     _hf("BeitForImageClassification", "BeitConfig", use_absolute_position_embeddings=True)),
    ("transformers BeitForImageClassification (BeitConfig's defaults)", "BeitConfig()",
     _hf("BeitForImageClassification", "BeitConfig")),
    ("transformers Data2VecVisionForImageClassification", "use_relative_position_bias",
     _hf("Data2VecVisionForImageClassification", "Data2VecVisionConfig", use_relative_position_bias=True)),
    ("transformers Data2VecVisionForImageClassification (defaults)", "Data2VecVisionConfig()",
     _hf("Data2VecVisionForImageClassification", "Data2VecVisionConfig")),
    ("transformers ViTMAEModel (masking 0.75 of the patches)", "ViTMAEConfig", _hf("ViTMAEModel", "ViTMAEConfig")),
    ("transformers SwinForImageClassification", "SwinConfig", lambda: transformers.SwinForImageClassification(
        transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=48, depths=[1, 1], num_heads=[3, 6],
                                window_size=4, num_labels=3))),
]  # fmt: skip


def _masses(model, shifts, images) -> tuple[float, float]:
    """Block 0's and the mean over blocks' attention on target of the heads with a non-zero shift."""
    grid = (8, 8)
    heads = [[h for h, shift in enumerate(block) if shift != [0, 0]] for block in shifts]
    kept = [[block[h] for h in keep] for block, keep in zip(shifts, heads, strict=True)]
    rows = []
    for image in images:
        maps = attention_maps(model, images=image[None])
        rows.append(target_patterns([m[keep] for m, keep in zip(maps, heads, strict=True)], kept, grid))
    block0 = sum(r[0]["target_mass"] for r in rows) / len(rows)
    mean = sum(sum(b["target_mass"] for b in r) / len(r) for r in rows) / len(rows)
    return block0, mean


def coverage_rows() -> list[str]:
    lines = [
        "| class (attention) | built as | the impulse init writes | mass on target at init: block 0 / mean "
        "(timm's or transformers' default) | uniform |",
        "|---|---|---|---|---|",
    ]
    for label, built, build in CASES:
        torch.manual_seed(0)
        model = build()
        reason = init_refusal(model, "impulse", seed=1)
        if reason is not None:
            lines.append(f"| {label} | `{built}` | refused: {reason} | – | – |")
            continue
        stock = copy.deepcopy(model)
        family, _ = _family(model)
        apply_structured_init(model, "impulse", seed=1)
        size = 32 if hasattr(model, "patch_embed") else HF["image_size"]
        images = torch.randn(4, 3, size, size, generator=torch.Generator().manual_seed(5))
        b0, mean = _masses(model, model.structinit_shifts, images)
        s0, smean = _masses(stock, model.structinit_shifts, images)
        uniform = model.structinit_check[0]["uniform"]
        lines.append(
            f"| {label} | `{built}` | {WRITES[family]} | {b0:.3f} / {mean:.3f} ({s0:.3f} / {smean:.3f}) | "
            f"{uniform:.4f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--write", action="store_true", help=f"replace the table between the markers in {DOCS}")
    args = parser.parse_args(argv)
    table = "\n".join(coverage_rows())
    if not args.write:
        print(table)
        return 0
    text = DOCS.read_text()
    if START not in text or END not in text:
        print(f"{DOCS}: no {START} ... {END} markers to write the table between", file=sys.stderr)
        return 2
    head, rest = text.split(START, 1)
    write_text(DOCS, f"{head}{START}\n{table}\n{END}{rest.split(END, 1)[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
