"""Errors the library raises for bad input; the CLI turns them into one line and exit 2.

Library code raises, only ``profiler.cli`` prints and exits. Every message names the
problem *and* the fix, e.g. ``--layers 33 is not a CIFAR ResNet depth: use 6n+2 (20, 32, 44, ...)``.
"""


class EdgeprofError(Exception):
    """Bad input or an unusable environment, reported to the user as one line (exit 2)."""


class ConfigError(EdgeprofError):
    """A sweep or cell setting that cannot work (bad depth, batch 0, unknown model)."""


class DataError(EdgeprofError):
    """A dataset folder with missing or corrupt files."""


class ClusterError(EdgeprofError):
    """A cluster that cannot be used (not root, kernel feature missing, node unreachable)."""


class PluginError(ConfigError):
    """An installed plugin (an entry point of ``profiler.plugins``) that cannot be used:
    it does not import, is not what its group takes, or its name is taken."""
