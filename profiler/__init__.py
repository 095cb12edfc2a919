"""edgeprof: profile distributed deep-learning training on edge clusters."""

__version__ = "0.1.0"
