"""A sha256 of every registered name's initialized state dict (and of timm's own ViTs through apply_structured_init),
to show that a change to the init's code leaves what it writes bit-identical: run it at two commits, compare.

python study/init_hashes.py > hashes.json   # at each commit (a worktree of the older one: its own structinit_hf)
"""

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

import timm  # noqa: E402
import torch  # noqa: E402

import structinit_hf  # noqa: E402

STOCK = {  # timm's own names at the proxy's geometry, each through the init as a user calls it
    "deit3_small_patch16_224": {},
    "vit_relpos_small_patch16_224": {},
    "vit_small_patch16_rope_224": {},
    "vit_tiny_patch16_224": {},
}
GEOMETRY = dict(img_size=16, patch_size=2, depth=4, embed_dim=48, num_heads=3, num_classes=10)


def digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> dict[str, str]:
    torch.set_num_threads(1)
    out = {"structinit_hf": str(Path(structinit_hf.__file__).parent)}
    stock_defaults = ["vit_tiny_patch2_32", "swin_tiny_patch2_window4_32", "mixer_s4_32"]  # registered here too
    names = timm.list_models(["*impulse*", "*mimetic*", *stock_defaults])
    for name in names:
        if "224" in name and "tiny" not in name:
            continue  # the large ones cost seconds each and share the small ones' code paths
        torch.manual_seed(0)
        out[name] = digest(timm.create_model(name))
    for name in STOCK:
        for method in ("impulse", "mimetic"):
            torch.manual_seed(0)
            model = timm.create_model(name, **GEOMETRY)
            out[f"{name} {method}"] = digest(structinit_hf.apply_structured_init(model, method))
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
