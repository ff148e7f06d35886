"""Score a classifier (timm name, local checkpoint folder, hf-hub:<repo> or transformers id) on one split.

python scripts/evaluate.py --model runs/c10/final --dataset uoft-cs/cifar10 --split test
accelerate launch scripts/evaluate.py --model runs/c10/final --dataset ../shared/data/cifar10-small
"""

import sys

from structinit_hf.train.cli.commands import run_script, script_imports

with script_imports():
    from structinit_hf.train.cli.args import evaluation_parser
    from structinit_hf.train.models.evaluation import run_evaluation

if __name__ == "__main__":
    sys.exit(run_script(evaluation_parser(), run_evaluation))
