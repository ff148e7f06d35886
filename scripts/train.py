"""Train a classifier with Accelerate (the paper's CIFAR recipe by default).

    accelerate launch scripts/train.py --model vit_tiny_impulse3 --dataset uoft-cs/cifar10 --output-dir runs/c10
    accelerate launch scripts/train.py --model vit_tiny_impulse3 --dataset ../shared/data/cifar10-small --epochs 5

See the "Training" section of the README for every flag, launch configs and resuming.
"""

import sys

from structinit_hf.training import train, training_parser

if __name__ == "__main__":
    try:
        train(training_parser().parse_args())
    except FloatingPointError as error:  # non-finite loss: the message names the last good checkpoint
        sys.exit(f"error: {error}")
