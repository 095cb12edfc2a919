"""The image of the trainer: what a node runs, as a Docker image built without a registry.

``edgeprof image build`` makes it from Debian packages (``mmdebstrap``) and PyPI wheels
(pip, run on this host for the image's platform) and imports it into a Docker daemon
through the Engine API. The modules, one purpose each:

- ``recipe``: what goes in (flavours, architectures, Debian packages, pins, the node's
  source files) and the digest of all of it, which names the image's tag;
- ``root``: the root filesystem and the Python packages, written as one layer's tar;
- ``daemon``: the Docker daemon: reach it, find an image, import the layer;
- ``build``: the steps in order, reusing an image whose tag is already there;
- ``cli``: ``edgeprof image build``.

Details and measured sizes: docs/image.md.
"""
