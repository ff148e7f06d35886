"""Which attention init for this data: timm's default, mimetic and impulse side by side (``structinit-hf compare``).

python scripts/compare.py                                   # the CPU proxy on the embedded CIFAR-10 sample
python scripts/compare.py --dataset my_images/ --seeds 0 1 2
"""

import sys

from structinit_hf.train.cli.commands import run_script, script_imports

with script_imports():
    from structinit_hf.benchmark.compare_inits import compare_command, compare_parser

if __name__ == "__main__":
    sys.exit(run_script(compare_parser(), compare_command))
