"""The small-data benchmark (the paper's Table 2 on data at hand): every init, one recipe, several seeds.

    python study/benchmark_small_data.py --profile cpu --data-root ../shared/data   # ~90 min on 2 cores; resumes
    python study/benchmark_small_data.py --profile paper --dataset cifar100   # GPUs: the paper's setting

Writes results.md, results.json and curves.png (default: study/records/small_data); run folders go to runs/.
"""

import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

from structinit_hf.train._internal import run_script, script_imports

with script_imports():  # matplotlib draws the results at the end: a missing one stops here, before any training
    import matplotlib  # noqa: F401

    from study.small_data import benchmark_parser, main

if __name__ == "__main__":
    command = shlex.join(["python", "study/benchmark_small_data.py", *sys.argv[1:]])
    sys.exit(run_script(benchmark_parser(), lambda args: main(args, command) and None))
