"""Solver speed, create_model cost and init health, side by side in one process.

    python scripts/benchmark_solver.py --data ../shared/data/cifar10-small --out benchmarks/solver

See :mod:`structinit_hf.benchmark.solver` (also this script's ``--help``) for what each section measures.
"""

import sys

from structinit_hf.train.commands import run_script, script_imports

with script_imports():
    from structinit_hf.benchmark.solver import run, solver_parser

if __name__ == "__main__":
    sys.exit(run_script(solver_parser(), run))
