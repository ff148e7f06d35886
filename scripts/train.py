"""Train a classifier with Accelerate (the paper's CIFAR recipe by default).

    accelerate launch scripts/train.py --model vit_tiny_impulse3 --dataset uoft-cs/cifar10 --output-dir runs/c10
    accelerate launch scripts/train.py --model vit_tiny_impulse3 --dataset ../shared/data/cifar10-small --epochs 5

``--output-dir <run> --resume latest`` continues a run after a kill, with the flags it was started with.  A user
error ends as one line and exit status 2 (``--debug`` shows the traceback).  See the "Training" section of the README
for every flag.
"""

import sys

from structinit_hf.train.cli.commands import run_script, script_imports

with script_imports():
    from structinit_hf.train.cli.args import training_parser
    from structinit_hf.train.training.loop import run_command

if __name__ == "__main__":
    sys.exit(run_script(training_parser(), run_command))
