"""The small-data benchmark (the paper's Table 2 on data at hand): every init, one recipe, several seeds.

    python scripts/benchmark_small_data.py --profile cpu --data-root ../shared/data   # ~90 min on 2 cores; resumes
    python scripts/benchmark_small_data.py --profile paper --dataset cifar100   # GPUs: the paper's setting

Writes results.md, results.json and curves.png (default: benchmarks/small_data); run folders go to runs/.
"""

import shlex
import sys

from structinit_hf.train.commands import run_script, script_imports

with script_imports():  # matplotlib draws the results at the end: a missing one stops here, before any training
    import matplotlib  # noqa: F401

    from structinit_hf.benchmark.small_data import benchmark_parser, main

if __name__ == "__main__":
    command = shlex.join(["python", "scripts/benchmark_small_data.py", *sys.argv[1:]])
    sys.exit(run_script(benchmark_parser(), lambda args: main(args, command) and None))
