"""Training throughput of scripts/train.py against a bare PyTorch loop, in one process, on this machine's device.

    python study/benchmark_training.py --data ../shared/data/cifar10 --out study/records/training        # GPU
    python study/benchmark_training.py --data ../shared/data/cifar10-small --model-kwargs depth=3 --batch-size 32 \
        --steps 4 --threads 1 --workers 2  # CPU

The arms and what ``results.json`` holds: :mod:`study.training_speed`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

from structinit_hf.train._internal import script_imports

with script_imports():
    from study.training_speed import measure_throughput, throughput_parser

if __name__ == "__main__":
    measure_throughput(throughput_parser().parse_args())
