"""Why does the impulse trail on timm's relative-position ViT? What the impulse's attention looks like at init on real
images, per variant of the family (its base init, its relative term, the bias's strength), with the content logits
as built and with them removed (every query/key weight zeroed: the bias alone). Trains nothing.

python study/relpos_diagnosis.py --out study/records/relpos   # -> diagnosis.md, diagnosis.json
"""

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

import datasets  # noqa: E402
import numpy as np  # noqa: E402
import timm  # noqa: E402
import torch  # noqa: E402

from structinit_hf import apply_structured_init  # noqa: E402
from structinit_hf.atomic import write_json, write_text  # noqa: E402
from structinit_hf.benchmark.attention import block_fidelity  # noqa: E402
from structinit_hf.init.apply import impulse_block_targets  # noqa: E402
from structinit_hf.train._internal import SAMPLE_DATASETS  # noqa: E402
from study.profiles import PROFILES  # noqa: E402

VARIANTS = {  # name -> (profile, impulse options)
    "as built (weight_init='reset', bias MLP), sharpness 0.7": ("cpu-proxy-n2500-relpos", {}),
    "sharpness 0.3": ("cpu-proxy-n2500-relpos", {"sharpness": 0.3}),
    "sharpness 0.9": ("cpu-proxy-n2500-relpos", {"sharpness": 0.9}),
    "timm's ViT init (trunc normal 0.02)": ("cpu-proxy-n2500-relpos-tn", {}),
    "a bias table (rel_pos_type='bias')": ("cpu-proxy-n2500-relpos-bias", {}),
}


def images(count: int = 64) -> torch.Tensor:
    """``count`` test images of the package's CIFAR-10 sample at the proxy's 16 px, normalised as timm's ViT cfg."""
    rows = datasets.load_dataset(str(SAMPLE_DATASETS["cifar10-sample"]), split="test").select(range(count))
    pixels = torch.stack([torch.from_numpy(np.asarray(img.convert("RGB"))).permute(2, 0, 1) for img in rows["img"]])
    pixels = pixels.float() / 255
    return (torch.nn.functional.avg_pool2d(pixels, 2) - 0.5) / 0.5


def qk_zeroed(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every block's query and key weights (and biases) at zero: the attention is the bias alone."""
    model = copy.deepcopy(model)
    with torch.no_grad():
        for block in model.blocks:
            qkv = block.attn.qkv
            dim = qkv.out_features // 3
            qkv.weight[: 2 * dim].zero_()
            if qkv.bias is not None:
                qkv.bias[: 2 * dim].zero_()
    return model


def measure(profile: str, options: dict, batch: torch.Tensor, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    base = PROFILES[profile]
    model = timm.create_model(base.model, **base.architecture, num_classes=10)
    apply_structured_init(model, "impulse", kernel_size=3, **options)
    targets = impulse_block_targets(model)
    out = {}
    for name, variant in (("with content", model), ("bias alone", qk_zeroed(model))):
        rows = block_fidelity(variant, batch, targets)
        out[name] = {key: round(sum(r[key] for r in rows) / len(rows), 3) for key in ("target_mass", "hit_rate")}
    qkv = model.blocks[0].attn.qkv.weight
    out["qk_weight_std"] = round(qkv[: 2 * (qkv.shape[0] // 3)].std().item(), 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("study/records/relpos"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    batch = images()
    record = {"command": "python " + " ".join(sys.argv), "images": len(batch), "seed": 0,
              "variants": {name: measure(p, o, batch) for name, (p, o) in VARIANTS.items()}}  # fmt: skip
    lines = ["# The relative-position ViT's impulse at init, on 64 real images (16 px CIFAR-10)", "",
             f"`{record['command']}`; trains nothing. Per variant, the mean over the 12 blocks of the attention mass "
             "on each head's target offset and the share of rows whose largest weight is on it, as built and with "
             "every query/key weight zeroed (the bias alone); the spread of the block-0 query/key weights.", "",
             "| variant | target mass (with content) | hit rate | target mass (bias alone) | hit rate | Q/K std |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for name, m in record["variants"].items():
        c, b = m["with content"], m["bias alone"]
        lines.append(f"| {name} | {c['target_mass']} | {c['hit_rate']} | {b['target_mass']} | {b['hit_rate']} | "
                     f"{m['qk_weight_std']} |")  # fmt: skip
    write_json(args.out / "diagnosis.json", record)
    write_text(args.out / "diagnosis.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
