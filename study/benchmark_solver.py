"""Solver speed, create_model cost and init health, side by side in one process.

    python study/benchmark_solver.py --data ../shared/data/cifar10-small --out study/records/solver

See :mod:`study.solver_cost` (also this script's ``--help``) for what each section measures.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

from structinit_hf.train._internal import run_script, script_imports

with script_imports():
    from study.solver_cost import run, solver_parser

if __name__ == "__main__":
    sys.exit(run_script(solver_parser(), run))
