"""Issue 45's device check: the Swin, Mixer and ViT inits built on an accelerator, against the same builds on the CPU.

    python study/device_init_check.py                       # cuda when there is one; writes the record below
    python study/device_init_check.py --device cpu --tiny   # the same checks on the CPU, small models (the test)

For each registered Swin and Mixer name (32 px and timm's 224 px geometry) and two ViT names, every tensor the init
writes is built as a user builds on a GPU (``with torch.device(...)``): the relative position bias for Swin's impulse;
Q/K/V and the output projection for mimetic and for the ViT's impulse (whose V/O start mimetic by default), with the
ViT's position code; the token MLPs for Mixer. Each is built on the device twice in float32 with the global RNG seeded
differently (the init must not read it: equal bit for bit) and once in bfloat16 (equal bit for bit to the float32
build cast). The float32 build is compared with the CPU's (largest absolute difference: 0 required for the exact
constructions; the ViT's solve may round otherwise on another device, so it is reported, not required), and the
pattern is measured on the device: the attention mass on each head's target (Swin, above 0.6, with 99% of the
reachable (query, head) pairs or more putting their largest weight on it) or the token MLP's relative error from its
shift (Mixer, under 6%). It is measured twice: on the model built on the device, whose other weights (timm's own
draws) come from the device's generator, and on the CPU's model moved to the device, which differs from the CPU's
measurement by the device's arithmetic alone.
Writes ``study/records/device/init_check-<device>.md`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import timm
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

import structinit_hf  # noqa: F401,E402  (registers the names)
from structinit_hf.benchmark.attention import swin_target_mass  # noqa: E402
from structinit_hf.init import token_mixing  # noqa: E402

NAMES = [
    "swin_tiny_impulse3_patch2_window4_32",
    "swin_tiny_mimetic_patch2_window4_32",
    "swin_tiny_impulse3_patch4_window7_224",
    "swin_tiny_mimetic_patch4_window7_224",
    "mixer_s4_impulse3_32",
    "mixer_s16_impulse3_224",
    "vit_tiny_impulse3",
    "vit_tiny_mimetic",
]
TINY = {  # --tiny: the same classes, small enough for a test on 2 CPU cores
    "swin": dict(img_size=16, patch_size=2, window_size=4, embed_dim=24, depths=(2, 2), num_heads=(3, 6)),
    "mixer": dict(img_size=16, patch_size=2, num_blocks=2, embed_dim=64, mlp_ratio=(2.0, 4.0)),
    "vit": dict(img_size=16, patch_size=2, depth=2),
}


def written(model: torch.nn.Module, name: str) -> dict[str, torch.Tensor]:
    """The tensors the init writes, by state-dict key."""
    if "impulse3_patch" in name:  # Swin's impulse: the relative position bias alone
        suffixes: tuple[str, ...] = ("relative_position_bias_table",)
    elif name.startswith("mixer"):
        return {k: v for k, v in model.state_dict().items() if ".mlp_tokens." in k}
    else:  # Q/K (solved or mimetic), V and the output projection (mimetic), the ViT's position code
        suffixes = ("attn.qkv.weight", "attn.proj.weight", "pos_embed")
    return {k: v for k, v in model.state_dict().items() if k.endswith(suffixes)}


def build(name: str, device: str, tiny: bool, global_seed: int, dtype: torch.dtype = torch.float32):
    torch.manual_seed(global_seed)
    kwargs = TINY[name.split("_")[0]] if tiny else {}
    with torch.device(device):
        return timm.create_model(name, dtype=dtype, **kwargs)


def pattern(model: torch.nn.Module, name: str, device: str) -> tuple[str, bool]:
    """The pattern at init, measured on the device, and whether it is the one the CPU gives (docs/method.md)."""
    if name.startswith("vit") or "mimetic" in name:
        return "-", True
    size = model.patch_embed.img_size if name.startswith("swin") else model.stem.img_size
    images = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0)).to(device)
    if name.startswith("swin"):
        rows = swin_target_mass(model, images)
        mass, hits = sum(r["target_mass"] for r in rows) / len(rows), min(r["hit_rate"] for r in rows)
        return f"target mass {mass:.3f} (hit rate {hits:.4f})", mass > 0.6 and hits >= 0.99
    errors = []
    grid = model.stem.grid_size
    x = F.layer_norm(torch.randn(4, grid[0] * grid[1], model.embed_dim, device=device), (model.embed_dim,))
    for block, shifts in zip(model.blocks, model.structinit_shifts, strict=True):
        target = token_mixing.shift_mixing(grid, torch.tensor(shifts)).to(device)
        expected = x.transpose(1, 2) @ target.T
        errors.append(((block.mlp_tokens(x.transpose(1, 2)) - expected).norm() / expected.norm()).item())
    return f"token MLP relative error from its shift, worst block {max(errors):.1e}", max(errors) < 0.06


def check(name: str, device: str, tiny: bool) -> dict[str, str]:
    first, second = build(name, device, tiny, 0), build(name, device, tiny, 1)
    a, b = written(first, name), written(second, name)
    deterministic = all(torch.equal(a[k], b[k]) for k in a)
    half = written(build(name, device, tiny, 0, torch.bfloat16), name)
    rounded = all(torch.equal(half[k], a[k].to(torch.bfloat16)) for k in a)
    cpu_model = build(name, "cpu", tiny, 0)
    cpu = written(cpu_model, name)
    cpu_diff = max((a[k].float().cpu() - cpu[k].float()).abs().max().item() for k in a)
    measured, as_expected = pattern(first.eval(), name, device)
    moved, moved_as_expected = pattern(cpu_model.to(device).eval(), name, device)
    return {
        "name": name,
        "tensors": f"{len(a)} ({sum(v.numel() for v in a.values()):,} values)",
        "same seed, other global RNG": "equal" if deterministic else "DIFFERENT",
        "bfloat16 build": "the float32 values rounded" if rounded else "DIFFERENT",
        "max abs diff from the CPU build": f"{cpu_diff:.1e}",
        "pattern at init, on the device": measured,
        "the CPU's model, on the device": moved,
        "ok": str(
            deterministic
            and rounded
            and as_expected
            and moved_as_expected
            and (name.startswith("vit") or cpu_diff < 1e-5)
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="small models of the same classes (for a test)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = [check(name, args.device, args.tiny) for name in NAMES]
    where = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    columns = list(rows[0])
    lines = [
        f"# Swin, Mixer and ViT inits on {where} (torch {torch.__version__}, timm {timm.__version__})",
        "",
        f"`python study/device_init_check.py --device {args.device}{' --tiny' if args.tiny else ''}`",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(row[c] for c in columns) + " |" for row in rows),
    ]
    out = args.out or Path(__file__).parent / "records" / "device" / f"init_check-{args.device.split(':')[0]}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(row["ok"] == "True" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
