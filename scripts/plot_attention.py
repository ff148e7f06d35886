"""Draw attention like the paper's Figure 3, and ConViT's non-locality, at initialization and after training.

    python scripts/plot_attention.py                     # the embedded sample's test images; under runs/attention
    python scripts/plot_attention.py --dataset ../shared/data/cifar10-small \
        --out-dir study/records/small_data  # README's
    python scripts/plot_attention.py --dataset ../shared/data/cifar10-small \
        --model vit_tiny_impulse3 vit_tiny_mimetic vit_tiny_patch2_32 \
        --model-kwargs patch_size=4 depth=6 --convit-kwargs patch_size=4 depth=6 local_up_to_layer=5 \
        --checkpoint runs/small_data-cpu-cifar10-small/{impulse3,mimetic,default}-seed0 \
        --convit-checkpoint runs/small_data-cpu-cifar10-small/convit-seed0 --out-dir study/records/small_data/cpu

Writes attention_init.png, attention_trained.png (with --checkpoint) and nonlocality.png.
"""

import sys

from structinit_hf.train.cli.commands import run_script, script_imports

with script_imports():
    from structinit_hf.benchmark.plots import attention_parser, draw_attention

if __name__ == "__main__":
    sys.exit(run_script(attention_parser(), draw_attention))
