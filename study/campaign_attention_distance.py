"""Mean attention distance per block, at init and after training, of the campaign's runs under each augmentation.

    python study/campaign_attention_distance.py \\
        --regime "crop + flip=runs/small_data-cpu-proxy-n5000-rerun-cifar10" \\
        --regime "RandAugment m9=runs/small_data-cpu-proxy-n5000-randaug-cifar10" \\
        --regime "Mixup 0.8 + CutMix 1.0=runs/small_data-cpu-proxy-n5000-mixcut-cifar10"

What it measures: :mod:`study.campaign.attention_distance`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

from structinit_hf.train._internal import script_imports

with script_imports():
    from study.campaign.attention_distance import attention_distance_parser, write_attention_distance

if __name__ == "__main__":
    sys.exit(write_attention_distance(attention_distance_parser().parse_args()))
