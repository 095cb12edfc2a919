"""Each tier's network: built from the model registry, trained briefly on the tier's
labels before the cell streams, and cached so that a sweep trains each once.

A network is trained on the first ``samples`` of Fashion-MNIST's training set, with the
tier's labels (``labels.relabel``: coarse for the end tier, fine above), SGD at the
model's learning rate, ``EPOCHS`` epochs of batches of ``BATCH``: seconds for the LeNets
on a few thousand samples. Its ``state_dict`` is cached in ``cache_dir()`` under
(model, labels, samples, seed); processes of one host that need the same network wait
on a lock while the first trains it (a cell's end devices start together), so a sweep
on one host (local, emulated) trains each network once. A real node trains its own
copy once, into its own cache.

The privacy module (Zhang 2018, section 3.5): the upper tier's first convolution, run on
the end device (``split_first_conv``), so that only its features leave the device; the
upper node then runs the rest of its network on them.
"""

from __future__ import annotations

import fcntl
import functools
import os
import time
from pathlib import Path

import numpy as np

from profiler.errors import ConfigError

from . import labels as label_sets

DATASET = "fashion-mnist"
CACHE_ENV = "EDGEPROF_HIER_CACHE"
EPOCHS = 3
BATCH = 32


def cache_dir() -> Path:
    """Where trained networks are kept: ``$EDGEPROF_HIER_CACHE``, else
    ``~/.cache/edgeprof/hier``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "edgeprof" / "hier"


def cache_path(model: str, labels: str, samples: int, seed: int) -> Path:
    return cache_dir() / f"{model}-{labels}-{samples}-s{seed}.pt"


def read_set(split: str, rows: slice, data_dir: str | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, 1, 28, 28) and fine labels of ``rows`` of Fashion-MNIST."""
    from ..datasets import idx, resolver

    return idx.read(resolver.idx_files(resolver.locate(DATASET, data_dir)), split, rows)


def trained(model: str, labels: str, samples: int, seed: int,
            data_dir: str | None = None):
    """``model`` (a ``torch.nn.Module`` in eval mode) trained on ``labels``, from the
    cache or trained now (and cached); also how long that took (0 from the cache)."""
    import torch

    from .. import torch_models

    path = cache_path(model, labels, samples, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    net = torch_models.build(model, None, label_sets.CLASSES[labels])
    t0 = time.perf_counter()
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first process trains, the others wait
        if not path.exists():
            _train(net, model, labels, samples, seed, data_dir)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            torch.save(net.state_dict(), tmp)
            os.replace(tmp, path)  # whole or absent: a killed trainer leaves no half file
            return net.eval(), time.perf_counter() - t0
    net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return net.eval(), 0.0


def _train(net, model: str, labels: str, samples: int, seed: int,
           data_dir: str | None) -> None:
    import torch

    from .. import models
    from ..datasets import loader
    from ..torch_sgd import SGD

    x, y = read_set("train", slice(samples), data_dir)
    if len(x) < BATCH:
        raise ConfigError(f"{samples} training samples make no batch of {BATCH}: train the "
                          "tiers' networks on more (--max-samples 2000)")
    x = torch.from_numpy(loader.for_model(x, model, DATASET))
    y = torch.from_numpy(label_sets.relabel(y, labels))
    optimizer = SGD(net.parameters(), lr=models.get(model).lr, momentum=0.9,
                    weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    net.train()
    for epoch in range(EPOCHS):
        order = torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(len(x)))
        for start in range(0, len(x) - BATCH + 1, BATCH):
            idx = order[start:start + BATCH]
            optimizer.zero_grad()
            loss_fn(net(x[idx]), y[idx]).backward()
            optimizer.step()


def first_conv_problem(model: str) -> str | None:
    """Why ``model`` cannot lend the privacy module its first layer (None: it can)."""
    from .. import torch_models

    first = next(iter(torch_models.build(model, None, 10).children()))
    if type(first).__name__ != "Conv2d":
        return (f"{model} does not begin with a convolution ({type(first).__name__}): the "
                "privacy module runs the upper tier's first convolution on the device; give "
                "the edge and cloud tiers a convolutional network (lenet-cnn, lenet-example)")
    return None


def split_first_conv(net):
    """``(first convolution, the rest)`` of a ``torch.nn.Sequential``."""
    import torch

    layers = list(net.children())
    return layers[0], torch.nn.Sequential(*layers[1:])


def parameter_count(net) -> int:
    return sum(p.numel() for p in net.parameters())


def weights_mb(net) -> float:
    """The size of ``net``'s weights file (its ``state_dict`` as ``torch.save`` writes
    it, in MB): Zhang's Table 1 "size of weights file"."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(net.state_dict(), buffer)
    return len(buffer.getvalue()) / 1e6


# A torch CPU process's own peak memory with a LeNet after one batch of 50 (242 MB
# measured here, 2026-11: ``ru_maxrss`` of ``python -c "import torch; ..."``), rounded
# down: what a node needs before the network's weights and activations.
TORCH_PROCESS_MB = 200


@functools.lru_cache(maxsize=None)
def memory_needed_mb(model: str, labels: str, batch: int) -> tuple[float, float, float]:
    """What a node needs to run ``model`` on batches of ``batch``: ``(total, weights,
    activations)`` in MB. Weights: its parameters in float32; activations: every layer's
    output for one batch (a forward pass on zeros, counted by hooks), float32; total:
    those and ``TORCH_PROCESS_MB``. An estimate: the allocator's slack is not in it."""
    import torch

    from .. import torch_models
    from ..datasets import loader

    net = torch_models.build(model, None, label_sets.CLASSES[labels]).eval()
    outputs = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: outputs.append(out.numel()))
             for m in net.modules() if not list(m.children())]
    images = np.zeros((batch, 1, 28, 28), dtype=np.uint8)
    with torch.no_grad():
        net(torch.from_numpy(loader.for_model(images, model, DATASET)))
    for hook in hooks:
        hook.remove()
    weights_mb = parameter_count(net) * 4 / 1e6
    activations_mb = (sum(outputs) + images.size) * 4 / 1e6
    return TORCH_PROCESS_MB + weights_mb + activations_mb, weights_mb, activations_mb


def tier_sizes(models: dict[str, str], counts: dict[str, int]) -> dict[str, dict]:
    """Each tier with nodes: its network's parameters and weights file (MB), built with
    the tier's classes (the count does not depend on training, so nothing is trained)."""
    from .. import torch_models

    out = {}
    for tier, model in models.items():
        if counts.get(tier):
            net = torch_models.build(model, None,
                                     label_sets.CLASSES[label_sets.TIER_LABELS[tier]])
            out[tier] = {"params": parameter_count(net),
                         "weights_mb": round(weights_mb(net), 4)}
    return out
