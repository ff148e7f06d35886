"""Peak memory of a run on 12-megapixel photos beside its banner's estimate, for both input pipelines.

    python study/benchmark_photo_memory.py                 # 300 photos, tensor and pil pipelines
    python study/benchmark_photo_memory.py --images 60 --pipelines pil --output /tmp/photos.json

How it is measured: :mod:`study.photo_memory`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

from structinit_hf.train._internal import run_script, script_imports

with script_imports():
    from study.photo_memory import measure_photo_memory, photo_memory_parser

if __name__ == "__main__":
    sys.exit(run_script(photo_memory_parser(), measure_photo_memory))
