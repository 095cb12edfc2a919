"""Train a small CNN on Fashion-MNIST with DistributedDataParallel: a plain torchrun script.

Written the way PyTorch's DDP tutorial writes one, and knows nothing of edgeprof::

    python examples/ddp_train.py --epochs 2                      # one process
    torchrun --nproc-per-node 2 examples/ddp_train.py --epochs 2 # two, over Gloo
    edgeprof sweep --script examples/ddp_train.py \\
        --script-args "--epochs 2 --batch {batch}" --batch 32,64 --devices 1,2,4

It reads RANK and WORLD_SIZE (and MASTER_ADDR/MASTER_PORT through ``env://``), joins a
Gloo process group when there is more than one process, shards the training set with
``DistributedSampler``, and trains SGD on the CNN of ``examples/cnn_model.py`` (the
same layers, repeated here so that this file runs alone). The data are the IDX files of
Fashion-MNIST (Debian's ``dataset-fashion-mnist`` by default, ``--data-dir`` otherwise),
read with gzip and NumPy. At the end it prints what it measured itself: its training
rate (``samples_per_s=...``, its training loops' time, validation left out) and the
mean time of forward+backward per step (``fwd_bwd_ms_mean=...``, the first step left
out). If ``edgeprof_hooks`` is importable
it reports each epoch's validation accuracy and loss to edgeprof; otherwise it does not.
"""

import argparse
import gzip
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

try:
    from edgeprof_hooks import log
except ImportError:  # edgeprof is not installed: train without it
    log = None

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's pixel mean and standard deviation


class Net(nn.Module):
    """Two 3x3 convolutions and two dense layers for 1x28x28 images: the layers of
    examples/cnn_model.py's make_model, made in the same order (the same initial weights
    from the same seed), 105,866 parameters at 10 classes."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def read_idx(path, count=None):
    """The first ``count`` items of a gzipped IDX file as a uint8 array."""
    with gzip.open(path, "rb") as f:
        magic = int.from_bytes(f.read(4), "big")
        dims = [int.from_bytes(f.read(4), "big") for _ in range(magic & 0xFF)]
        if count is not None:
            dims[0] = min(dims[0], count)
        data = f.read(int(np.prod(dims)))
    return np.frombuffer(data, dtype=np.uint8).reshape(dims)


def load(data_dir, split, count=None):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(Path(data_dir) / f"{prefix}-images-idx3-ubyte.gz", count)
    labels = read_idx(Path(data_dir) / f"{prefix}-labels-idx1-ubyte.gz", count)
    x = (torch.from_numpy(images.astype(np.float32) / 255.0) - MEAN) / STD
    return TensorDataset(x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64)))


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    loss = 0.0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    return correct / total, loss / total


def main():
    parser = argparse.ArgumentParser(description="DDP training of a small CNN")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="samples per process step")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    parser.add_argument("--max-samples", type=int, default=None,
                        help="train on the first N training images")
    parser.add_argument("--val-samples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if world_size > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)

    train_set = load(args.data_dir, "train", args.max_samples)
    val_set = load(args.data_dir, "test", args.val_samples)
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch, sampler=sampler,
                              drop_last=True)
    val_loader = DataLoader(val_set, batch_size=256)

    model = Net()
    if world_size > 1:
        model = DDP(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    fwd_bwd_s = []
    train_s, samples = 0.0, 0
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        loss_sum, steps = 0.0, 0
        t_epoch = time.perf_counter()
        for x, y in train_loader:
            optimizer.zero_grad()
            t0 = time.perf_counter()
            loss = criterion(model(x), y)
            loss.backward()
            fwd_bwd_s.append(time.perf_counter() - t0)
            optimizer.step()
            loss_sum += loss.item()
            steps += 1
            samples += len(y)
        train_s += time.perf_counter() - t_epoch
        accuracy, val_loss = evaluate(model, val_loader)
        train_loss = loss_sum / max(steps, 1)
        if rank == 0:
            print(f"epoch {epoch}: train_loss={train_loss:.4f} val_loss={val_loss:.4f} "
                  f"val_accuracy={accuracy:.4f}", flush=True)
        if log is not None:
            log(epoch=epoch, val_accuracy=accuracy, train_loss=train_loss, val_loss=val_loss)

    steady = fwd_bwd_s[1:] or fwd_bwd_s  # the first step pays one-off costs
    print(f"rank={rank} steps={len(fwd_bwd_s)} samples_per_s={samples / train_s:.1f} "
          f"fwd_bwd_ms_mean={1000 * sum(steady) / len(steady):.3f}", flush=True)
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
