"""Engines by name. Horovod is imported only when asked for (it is an optional build)."""

from __future__ import annotations

from ..errors import ConfigError
from .base import Engine


def get_engine(name: str) -> Engine:
    if name == "mxnet":
        from .mxnet import MXNetEngine
        return MXNetEngine()
    if name == "horovod":
        from .horovod import HorovodEngine
        return HorovodEngine()
    raise ConfigError(f"unknown engine {name!r}: use mxnet or horovod")
