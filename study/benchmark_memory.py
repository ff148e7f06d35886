"""Peak memory of one training step per image, for the paper's architecture (ViT-Tiny, 32 px, patch 2, depth 12).

    python study/benchmark_memory.py                       # micro-batches 8 16 32 64, fp32 on CPU
    python study/benchmark_memory.py --micro-batches 16 32 --model vit_tiny_mimetic

How it is measured: :mod:`study.step_memory`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

from structinit_hf.train._internal import run_script, script_imports

with script_imports():
    from study.step_memory import measure, memory_parser

if __name__ == "__main__":
    sys.exit(run_script(memory_parser(), measure))
