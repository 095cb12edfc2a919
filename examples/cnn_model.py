"""A small CNN for 1x28x28 images (MNIST, Fashion-MNIST) and 10 classes, as a factory.

    edgeprof sweep --model examples/cnn_model.py:make_model --engine torch,torch-ddp \
        --devices 1,2 --sync sync,async --max-samples 2000

The architecture (``examples/ddp_train.py`` builds the same network inline, so the two
ways of profiling your own training can be compared):

    conv 1->16, 3x3, padding 1, ReLU, max pool 2x2      -> 16x14x14
    conv 16->32, 3x3, padding 1, ReLU, max pool 2x2     -> 32x7x7
    flatten, dense 32*7*7 -> 64, ReLU
    dense 64 -> num_classes

105,866 trainable parameters at 10 classes; torch's default initialisation (edgeprof
keeps a factory's weights as it made them). No edgeprof import: a file you could train
with your own script as it is.
"""

from torch import nn


def make_model(num_classes: int = 10) -> nn.Module:
    """The CNN above, its last layer giving ``num_classes`` logits."""
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 7 * 7, 64), nn.ReLU(),
        nn.Linear(64, num_classes),
    )
