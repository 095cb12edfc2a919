"""What runs on a node: models, datasets and the training entry point (``workloads.train``).

Importing this package, ``workloads.models`` or ``workloads.datasets`` does not import
MXNet: the profiler validates cells and data folders without paying for it.
"""
