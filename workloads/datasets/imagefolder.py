"""A folder of class subfolders of images (torchvision ImageFolder's layout), as arrays.

``ROOT/<class>/<image>`` (any depth below the class folder; classes in sorted order, as
ImageFolder numbers them). When ``ROOT`` has ``train/`` and ``test/`` (or ``val/``)
folders, each is laid out that way and is its split; otherwise a deterministic sixth of
each class (every sixth image in sorted order) is held out as the test split.

Controller only: images are decoded once with Pillow into uint8 NCHW arrays (RGB if any
image is in colour, else grey), resized to ``image_size`` x ``image_size`` when one is
given; without one, every image must have the same size. ``listing`` only walks the
folder and stats the files (the key of ``workloads.datasets.user``'s cache), so a folder
decoded before is not opened again.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from profiler.errors import ConfigError

# torchvision's IMG_EXTENSIONS: what ImageFolder takes from the same folder.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
TEST_SPLIT_NAMES = ("test", "val")
HOLD_OUT_EVERY = 6  # without split folders, every 6th image of a class is a test image
# Pillow modes without colour; "P" (a palette) is judged by its colours.
_GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})
PROGRESS_FROM_IMAGES = 500  # a folder this large shows a progress bar while it decodes


@dataclass(frozen=True)
class Listing:
    """What the folder holds: each split's (image, class index) pairs, the class names."""

    root: Path
    class_names: tuple[str, ...]
    splits: dict[str, list[tuple[Path, int]]]  # "train" / "test"

    def key(self, image_size: int | None) -> str:
        """SHA-256 over every file's path, size and mtime and the requested size: what
        decoding would depend on, found without opening an image."""
        digest = hashlib.sha256(f"{image_size}\n{self.class_names}\n".encode())
        for split, items in self.splits.items():
            for path, label in items:
                stat = path.stat()
                digest.update(f"{split}\t{label}\t{path.relative_to(self.root)}\t"
                              f"{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
        return digest.hexdigest()


def _images_under(folder: Path) -> list[Path]:
    """Image files below ``folder`` (recursively, hidden ones left out), sorted."""
    found = []
    for parent, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [Path(parent) / f for f in files
                  if not f.startswith(".") and f.lower().endswith(IMAGE_SUFFIXES)]
    return sorted(found)


def _class_folders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _layout_hint(root: Path) -> str:
    return (f"lay it out as {root}/<class>/<image>.png, a subfolder per class "
            "(torchvision's ImageFolder)")


def listing(root: Path) -> Listing:
    """The folder's classes and splits; ``ConfigError`` for a layout that cannot train."""
    root = Path(root)
    test_dir = next((root / n for n in TEST_SPLIT_NAMES if (root / n).is_dir()), None)
    split_dirs = (root / "train").is_dir() and test_dir is not None
    train_root = root / "train" if split_dirs else root
    classes = _class_folders(train_root)
    if not classes:
        raise ConfigError(f"--dataset {root} has no class subfolders: {_layout_hint(root)}")
    if len(classes) < 2:
        raise ConfigError(f"--dataset {root} has one class ({classes[0].name}): "
                          f"a classifier needs two or more, {_layout_hint(root)}")
    names = tuple(c.name for c in classes)
    splits: dict[str, list[tuple[Path, int]]] = {"train": [], "test": []}
    for label, folder in enumerate(classes):
        images = _images_under(folder)
        if not images:
            raise ConfigError(f"--dataset {root}: class folder {folder} holds no images "
                              f"({', '.join(IMAGE_SUFFIXES)}): add some or remove it")
        if split_dirs:
            splits["train"] += [(p, label) for p in images]
        else:
            for i, path in enumerate(images):
                split = "test" if i % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1 else "train"
                splits[split].append((path, label))
    if split_dirs:
        for folder in _class_folders(test_dir):
            if folder.name not in names:
                raise ConfigError(f"--dataset {root}: {folder} is a class that "
                                  f"{train_root} has not: give both splits the same "
                                  "class folders")
            label = names.index(folder.name)
            splits["test"] += [(p, label) for p in _images_under(folder)]
    if not splits["test"]:
        raise ConfigError(f"--dataset {root} has no test images: put some in "
                          f"{test_dir or root / 'test'}/<class>/, or give each class "
                          f"{HOLD_OUT_EVERY} images or more")
    return Listing(root, names, splits)


def _is_colour(image) -> bool:
    if image.mode in _GREY_MODES:
        return False
    if image.mode in ("P", "PA"):
        rgb = np.asarray(image.convert("RGB"))
        return bool((rgb[..., 0] != rgb[..., 1]).any() or (rgb[..., 1] != rgb[..., 2]).any())
    return True


def decode(found: Listing, image_size: int | None, progress: bool = False
           ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], bool]:
    """Every image of ``found`` decoded: split -> (uint8 NCHW images, int64 labels), and
    whether they are in colour. ``ConfigError`` names the first file that fails. With
    ``progress`` a large folder shows a bar on stderr."""
    from PIL import Image, UnidentifiedImageError
    from tqdm import tqdm

    total = sum(len(items) for items in found.splits.values())
    pixels: dict[str, list[np.ndarray]] = {"train": [], "test": []}
    colour = False
    size = first = None
    with tqdm(total=total, desc=f"decoding {found.root.name}", unit="image",
              file=sys.stderr, disable=not progress or total < PROGRESS_FROM_IMAGES) as bar:
        for split, items in found.splits.items():
            for path, _ in items:
                try:
                    with Image.open(path) as image:
                        image_colour = _is_colour(image)
                        image = image.convert("RGB" if image_colour else "L")
                        if image_size is not None and image.size != (image_size,) * 2:
                            image = image.resize((image_size, image_size),
                                                 Image.Resampling.BILINEAR)
                        array = np.asarray(image, dtype=np.uint8)
                except UnidentifiedImageError:
                    raise ConfigError(f"--dataset {found.root}: {path} is not an image "
                                      "Pillow can decode: remove or replace it") from None
                except (OSError, ValueError) as exc:  # a truncated or corrupt image
                    raise ConfigError(f"--dataset {found.root}: {path} does not decode "
                                      f"({exc}): remove or replace it") from None
                if size is None:
                    size, first = image.size, path
                elif image.size != size:
                    raise ConfigError(
                        f"--dataset {found.root}: images differ in size "
                        f"({first.relative_to(found.root)} is {size[0]}x{size[1]}, "
                        f"{path.relative_to(found.root)} {image.size[0]}x{image.size[1]}): "
                        "give --image-size N to resize them all to NxN")
                colour |= image_colour
                pixels[split].append(array)
                bar.update()
    arrays = {}
    for split, items in found.splits.items():
        labels = np.asarray([label for _, label in items], dtype=np.int64)
        arrays[split] = (_stack(pixels[split], colour), labels)
    return arrays, colour


def _stack(images: list[np.ndarray], colour: bool) -> np.ndarray:
    """NCHW uint8: grey images repeated into three channels when the set is in colour."""
    height, width = images[0].shape[:2]
    out = np.empty((len(images), 3 if colour else 1, height, width), np.uint8)
    for i, image in enumerate(images):
        out[i] = image.transpose(2, 0, 1) if image.ndim == 3 else image
    return out
