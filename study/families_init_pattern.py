"""The pattern each family's construction gives at init (docs/method.md, "Beyond the plain ViT": the command there)."""

import timm
import torch
import torch.nn.functional as F

import structinit_hf
from structinit_hf.benchmark.attention import swin_target_mass
from structinit_hf.benchmark.profiles import SWIN_PROXY
from structinit_hf.init import token_mixing

torch.manual_seed(0)
images = torch.randn(16, 3, 16, 16)
for name, kwargs in (
    ("swin_tiny_impulse3_patch2_window4_32", SWIN_PROXY),
    ("swin_tiny_impulse3_patch2_window4_32", dict(img_size=224, patch_size=4, window_size=7)),
):
    model = timm.create_model(name, **kwargs)
    x = images if kwargs["img_size"] == 16 else torch.randn(2, 3, 224, 224)
    rows = swin_target_mass(model, x)
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    print(
        name,
        kwargs.get("window_size"),
        {k: f"{v:.3f}" for k, v in mean.items()},
        "min target_mass",
        f"{min(r['target_mass'] for r in rows):.3f}",
    )
    default = timm.create_model("swin_tiny_patch2_window4_32", **kwargs)
    default.structinit_shifts = model.structinit_shifts
    rows = swin_target_mass(default, x)
    print("  timm default, same targets: target_mass", f"{sum(r['target_mass'] for r in rows) / len(rows):.3f}")
for grid, hidden, label in (
    ((8, 8), 128, "proxy Mixer (64 tokens, 128 hidden)"),
    ((8, 8), 256, "mixer_s4 at 32 px"),
    ((14, 14), 256, "mixer_s16 at 224 px (196 tokens, 256 hidden)"),
    ((8, 8), 64, "64 tokens, 64 hidden (mlp_ratio 1 at width 64)"),
    ((8, 8), 32, "64 tokens, 32 hidden (timm's 0.5 at width 64)"),
):
    for shifts in (1, 3):
        target = token_mixing.shift_mixing(grid, structinit_hf.impulse_shifts(shifts, 3, 0))
        x = F.layer_norm(torch.randn(64, grid[0] * grid[1], 96), (96,)).transpose(1, 2)
        fc1, b1, fc2, b2 = token_mixing.token_mlp_weights(target, hidden)
        y = F.gelu(x @ fc1.T + b1) @ fc2.T + b2
        ref = x @ target.T
        # the token MLP's Jacobian at these inputs: the share of each row's weight on its target tokens
        jac = torch.autograd.functional.jacobian(
            lambda v, w=(fc1, b1, fc2, b2): F.gelu(v @ w[0].T + w[1]) @ w[2].T + w[3], x[0, 0]
        )
        on_target = (jac.abs() * (target != 0)).sum() / jac.abs().sum()
        print(
            f"{label}, {shifts} shift(s): relative error {((y - ref).norm() / ref.norm()).item():.3f}, "
            f"weight on target tokens {on_target.item():.3f}"
        )
