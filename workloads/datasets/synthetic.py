"""A synthetic set with the real sets' shapes and learnable labels, for tests and demos.

Fixed random class prototypes (coarse blocks) under Gaussian noise, deterministic from
the seed, so every worker of a cell builds the same set and a model can learn it
(accuracy well above chance after one epoch). Train and test share the prototypes and
differ in their noise stream, so test accuracy measures real learning.
"""

from __future__ import annotations

import numpy as np

from .catalog import CLASSES, SPECS

TRAIN_SAMPLES = SPECS["synthetic"].train_samples
TEST_SAMPLES = SPECS["synthetic"].test_samples
# On the 0..255 scale: faint prototypes under strong noise, so accuracy climbs over
# epochs instead of jumping to 1.0 in the first few steps, yet stays learnable.
CONTRAST = 0.3
# Prototypes are coarse blocks (side / 4 cells, upsampled), not pixel noise: pooling
# CNNs average pixel-level patterns away and could not learn them in a short run.
BLOCK_PX = 4
NOISE_STD = 48.0


def generate(shape: tuple[int, int, int], samples: int, seed: int, split: str = "train"
             ) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` uint8 images of ``shape`` (C, H, W) with int32 labels."""
    channels, height, width = shape
    coarse = np.random.default_rng([seed, 0]).integers(
        0, 256, (CLASSES, channels, height // BLOCK_PX, width // BLOCK_PX))
    prototypes = coarse.repeat(BLOCK_PX, axis=2).repeat(BLOCK_PX, axis=3)
    rng = np.random.default_rng([seed, 1 if split == "train" else 2])
    y = rng.integers(0, CLASSES, samples).astype(np.int32)
    x = np.empty((samples, *shape), dtype=np.uint8)
    chunk = 1000  # bounds the float64 noise buffer
    for start in range(0, samples, chunk):
        labels = y[start:start + chunk]
        faint = 128 + CONTRAST * (prototypes[labels] - 128)
        noisy = faint + rng.normal(0.0, NOISE_STD, (len(labels), *shape))
        x[start:start + chunk] = np.clip(noisy, 0, 255)
    return x, y
